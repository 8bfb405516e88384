/* A connection that a fork hands to its child before it carried much: the
 * accept-then-fork server (PostgreSQL, prefork and inetd-style servers).
 * The child serves the accepted end while the parent keeps the client end;
 * each process closes the end it does not use, or keeps it.  Under dsock
 * the last holder of each end may pair it, with the bytes that every
 * holder moved on the kernel before counted in its stream's origin. */
#include "conf.h"

#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 60

static size_t round_len(int i)
{
	return 1 + (size_t)(i * 331) % 20000;
}

/* The child's side: echoes what the client sends until EOF, or until
 * `upto` bytes (if not 0), then writes what it read to the pipe. */
static void serve_upto(int s, int done, long upto)
{
	char b[8192];
	long total = 0;
	ssize_t n;

	while ((n = read(s, b, upto ? (size_t)(upto - total < (long)sizeof(b) ? upto - total : (long)sizeof(b))
				    : sizeof(b))) > 0) {
		total += n;
		if (write_all(s, b, (size_t)n) != n || total == upto)
			break;
	}
	char msg[64];
	int len = snprintf(msg, sizeof(msg), "child echoed %ld, read end %s", total,
			   n == 0 ? "eof" : total == upto ? "counted" : "error");
	write(done, msg, (size_t)len);
	close(s);
	_exit(0);
}

/* The client's ROUNDS messages of growing sizes, each echoed before the
 * next. */
static void rounds(int c)
{
	static char m[20000], got[20000];
	long bad = 0, total = 0;

	for (int i = 0; i < ROUNDS; i++) {
		size_t len = round_len(i);
		fill(m, len, (unsigned)i);
		if (write_all(c, m, len) != (long)len || read_all(c, got, len) != (long)len) {
			out("round %d failed: %s", i, ename(errno));
			break;
		}
		bad += memcmp(m, got, len) != 0;
		total += (long)len;
	}
	out("%d rounds, %ld bytes echoed, %ld differ", ROUNDS, total, bad);
}

/* The client's side: the rounds; then (the parent's copy of the accepted
 * end closed, if it kept one) EOF and the child's report. */
static void converse(int c, int done, pid_t pid, int kept)
{
	char got[4], msg[64] = { 0 };
	int st;

	rounds(c);
	if (kept >= 0)
		R("parent closes its copy", close(kept));
	R("shutdown", shutdown(c, SHUT_WR));
	R("read after the child's close", read(c, got, 1));
	R("report", read(done, msg, sizeof(msg) - 1) > 0);
	out("%s", msg);
	waitpid(pid, &st, 0);
	out("child exit %d", WEXITSTATUS(st));
}

/* A connection (*c, *s) and a fork child that keeps only s and serves it
 * (serve_upto); *done reads its report.  Returns the child's pid. */
static pid_t fork_server(const struct fam *f, int *c, int *s, int *done, long upto)
{
	int p[2];
	pid_t pid;

	fam_pair(f, c, s);
	CHECK(pipe(p) == 0);
	pid = fork();
	if (pid == 0) {
		close(*c);
		close(p[0]);
		serve_upto(*s, p[1], upto);
	}
	close(p[1]);
	*done = p[0];
	return pid;
}

STREAM_SCEN(prefork_child_serves_parent_closes)
{
	int c, s, done;
	pid_t pid = fork_server(f, &c, &s, &done, 0);

	close(s);
	converse(c, done, pid, -1);
	close(c);
}

/* Both processes move bytes on the accepted end before the parent closes
 * it: the parent reads the first 1,000 bytes the client sent and answers
 * 500, the child reads the other 2,000, then serves. */
STREAM_SCEN(prefork_both_move_bytes_then_parent_closes)
{
	char first[3000], b[3000];
	int c, s, p[2], go[2];
	pid_t pid;

	fam_pair(f, &c, &s);
	CHECK(pipe(p) == 0 && pipe(go) == 0);
	fill(first, sizeof(first), 7);
	pid = fork();
	if (pid == 0) {
		char x;
		close(c);
		close(p[0]);
		if (read(go[0], &x, 1) != 1)
			_exit(1);
		long n = read_all(s, b, 2000);
		char msg[64];
		snprintf(msg, sizeof(msg), "child read the rest: %ld, %-10s", n,
			 n == 2000 && !memcmp(b, first + 1000, 2000) ? "same" : "differs");
		write(p[1], msg, 40); /* (fixed length: the report follows) */
		serve_upto(s, p[1], 0);
	}
	close(p[1]);
	R("client sends 3000", write_all(c, first, sizeof(first)));
	R("parent reads 1000 of them", read_all(s, b, 1000));
	out("those are the first: %s", memcmp(b, first, 1000) ? "no" : "yes");
	fill(b, 500, 9);
	R("parent answers 500", write_all(s, b, 500));
	close(s);
	R("go", write(go[1], "g", 1));
	char note[64] = { 0 };
	R("child's first note", read_all(p[0], note, 40));
	out("%.40s", note);
	char got[500];
	R("client reads the parent's 500", read_all(c, got, 500));
	out("same: %s", memcmp(got, b, 500) ? "no" : "yes");
	converse(c, p[0], pid, -1);
	close(c);
}

