#include "common/proto.h"
#include "common/reason.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>

void dsock_msg_init(struct dsock_msg_hdr *h, uint16_t type, size_t payload_len,
		    uint32_t seq)
{
	h->magic = DSOCK_PROTO_MAGIC;
	h->version = DSOCK_PROTO_VERSION;
	h->type = type;
	h->len = (uint32_t)(sizeof(*h) + payload_len);
	h->seq = seq;
}

/* A fixed-size string field must hold a NUL and only printable bytes. */
static int check_str(const char *s, size_t n)
{
	const char *end = memchr(s, '\0', n);

	if (!end)
		return -EBADMSG;
	for (; s < end; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return -EBADMSG;
	return 0;
}

static int check_addr(const struct dsock_addr *a)
{
	return a->family == 0 || a->family == AF_INET || a->family == AF_INET6 ?
		0 : -EBADMSG;
}


int dsock_sock_event_check(const struct dsock_msg_sock_event *m)
{
	if (m->event < 1 || m->event > DSOCK_EV_MAX || m->fd < -1 ||
	    m->state < 1 || m->state > DSOCK_ST_MAX ||
	    m->path < 1 || m->path > DSOCK_PATH_MAX ||
	    m->reason >= DSOCK_R_MAX || m->pad != 0)
		return -EBADMSG;
	return check_addr(&m->local) ?: check_addr(&m->peer);
}

static int check_payload(const struct dsock_msg_hdr *h, size_t plen)
{
	const void *p = h + 1;

	switch (h->type) {
	case DSOCK_MSG_HELLO: {
		const struct dsock_msg_hello *m = p;
		if (plen != sizeof(*m) || (m->flags & ~DSOCK_HELLO_FLAGS) || m->ppid < 0 || m->pad)
			return -EBADMSG;
		if (check_str(m->comm, sizeof(m->comm)) ||
		    check_str(m->lib_version, sizeof(m->lib_version)))
			return -EBADMSG;
		return 0;
	}
	case DSOCK_MSG_SOCK_EVENT:
		return plen == sizeof(struct dsock_msg_sock_event) ? dsock_sock_event_check(p) : -EBADMSG;
	case DSOCK_MSG_OFFER: {
		const struct dsock_msg_offer *m = p;
		if (plen != sizeof(*m) || m->role < 1 || m->role > 2 || m->transport <= DSOCK_PATH_KERNEL ||
		    m->transport > DSOCK_PATH_MAX || m->proof < 1 || m->proof > DSOCK_PROOF_MAX)
			return -EBADMSG;
		return 0;
	}
	case DSOCK_MSG_FETCH: {
		const struct dsock_msg_fetch *m = p;
		if (plen != sizeof(*m) || m->transport <= DSOCK_PATH_KERNEL || m->transport > DSOCK_PATH_MAX ||
		    m->pad[0] || m->pad[1] || m->pad[2])
			return -EBADMSG;
		return 0;
	}
	case DSOCK_MSG_PEER_REQ:
		return plen == sizeof(struct dsock_msg_peer_req) ? 0 : -EBADMSG;
	case DSOCK_MSG_RESULT: {
		const struct dsock_msg_result *m = p;
		int linked = m->result == DSOCK_RES_PAIRED || m->result == DSOCK_RES_LINK || m->result == DSOCK_RES_POOL ||
			     m->result == DSOCK_RES_BELL;
		if (plen != sizeof(*m) || m->result < DSOCK_RES_PAIRED || m->result > DSOCK_RES_BELL ||
		    m->side > 1 || (m->result != DSOCK_RES_PEER && m->reason >= DSOCK_R_MAX) ||
		    (m->result == DSOCK_RES_PEER && m->reason > 4095) || m->transport > DSOCK_PATH_MAX ||
		    (m->result != DSOCK_RES_PEER && m->transport <= DSOCK_PATH_KERNEL) || m->link_side > 1 ||
		    (!linked && (m->link || m->link_side)) ||
		    (m->result != DSOCK_RES_PAIRED && m->result != DSOCK_RES_POOL && m->pool) ||
		    (m->result != DSOCK_RES_PAIRED && m->result != DSOCK_RES_FETCHED && m->pool_page))
			return -EBADMSG;
		return 0;
	}
	case DSOCK_MSG_STAT_LINE:
		/* text, NUL-terminated, printable */
		return plen > 0 ? check_str(p, plen) : -EBADMSG;
	case DSOCK_MSG_ERROR:
		return plen == sizeof(struct dsock_msg_error) ? 0 : -EBADMSG;
	case DSOCK_MSG_STAT_REQ:
	case DSOCK_MSG_EVENTS:
	case DSOCK_MSG_STAT_END:
	case DSOCK_MSG_SHUTDOWN:
	case DSOCK_MSG_ACK:
		return plen == 0 ? 0 : -EBADMSG;
	default:
		return -EBADMSG;
	}
}

int dsock_msg_check(const void *buf, size_t n)
{
	struct dsock_msg_hdr h;

	if (n < sizeof(h))
		return -EBADMSG;
	if (n > DSOCK_MSG_MAX)
		return -EMSGSIZE;
	memcpy(&h, buf, sizeof(h));
	if (h.magic != DSOCK_PROTO_MAGIC)
		return -EBADMSG;
	if (h.version != DSOCK_PROTO_VERSION)
		return -EPROTO;
	if (h.len != n || h.type < 1 || h.type > DSOCK_MSG_TYPE_MAX)
		return -EBADMSG;
	/* buf may be unaligned for the payload structs: callers receive into
	 * aligned buffers (see dsockd and the CLI), so cast is safe there. */
	return check_payload(buf, n - sizeof(h));
}

const char *dsock_event_name(unsigned ev)
{
	static const char *const n[] = { "?", "open", "connect", "accept", "close" };
	return ev <= DSOCK_EV_MAX ? n[ev] : "?";
}

const char *dsock_state_name(unsigned st)
{
	static const char *const n[] = { "?", "open", "bound", "listening",
					 "connecting", "connected" };
	return st <= DSOCK_ST_MAX ? n[st] : "?";
}

const char *dsock_path_name(unsigned path)
{
	return path == DSOCK_PATH_KERNEL ? "kernel" : path == DSOCK_PATH_SHM ? "shm" :
	       path == DSOCK_PATH_SOCKETPAIR ? "socketpair" : "?";
}

void dsock_addr_format(const struct dsock_addr *a, char *buf, size_t n)
{
	char ip[INET6_ADDRSTRLEN];
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (a->family == AF_INET && !memcmp(a->addr, v4mapped, 12)) {
		inet_ntop(AF_INET, a->addr + 12, ip, sizeof(ip));
		snprintf(buf, n, "%s:%u", ip, a->port);
	} else if (a->family == AF_INET6 || a->family == AF_INET) {
		inet_ntop(AF_INET6, a->addr, ip, sizeof(ip));
		snprintf(buf, n, "[%s]:%u", ip, a->port);
	} else {
		snprintf(buf, n, "-");
	}
}

void dsock_addr_from(struct dsock_addr *out, const struct sockaddr *a)
{
	memset(out, 0, sizeof(*out));
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)a;
		out->family = AF_INET;
		out->port = ntohs(in->sin_port);
		out->addr[10] = out->addr[11] = 0xff;
		memcpy(out->addr + 12, &in->sin_addr, 4);
	} else if (a->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)a;
		out->family = AF_INET6;
		out->port = ntohs(in6->sin6_port);
		memcpy(out->addr, &in6->sin6_addr, 16);
	}
}
