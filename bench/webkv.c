/* A small web application for the web-service benchmark (SocksDirect's
 * load balancer -> web application -> key-value store): an HTTP/1.1 server
 * that answers every request with the value of one key, fetched from redis
 * over a persistent connection.  Plain sockets and poll, one thread.
 *
 *   webkv PORT REDIS_PORT KEY [ADDR REDIS_ADDR]
 *
 * ADDR (where it listens) and REDIS_ADDR default to 127.0.0.1.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXC 256

static int connect_port(const char *addr, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1 || fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* GET key from redis; returns the value's length in val, or -1. */
static int redis_get(int r, const char *key, char *val, size_t cap)
{
	char req[256], rep[4096];
	int n = snprintf(req, sizeof(req), "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", strlen(key), key);
	size_t got = 0;
	long len = -2;
	char *body;

	if (write(r, req, (size_t)n) != n)
		return -1;
	for (;;) { /* "$LEN\r\nVALUE\r\n" */
		ssize_t k = read(r, rep + got, sizeof(rep) - 1 - got);
		if (k <= 0)
			return -1;
		got += (size_t)k;
		rep[got] = 0;
		if (rep[0] != '$')
			return -1;
		if (!(body = strstr(rep, "\r\n")))
			continue;
		len = atol(rep + 1);
		if (len < 0)
			return 0;
		if ((size_t)(body + 2 - rep) + (size_t)len + 2 <= got)
			break;
	}
	if ((size_t)len > cap)
		return -1;
	memcpy(val, body + 2, (size_t)len);
	return (int)len;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct pollfd p[MAXC + 1];
	char in[MAXC + 1][4096];
	size_t inl[MAXC + 1] = { 0 };
	int np = 1, l, r, one = 1;

	if (argc != 4 && argc != 6)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	sa.sin_port = htons((uint16_t)atoi(argv[1]));
	if (argc == 6 && inet_pton(AF_INET, argv[4], &sa.sin_addr) != 1)
		return 2;
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 64) < 0)
		return perror("webkv listen"), 1;
	if ((r = connect_port(argc == 6 ? argv[5] : "127.0.0.1", atoi(argv[2]))) < 0)
		return perror("webkv redis"), 1;
	p[0] = (struct pollfd){ .fd = l, .events = POLLIN };
	for (;;) {
		if (poll(p, (nfds_t)np, -1) < 0)
			continue;
		if (p[0].revents & POLLIN) {
			int c = accept(l, NULL, NULL);
			if (c >= 0 && np <= MAXC) {
				setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				inl[np] = 0;
				p[np++] = (struct pollfd){ .fd = c, .events = POLLIN };
			} else if (c >= 0) {
				close(c);
			}
		}
		for (int i = 1; i < np; i++) {
			if (!p[i].revents)
				continue;
			ssize_t k = read(p[i].fd, in[i] + inl[i], sizeof(in[i]) - 1 - inl[i]);
			if (k <= 0) {
				close(p[i].fd);
				p[i] = p[--np];
				memcpy(in[i], in[np], inl[np]);
				inl[i] = inl[np];
				i--;
				continue;
			}
			inl[i] += (size_t)k;
			in[i][inl[i]] = 0;
			char *end;
			while ((end = strstr(in[i], "\r\n\r\n"))) { /* a whole request (no body) */
				char val[2048], hdr[256];
				int vl = redis_get(r, argv[3], val, sizeof(val));
				if (vl < 0)
					return fprintf(stderr, "webkv: redis failed\n"), 1;
				int hl = snprintf(hdr, sizeof(hdr),
						  "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", vl);
				if (write(p[i].fd, hdr, (size_t)hl) != hl || write(p[i].fd, val, (size_t)vl) != vl)
					break;
				size_t used = (size_t)(end + 4 - in[i]);
				memmove(in[i], end + 4, inl[i] - used + 1);
				inl[i] -= used;
			}
		}
	}
}