/* The parent keeps its copy of the accepted end open all along. */
STREAM_SCEN(prefork_parent_keeps_its_copy)
{
	int c, s, done;
	pid_t pid = fork_server(f, &c, &s, &done, 0);

	converse(c, done, pid, s);
	close(c);
}

/* The parent keeps its copy; the child serves the rounds and leaves; then
 * the parent talks on its copy itself, both ways. */
STREAM_SCEN(prefork_child_serves_then_parent_takes_over)
{
	char a[1000], b[1000], msg[64] = { 0 };
	long all = 0;
	int c, s, done, st;

	for (int i = 0; i < ROUNDS; i++)
		all += (long)round_len(i);
	pid_t pid = fork_server(f, &c, &s, &done, all);
	rounds(c);
	R("report", read(done, msg, sizeof(msg) - 1) > 0);
	out("%s", msg);
	waitpid(pid, &st, 0);
	out("child exit %d", WEXITSTATUS(st));
	fill(a, sizeof(a), 3);
	R("parent sends on its copy", write_all(s, a, sizeof(a)));
	R("client reads", read_all(c, b, sizeof(b)));
	out("same: %s", memcmp(a, b, sizeof(a)) ? "no" : "yes");
	fill(a, sizeof(a), 4);
	R("client sends", write_all(c, a, sizeof(a)));
	R("parent reads on its copy", read_all(s, b, sizeof(b)));
	out("same: %s", memcmp(a, b, sizeof(a)) ? "no" : "yes");
	close(s);
	R("client reads EOF", read(c, b, 1));
	close(c);
}

/* The child forks again: the grandchild serves, the child and the parent
 * close their copies (three holders, then one). */
STREAM_SCEN(prefork_grandchild_serves)
{
	int c, s, p[2], st;
	pid_t pid;

	fam_pair(f, &c, &s);
	CHECK(pipe(p) == 0);
	pid = fork();
	if (pid == 0) {
		close(c);
		close(p[0]);
		pid_t g = fork();
		if (g == 0)
			serve_upto(s, p[1], 0);
		close(s);
		close(p[1]);
		waitpid(g, &st, 0);
		_exit(WEXITSTATUS(st));
	}
	close(p[1]);
	close(s);
	converse(c, p[0], pid, -1);
	close(c);
}

struct busy {
	int c, s;
	long bad;
};

static void *round_trips(void *arg)
{
	struct busy *b = arg;
	char m[3000], got[3000];

	for (int i = 0; i < 300; i++) {
		size_t len = 1 + (size_t)(i * 97) % sizeof(m);
		fill(m, len, (unsigned)i);
		if (write_all(b->c, m, len) != (long)len || read_all(b->s, got, len) != (long)len ||
		    write_all(b->s, got, len) != (long)len || read_all(b->c, got, len) != (long)len) {
			b->bad = -1;
			break;
		}
		b->bad += memcmp(m, got, len) != 0;
	}
	return NULL;
}

/* A thread moves bytes both ways on a connection while another forks
 * children that make a data call on it and close it: the forks meet the
 * connection due to offer, offering and pairing. */
STREAM_SCEN(prefork_while_a_thread_moves_bytes)
{
	struct busy b = { 0 };
	pthread_t t;
	int st, forks = 0;

	fam_pair(f, &b.c, &b.s);
	CHECK(pthread_create(&t, NULL, round_trips, &b) == 0);
	for (int i = 0; i < 20; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			char x;
			recv(b.s, &x, 1, MSG_PEEK | MSG_DONTWAIT);
			close(b.c);
			close(b.s);
			_exit(0);
		}
		forks += pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
		msleep(2);
	}
	pthread_join(t, NULL);
	out("%d children, round trips %s", forks, b.bad == 0 ? "all same" : b.bad < 0 ? "failed" : "differ");
	char x = 'z';
	R("send after", send(b.c, &x, 1, 0));
	R("recv after", recv(b.s, &x, 1, 0));
	close(b.c);
	close(b.s);
}
