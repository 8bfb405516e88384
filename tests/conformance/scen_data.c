/* Stream and datagram data semantics: bytes, boundaries, flags, vectors. */
#include "conf.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/uio.h>
#include <unistd.h>

STREAM_SCEN(basic_both_ways)
{
	char a[100], b[100];
	int c, s;

	fam_pair(f, &c, &s);
	fill(a, sizeof(a), 1);
	R("send c->s", send(c, a, sizeof(a), 0));
	R("read_all s", read_all(s, b, sizeof(b)));
	out("same bytes: %s", memcmp(a, b, sizeof(a)) ? "no" : "yes");
	fill(a, sizeof(a), 2);
	R("write s->c", write(s, a, 60));
	R("read_all c", read_all(c, b, 60));
	out("same bytes: %s", memcmp(a, b, 60) ? "no" : "yes");
}

STREAM_SCEN(partial_reads)
{
	char a[100], b[100];
	int c, s;

	fam_pair(f, &c, &s);
	fill(a, sizeof(a), 3);
	R("send", send(c, a, 100, 0));
	out("readable: %s", pollname((unsigned)wait_fd(s, POLLIN, 2000)));
	R("recv 30", recv(s, b, 30, 0));
	R("recv 100", recv(s, b + 30, 100, 0));
	out("same bytes: %s", memcmp(a, b, 100) ? "no" : "yes");
	R("recv empty dontwait", recv(s, b, 10, MSG_DONTWAIT));
}

STREAM_SCEN(msg_peek)
{
	char a[10] = "0123456789", b[16] = { 0 };
	int c, s;

	fam_pair(f, &c, &s);
	R("send", send(c, a, 10, 0));
	wait_fd(s, POLLIN, 2000);
	R("peek 10", recv(s, b, 10, MSG_PEEK));
	out("peeked: %.10s", b);
	R("peek 4", recv(s, b, 4, MSG_PEEK));
	R("read 6", read(s, b, 6));
	out("read: %.6s", b);
	R("peek rest", recv(s, b, 16, MSG_PEEK | MSG_DONTWAIT));
	R("read rest", recv(s, b, 16, 0));
	out("rest: %.4s", b);
	R("peek empty", recv(s, b, 16, MSG_PEEK | MSG_DONTWAIT));
}

static void *slow_writer(void *arg)
{
	int fd = *(int *)arg;
	char buf[1000];

	for (int i = 0; i < 3; i++) {
		msleep(20);
		fill(buf, sizeof(buf), (unsigned)i);
		write_all(fd, buf, sizeof(buf));
	}
	return NULL;
}

STREAM_SCEN(msg_waitall)
{
	char b[3000];
	int c, s;
	pthread_t t;

	fam_pair(f, &c, &s);
	pthread_create(&t, NULL, slow_writer, &c);
	R("recv waitall 3000", recv(s, b, sizeof(b), MSG_WAITALL));
	pthread_join(t, NULL);
	out("csum ok: %s", csum(b, 1000) != 0 ? "yes" : "no");
}

STREAM_SCEN(nonblock_via_fcntl)
{
	char b[8];
	int c, s, fl;

	fam_pair(f, &c, &s);
	fl = fcntl(s, F_GETFL);
	out("nonblock before: %s", fl & O_NONBLOCK ? "yes" : "no");
	R("setfl", fcntl(s, F_SETFL, fl | O_NONBLOCK));
	out("nonblock after: %s", fcntl(s, F_GETFL) & O_NONBLOCK ? "yes" : "no");
	R("recv", recv(s, b, sizeof(b), 0));
	R("read", read(s, b, sizeof(b)));
	R("send", send(c, "x", 1, 0));
	wait_fd(s, POLLIN, 2000);
	R("recv after data", recv(s, b, sizeof(b), 0));
	R("setfl back", fcntl(s, F_SETFL, fl));
	out("nonblock cleared: %s", fcntl(s, F_GETFL) & O_NONBLOCK ? "no" : "yes");
}

