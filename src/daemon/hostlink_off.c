/* The links between hosts where dsockd is built without OpenSSL's
 * headers: off, and asked for, an error. */
#ifndef DSOCK_HAVE_TLS
#include "daemon/hostlink.h"
#include "daemon/hostchan.h"
#include "common/log.h"
#include "common/reason.h"

#include <stdlib.h>

int dd_hosts_start(const char *socket_path, int epfd, uint32_t slot_base)
{
	const char *allow = getenv("DSOCK_HOSTS_ALLOW");

	(void)socket_path;
	(void)epfd;
	(void)slot_base;
	if (allow && *allow)
		DSOCK_ERR("links to other hosts off: dsockd was built without TLS (libssl-dev)");
	return allow && *allow ? -1 : 0;
}
int dd_hosts_on(void) { return 0; }
void dd_hosts_reload(void) {}
void dd_hosts_event(uint32_t slot, uint32_t events) { (void)slot; (void)events; }
int dd_hosts_tick(void) { return -1; }
void dd_hosts_stop(void) {}
int64_t dd_hosts_claim(const struct dsock_addr *addr, const struct dd_claim *c)
{
	(void)addr;
	(void)c;
	return -DSOCK_R_PEER_TIMEOUT;
}
void dd_hosts_answer(uint64_t gen, uint64_t id, unsigned result, unsigned reason)
{
	(void)gen; (void)id; (void)result; (void)reason;
}
int dd_hosts_confirm(uint64_t gen, uint64_t id, unsigned result)
{
	(void)gen; (void)id; (void)result;
	return 0;
}
int dd_hosts_channel(uint64_t gen, uint64_t id, const uint8_t token[DD_CHAN_TOKEN])
{
	(void)gen; (void)id; (void)token;
	return 0;
}
int dd_hosts_taken(uint64_t gen, uint64_t id)
{
	(void)gen; (void)id;
	return 0;
}
int dd_hosts_linked(const struct sockaddr_storage *from)
{
	(void)from;
	return 0;
}
int dd_hosts_link_addrs(uint64_t gen, struct sockaddr_storage *local, struct sockaddr_storage *peer)
{
	(void)gen; (void)local; (void)peer;
	return -1;
}
int dd_hosts_stat(int (*line)(int fd, const char *text), int fd) { (void)line; (void)fd; return 0; }
#endif
