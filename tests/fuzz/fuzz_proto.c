/* Coverage-guided fuzzing of dsockd's control-protocol handling: each input
 * is a series of messages, each from one of four clients, some with an fd
 * attached (either end of a connected TCP socket, a sealed memfd, a listening
 * socket), fed to the daemon's own message handler (server.c is compiled into
 * this harness, so its static functions are the ones that run).
 *
 * Checked: no crash, no memory error or undefined behaviour (ASan, UBSan),
 * every fd handed in is consumed (the daemon's fd count is back where it
 * started once the clients are gone), and a client dropped for a bad
 * message leaves the others registered.
 *
 * Record format: ctl byte (bits 0-1 client, bit 2 attach an fd, bits 3-4
 * which fd, bit 5 repair the header so the payload is what gets fuzzed,
 * bit 6 the client is root), a length byte, then that many bytes. */
#include "../../src/daemon/server.c"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/syscall.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NCLI 4
static int peer_end[NCLI] = { -1, -1, -1, -1 };
static int tcp_conn = -1, tcp_peer = -1, tcp_listen = -1;

#define CHECK(c) do { if (!(c)) { \
	fprintf(stderr, "fuzz_proto: check failed: %s (line %d)\n", #c, __LINE__); abort(); } } while (0)

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	CHECK(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);

	dsock_log_setup("fuzz-dsockd", 2, getenv("DSOCK_LOG") ? dsock_log_level_parse(getenv("DSOCK_LOG"))
							    : DSOCK_LOG_ERROR);
	signal(SIGPIPE, SIG_IGN);
	nclients_max = NCLI;
	clients = calloc(NCLI, sizeof(*clients));
	for (int i = 0; i < NCLI; i++)
		clients[i].fd = -1;
	ep = epoll_create1(EPOLL_CLOEXEC);
	tcp_listen = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(ep >= 0 && tcp_listen >= 0 && bind(tcp_listen, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	      listen(tcp_listen, 4) == 0 && getsockname(tcp_listen, (struct sockaddr *)&a, &l) == 0);
	tcp_peer = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(tcp_peer >= 0 && connect(tcp_peer, (struct sockaddr *)&a, sizeof(a)) == 0);
	tcp_conn = accept4(tcp_listen, NULL, NULL, SOCK_CLOEXEC);
	CHECK(tcp_conn >= 0);
	return 0;
}

/* A client as on_accept makes one, its other end kept here to drain. */
static void open_client(int slot, int root)
{
	int sv[2];

	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
	clients[slot].fd = sv[0];
	clients[slot].role = ROLE_NEW;
	clients[slot].gen = next_gen++;
	clients[slot].cred.pid = getpid();
	clients[slot].cred.uid = root ? 0 : 4242;
	clients[slot].cred.gid = 0;
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	fcntl(sv[1], F_SETFL, O_NONBLOCK);
	peer_end[slot] = sv[1];
	nclients++;
}

static void drop_client(int slot)
{
	char buf[DSOCK_MSG_MAX];

	while (recv(peer_end[slot], buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
	client_close((uint32_t)slot);
	close(peer_end[slot]);
	peer_end[slot] = -1;
}

static int make_fd(unsigned kind)
{
	int fd;

	switch (kind) {
	case 0:
		return fcntl(tcp_conn, F_DUPFD_CLOEXEC, 0);
	case 1: /* its other end: two offers of one connection pair up */
		return fcntl(tcp_peer, F_DUPFD_CLOEXEC, 0);
	case 2: /* a mail page as the library makes it */
		fd = memfd_create("fuzz-mail", MFD_ALLOW_SEALING | MFD_CLOEXEC);
		if (fd >= 0 && (ftruncate(fd, 4096) || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK)))
			CHECK(0);
		return fd;
	default:
		return fcntl(tcp_listen, F_DUPFD_CLOEXEC, 0);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char msg[DSOCK_MSG_MAX];
	int before = count_fds();
	size_t i = 0;

	while (i + 2 <= size) {
		unsigned ctl = data[i], len = data[i + 1];
		int slot = (int)(ctl & 3), fd = -1, r;

		i += 2;
		if (len > size - i)
			len = (unsigned)(size - i);
		memcpy(msg, data + i, len);
		i += len;
		if (ctl & 0x20 && len >= sizeof(struct dsock_msg_hdr)) {
			struct dsock_msg_hdr *h = (struct dsock_msg_hdr *)msg;
			h->magic = DSOCK_PROTO_MAGIC;
			h->version = DSOCK_PROTO_VERSION;
			h->len = len;
			h->type = (uint16_t)(h->type % (DSOCK_MSG_TYPE_MAX + 2));
		}
		if (clients[slot].fd < 0)
			open_client(slot, ctl & 0x40);
		if (ctl & 4)
			CHECK((fd = make_fd((ctl >> 3) & 3)) >= 0);
		r = on_message(&clients[slot], (uint32_t)slot, msg, len, fd);
		if (r < 0) {
			stats.bad_msgs++;
			drop_client(slot);
		}
		dd_pairing_tick(0);
	}
	for (int s = 0; s < NCLI; s++)
		if (clients[s].fd >= 0)
			drop_client(s);
	CHECK(nclients == 0 && dd_proc_count() == 0);
	CHECK(count_fds() == before); /* every fd handed in was consumed */
	return 0;
}