STREAM_NOCONN_SCEN(nonblock_socket_flag)
{
	int fd = fam_socket(f, SOCK_NONBLOCK | SOCK_CLOEXEC);
	char b[4];

	out("O_NONBLOCK: %s", fcntl(fd, F_GETFL) & O_NONBLOCK ? "yes" : "no");
	out("FD_CLOEXEC: %s", fcntl(fd, F_GETFD) & FD_CLOEXEC ? "yes" : "no");
	R("recv unconnected", recv(fd, b, 4, 0));
}

static void *drain(void *arg)
{
	return (void *)read_to_eof(*(int *)arg);
}

STREAM_SCEN(send_until_eagain)
{
	int c, s;
	long filled;
	void *got;
	pthread_t t;

	fam_pair(f, &c, &s);
	fcntl(c, F_SETFL, O_NONBLOCK);
	filled = fill_until_eagain(c);
	out("filled some then EAGAIN: %s", filled > 0 ? "yes" : "no");
	if (!fam_on_wire(f))
		out("writable now: %s", wait_fd(c, POLLOUT, 0) & POLLOUT ? "yes" : "no");
	pthread_create(&t, NULL, drain, &s);
	out("writable after drain starts: %s", wait_fd(c, POLLOUT, 5000) & POLLOUT ? "yes" : "no");
	shutdown(c, SHUT_WR);
	pthread_join(t, &got);
	out("all drained: %s", (long)got == filled ? "yes" : "no");
}

STREAM_SCEN(readv_writev)
{
	char a[5] = "hello", z[1], d[7] = "-world!", r1[4], r2[8];
	struct iovec w[3] = { { a, 5 }, { z, 0 }, { d, 7 } }, r[2] = { { r1, 4 }, { r2, 8 } };
	int c, s;

	fam_pair(f, &c, &s);
	R("writev", writev(c, w, 3));
	wait_fd(s, POLLIN, 2000);
	R("readv", readv(s, r, 2));
	out("got: %.4s|%.8s", r1, r2);
	R("writev none", writev(c, w, 0));
	volatile int neg = -1;
	R("readv bad count", readv(s, r, neg));
}

STREAM_SCEN(sendmsg_recvmsg)
{
	char a[3] = "abc", b[4] = "defg", buf[16] = { 0 };
	struct iovec w[2] = { { a, 3 }, { b, 4 } }, r = { buf, sizeof(buf) };
	struct msghdr m = { .msg_iov = w, .msg_iovlen = 2 };
	struct msghdr in = { .msg_iov = &r, .msg_iovlen = 1 };
	int c, s;

	fam_pair(f, &c, &s);
	R("sendmsg", sendmsg(c, &m, 0));
	wait_fd(s, POLLIN, 2000);
	R("recvmsg", recvmsg(s, &in, 0));
	out("data: %.7s flags: 0x%x namelen: %u", buf, in.msg_flags, in.msg_namelen);
	R("sendmsg nosignal", sendmsg(c, &m, MSG_NOSIGNAL));
	in.msg_iov->iov_len = 2;
	R("recvmsg small", recvmsg(s, &in, 0));
	out("flags: 0x%x", in.msg_flags);
}

STREAM_SCEN(zero_length)
{
	char b[4];
	int c, s;

	fam_pair(f, &c, &s);
	R("write 0", write(c, b, 0));
	R("send 0", send(c, b, 0, 0));
	R("recv 0 dontwait", recv(s, b, 0, MSG_DONTWAIT));
	R("read 0", read(s, b, 0));
}

static void *big_writer(void *arg)
{
	int fd = *(int *)arg;
	char *buf = malloc(4 << 20);

	fill(buf, 4 << 20, 77);
	write_all(fd, buf, 4 << 20);
	free(buf);
	return NULL;
}

STREAM_SCEN(large_transfer_4mib)
{
	char *buf = malloc(4 << 20), *ref = malloc(4 << 20);
	int c, s;
	pthread_t t;

	fam_pair(f, &c, &s);
	pthread_create(&t, NULL, big_writer, &c);
	R("read_all", read_all(s, buf, 4 << 20));
	pthread_join(t, NULL);
	fill(ref, 4 << 20, 77);
	out("byte-exact: %s", memcmp(buf, ref, 4 << 20) ? "no" : "yes");
	free(buf);
	free(ref);
}

STREAM_SCEN(sendfile_from_file)
{
	char path[] = "/tmp/dsock-conf-XXXXXX", *data = malloc(100000), *got = malloc(100000);
	int fd = mkstemp(path), c, s;
	off_t off = 1000;
	pthread_t t;

	unlink(path);
	fill(data, 100000, 9);
	write_all(fd, data, 100000);
	fam_pair(f, &c, &s);
	(void)t;
	R("sendfile from 1000, 50000", sendfile(c, fd, &off, 50000));
	out("offset now: %ld", (long)off);
	R("read_all", read_all(s, got, 50000));
	out("byte-exact: %s", memcmp(got, data + 1000, 50000) ? "no" : "yes");
	R("sendfile at EOF", sendfile(c, fd, NULL, 10));
	R("sendfile bad in fd", sendfile(c, 9999, NULL, 10));
	int wo = open("/dev/null", O_WRONLY);
	R("sendfile from a write-only fd", sendfile(c, wo, NULL, 10));
	close(wo);
	close(fd);
	free(data);
	free(got);
}

/* A nonblocking sender streams a file larger than any socket buffer with
 * sendfile from the file's own position (waiting for POLLOUT between the
 * calls), then asks past the end from an explicit offset; the reader
 * checks every byte.  How much each call takes, and whether one met a
 * full buffer, is the buffer's business and is not printed. */
#define SF_LEN ((3 << 20) + 777)
struct sf_reader {
	int fd;
	char *buf;
	long got;
};

static void *sf_read(void *arg)
{
	struct sf_reader *r = arg;
	r->got = read_all(r->fd, r->buf, SF_LEN);
	return NULL;
}

STREAM_SCEN(sendfile_nonblocking_stream)
{
	char *data = malloc(SF_LEN), *got = malloc(SF_LEN);
	int file = memfd_create("conf-sendfile", MFD_CLOEXEC), c, s, calls = 0, bad = 0;
	long sent = 0;
	off_t off = SF_LEN - 77;
	struct sf_reader r;
	pthread_t t;

	fill(data, SF_LEN, 21);
	write_all(file, data, SF_LEN);
	lseek(file, 0, SEEK_SET);
	fam_pair(f, &c, &s);
	fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);
	r = (struct sf_reader){ s, got, 0 };
	pthread_create(&t, NULL, sf_read, &r);
	while (sent < SF_LEN - 77 && calls++ < 100000) {
		ssize_t n = sendfile(c, file, NULL, (size_t)(SF_LEN - 77 - sent));
		if (n > 0)
			sent += n;
		else if (n < 0 && errno == EAGAIN)
			wait_fd(c, POLLOUT, 2000);
		else
			bad++;
	}
	out("sent from the file position: %ld, failed calls: %d", sent, bad);
	out("file position: %lld", (long long)lseek(file, 0, SEEK_CUR));
	while (wait_fd(c, POLLOUT, 2000) && (sent = sendfile(c, file, &off, 1000)) < 0 && errno == EAGAIN)
		;
	out("past the end from %d: %ld, offset now %lld", SF_LEN - 77, (long)sent, (long long)off);
	R("at the end", sendfile(c, file, &off, 1000));
	pthread_join(t, NULL);
	out("reader got %ld, byte-exact: %s", r.got, r.got == SF_LEN && !memcmp(got, data, SF_LEN) ? "yes" : "no");
	close(file);
	free(data);
	free(got);
}

STREAM_SCEN(fionread)
{
	char a[123] = { 0 };
	int c, s, n = -1;

	fam_pair(f, &c, &s);
	R("FIONREAD empty", ioctl(s, FIONREAD, &n));
	out("n = %d", n);
	send(c, a, sizeof(a), 0);
	wait_fd(s, POLLIN, 2000);
	R("FIONREAD", ioctl(s, FIONREAD, &n));
	out("n = %d", n);
	recv(s, a, 23, 0);
	ioctl(s, FIONREAD, &n);
	out("after reading 23: %d", n);
}

DGRAM_SCEN(boundaries)
{
	char a[64], b[64];
	int c, s;

	fam_pair(f, &c, &s);
	fill(a, sizeof(a), 4);
	R("send 10", send(c, a, 10, 0));
	R("send 20", send(c, a, 20, 0));
	R("send 30", send(c, a, 30, 0));
	wait_fd(s, POLLIN, 2000);
	R("recv", recv(s, b, sizeof(b), 0));
	R("recv", recv(s, b, sizeof(b), 0));
	R("recv", recv(s, b, sizeof(b), 0));
	out("same bytes: %s", memcmp(a, b, 30) ? "no" : "yes");
	R("recv empty", recv(s, b, sizeof(b), MSG_DONTWAIT));
}

DGRAM_SCEN(truncation)
{
	char a[50] = { 0 }, b[64];
	struct iovec v = { b, 5 };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1 };
	int c, s;

	fam_pair(f, &c, &s);
	send(c, a, 50, 0);
	send(c, a, 40, 0);
	send(c, a, 30, 0);
	wait_fd(s, POLLIN, 2000);
	R("recvmsg 5 of 50", recvmsg(s, &m, 0));
	out("MSG_TRUNC: %s", m.msg_flags & MSG_TRUNC ? "yes" : "no");
	R("recv MSG_TRUNC 5 of 40", recv(s, b, 5, MSG_TRUNC));
	R("recv 64 of 30", recv(s, b, 64, 0));
}

DGRAM_SCEN(peek_and_fionread)
{
	char b[64];
	int c, s, n = -1;

	fam_pair(f, &c, &s);
	send(c, "abcdefgh", 8, 0);
	send(c, "xyz", 3, 0);
	wait_fd(s, POLLIN, 2000);
	R("FIONREAD", ioctl(s, FIONREAD, &n));
	out("n = %d", n);
	R("peek", recv(s, b, 64, MSG_PEEK));
	R("recv", recv(s, b, 64, 0));
	out("data: %.8s", b);
	R("recv", recv(s, b, 64, 0));
	out("data: %.3s", b);
}

DGRAM_SCEN(zero_length_datagram)
{
	char b[8];
	int c, s;

	fam_pair(f, &c, &s);
	R("send 0", send(c, b, 0, 0));
	out("readable: %s", pollname((unsigned)wait_fd(s, POLLIN, 2000)));
	R("recv", recv(s, b, 8, MSG_DONTWAIT));
	R("recv again", recv(s, b, 8, MSG_DONTWAIT));
}

DGRAM_SCEN(mmsg_batch)
{
	char a[3][16], b[4][16];
	struct iovec wv[3], rv[4];
	struct mmsghdr w[3], r[4];
	int c, s;

	fam_pair(f, &c, &s);
	memset(w, 0, sizeof(w));
	memset(r, 0, sizeof(r));
	for (int i = 0; i < 3; i++) {
		memset(a[i], 'a' + i, 16);
		wv[i] = (struct iovec){ a[i], (size_t)(5 + i) };
		w[i].msg_hdr.msg_iov = &wv[i];
		w[i].msg_hdr.msg_iovlen = 1;
	}
	for (int i = 0; i < 4; i++) {
		rv[i] = (struct iovec){ b[i], 16 };
		r[i].msg_hdr.msg_iov = &rv[i];
		r[i].msg_hdr.msg_iovlen = 1;
	}
	R("sendmmsg 3", sendmmsg(c, w, 3, 0));
	wait_fd(s, POLLIN, 2000);
	R("recvmmsg 4 dontwait", recvmmsg(s, r, 4, MSG_DONTWAIT, NULL));
	for (int i = 0; i < 3; i++)
		out("msg %d len %u first %c", i, r[i].msg_len, b[i][0]);
}

DGRAM_SCEN(recvfrom_source)
{
	struct sockaddr_storage a, src, me;
	socklen_t al, sl = sizeof(src), ml = sizeof(me);
	int srv = fam_server(f, &a, &al), c = fam_socket(f, 0);
	char b[8];

	if (f->domain == AF_UNIX) {
		/* an unbound unix datagram sender has no name: bind it */
		struct sockaddr_storage x;
		socklen_t xl;
		int tmp = fam_server(f, &x, &xl);
		close(tmp);
		bind(c, (struct sockaddr *)&x, xl);
	}
	R("sendto", sendto(c, "hi", 2, 0, (struct sockaddr *)&a, al));
	getsockname(c, (struct sockaddr *)&me, &ml);
	wait_fd(srv, POLLIN, 2000);
	R("recvfrom", recvfrom(srv, b, 8, 0, (struct sockaddr *)&src, &sl));
	out("source family %d len %u, equals sender's name: %s", src.ss_family, sl,
	    sl == ml && !memcmp(&src, &me, sl) ? "yes" : "no");
}

DGRAM_SCEN(send_to_nobody)
{
	struct sockaddr_storage a;
	socklen_t al;
	int c = fam_socket(f, 0);
	char b[4];

	fam_dead_addr(f, &a, &al);
	R("connect", connect(c, (struct sockaddr *)&a, al));
	R("send", send(c, "x", 1, 0));
	msleep(20);
	R("recv dontwait", recv(c, b, 4, MSG_DONTWAIT));
	R("recv dontwait again", recv(c, b, 4, MSG_DONTWAIT));
}

/* A fresh connection's first calls made by two threads at once, on both
 * ends: a reader and a writer on the client, an echo thread on the server
 * (Python's threaded echo).  Under dsock the first call offers the
 * connection to the daemon and a later one attaches its answer; two
 * threads that get there together must not both offer (a looping pending
 * list: the process spins forever) nor both attach (the second on a
 * closed memfd, sending back to the kernel a connection whose peer has
 * already moved to its ring: a hang).  Several cold connections, more
 * bytes than the kernel buffers hold, every byte checked. */
#define COLD_CONNS 12
#define COLD_BYTES (1L << 20)

struct cold {
	int fd;
	atomic_int *go; /* a spinning barrier: both first calls at once */
	char *buf;
	long got;
};

static void *cold_echo(void *arg)
{
	struct cold *k = arg;
	char buf[65536];
	ssize_t n;

	while ((n = recv(k->fd, buf, sizeof(buf), 0)) > 0)
		if (write_all(k->fd, buf, (size_t)n) != n)
			break;
	close(k->fd);
	return NULL;
}

static void *cold_reader(void *arg)
{
	struct cold *k = arg;
	ssize_t n;

	atomic_fetch_add(k->go, 1);
	while (atomic_load(k->go) < 2)
		;
	while (k->got < COLD_BYTES && (n = recv(k->fd, k->buf + k->got, (size_t)(COLD_BYTES - k->got), 0)) > 0)
		k->got += n;
	return NULL;
}

STREAM_SCEN(threads_first_calls_cold)
{
	struct sockaddr_storage a;
	socklen_t al;
	int l = fam_server(f, &a, &al), exact = 0;
	char *data = malloc(COLD_BYTES), *back = malloc(COLD_BYTES);

	fill(data, COLD_BYTES, 7);
	for (int i = 0; i < COLD_CONNS; i++) {
		atomic_int go = 0;
		pthread_t te, tr;
		struct cold srv = { 0 }, cli;
		int c = fam_socket(f, 0);

		if (connect(c, (struct sockaddr *)&a, al) < 0 || (srv.fd = accept(l, NULL, NULL)) < 0) {
			out("stream pair failed: %s", ename(errno));
			exit(3);
		}
		cli = (struct cold){ .fd = c, .go = &go, .buf = back };
		memset(back, 0, COLD_BYTES);
		pthread_create(&te, NULL, cold_echo, &srv);
		pthread_create(&tr, NULL, cold_reader, &cli);
		atomic_fetch_add(&go, 1); /* the writer's first call with the reader's */
		while (atomic_load(&go) < 2)
			;
		long w = write_all(c, data, COLD_BYTES);
		pthread_join(tr, NULL);
		shutdown(c, SHUT_WR);
		pthread_join(te, NULL);
		close(c);
		exact += w == COLD_BYTES && cli.got == COLD_BYTES && !memcmp(back, data, COLD_BYTES);
	}
	close(l);
	out("connections echoed byte-exact: %d of %d", exact, COLD_CONNS);
	free(data);
	free(back);
}
