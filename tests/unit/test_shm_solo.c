/* Sends with no locked instruction (lib/sock/solo.h, the biased producer
 * lock in transport/shm/lock.c), and what must still hold:
 *
 * 1. Two threads sending on one socket: the first one's bias on the
 *    producer lock is revoked mid-stream, and both byte streams arrive
 *    whole and in order (each thread tags its bytes).
 * 2. The solo thread streams while another thread closes the socket under
 *    it (the closer waits for the section; a release under it would unmap
 *    the ring and crash the sender), 200 rounds.
 * 3. A signal handler on the solo thread closes the socket, often inside a
 *    send's section: the release waits for the section's end, 100 rounds.
 * 4. The role passes on when the solo thread exits.
 * Each of 2-4 in a fork child, whose first sending thread takes the role. */
#include "unit/unit.h"
#include "lib/sock/sock.h"
#include "lib/sock/solo.h"
#include "lib/transport/shm/shm.h"
#include "unit/shm_pair.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RING 65536u

/* ThreadSanitizer takes the child's re-initialised mutexes (after fork)
 * for the parent's, still locked, and a close in a signal handler is not
 * async-signal-safe under dsock (known limit): under it, 1 only. */
#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#else
#define UNDER_TSAN 0
#endif
#define PER_WRITER (2L << 20)

/* ---- 1. two writers ------------------------------------------------------ */
static atomic_int second_go;

struct wjob {
	int fd, id;
	unsigned seed;
};

static void *tag_writer(void *arg)
{
	struct wjob *j = arg;
	unsigned char buf[300];

	for (long off = 0; off < PER_WRITER;) {
		long n = 1 + rand_r(&j->seed) % (long)sizeof(buf);
		if (n > PER_WRITER - off)
			n = PER_WRITER - off;
		for (long i = 0; i < n; i++)
			buf[i] = (unsigned char)((j->id << 7) | ((off + i) & 0x7f));
		ssize_t w = send(j->fd, buf, (size_t)n, MSG_NOSIGNAL);
		if (w <= 0) {
			fprintf(stderr, "writer %d: %s\n", j->id, strerror(errno));
			return (void *)1;
		}
		off += w;
		if (j->id == 0 && off > PER_WRITER / 8)
			atomic_store(&second_go, 1); /* the first one's bias is in place */
	}
	return NULL;
}

static void two_writers(struct conn *k)
{
	struct wjob j[2] = { { k->a, 0, 1 }, { k->a, 1, 2 } };
	pthread_t t[2];
	long seen[2] = { 0, 0 }, bad = 0;
	unsigned char buf[65536];

	pthread_create(&t[0], NULL, tag_writer, &j[0]);
	int started = 1;
	while (seen[0] + seen[1] < 2 * PER_WRITER) {
		if (started == 1 && atomic_load(&second_go))
			pthread_create(&t[1], NULL, tag_writer, &j[1]), started = 2;
		ssize_t r = recv(k->b, buf, sizeof(buf), 0);
		if (r <= 0) {
			fprintf(stderr, "reader: %zd %s\n", r, strerror(errno));
			break;
		}
		for (ssize_t i = 0; i < r; i++) {
			int id = buf[i] >> 7; /* each writer's bytes count up mod 128 */
			bad += (buf[i] & 0x7f) != (seen[id] & 0x7f);
			seen[id]++;
		}
	}
	void *rv[2] = { NULL, (void *)1 };
	pthread_join(t[0], &rv[0]);
	if (started == 2)
		pthread_join(t[1], &rv[1]);
	ASSERT_TRUE(rv[0] == NULL && rv[1] == NULL);
	ASSERT_EQ(seen[0], PER_WRITER);
	ASSERT_EQ(seen[1], PER_WRITER);
	ASSERT_EQ(bad, 0);
	/* the path under test ran: a's producer lock was biased, then revoked */
	ASSERT_EQ(k->h->ring[0].bias_off, 1);
}

/* ---- 2. a close from another thread -------------------------------------- */
struct closer_job {
	int fd;
	long delay_ns;
};

static atomic_int sending;

static void *closer(void *arg)
{
	struct closer_job *j = arg;
	struct timespec d = { 0, j->delay_ns };

	while (!atomic_load(&sending))
		sched_yield();
	nanosleep(&d, NULL);
	close(j->fd);
	return NULL;
}

static void undo_pair(struct conn *k)
{
	close(k->b);
	close(k->memfd);
	munmap(k->h, DSOCK_SHM_HDR + 2 * RING);
}

/* Sends 16 B at a time until the fd is gone; returns the sends made. */
static long send_until_ebadf(int fd)
{
	char msg[16] = "0123456789abcdef";
	long n = 0;

	for (;;) {
		ssize_t r = send(fd, msg, sizeof(msg), MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r < 0 && errno == EBADF)
			return n;
		if (r < 0 && errno != EAGAIN) {
			fprintf(stderr, "send: %s\n", strerror(errno));
			return -1;
		}
		if (!n++)
			atomic_store(&sending, 1); /* a closer may go now */
	}
}

static int close_from_other_thread(int lfd, struct sockaddr_in *la)
{
	unsigned seed = 7;
	int used = 0;

	for (int round = 0; round < 200; round++) {
		struct conn k;
		struct closer_job j;
		pthread_t t;

		make_conn(&k, lfd, la);
		struct dsock_sock *s = dsock_fdt_peek(k.a);
		/* (the object may be a reused one: clear the mark, which only
		 * a section sets, while nothing else can use it) */
		atomic_store(&s->solo_used, 0);
		atomic_store(&sending, 0);
		j.fd = k.a;
		j.delay_ns = (long)(rand_r(&seed) % 200) * 1000;
		pthread_create(&t, NULL, closer, &j);
		if (send_until_ebadf(k.a) < 0)
			return 1;
		pthread_join(t, NULL);
		used += atomic_load(&s->solo_used);
		undo_pair(&k);
	}
	ASSERT_TRUE(dsock_solo_me);
	ASSERT_EQ(used, 200); /* each round's sends went through sections */
	return unit_failures != 0;
}

/* ---- 3. a close from a signal handler ------------------------------------ */
static volatile int sig_fd = -1, sig_inside;

static void on_alarm(int sig)
{
	(void)sig;
	if (sig_fd < 0)
		return;
	sig_inside += atomic_load(&dsock_solo_cur) != NULL;
	close(sig_fd);
	sig_fd = -1;
}

static int close_from_signal_handler(int lfd, struct sockaddr_in *la)
{
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	struct itimerval every = { { 0, 20 }, { 0, 20 } }, stop = { { 0, 0 }, { 0, 0 } };

	sigaction(SIGALRM, &sa, NULL);
	for (int round = 0; round < 100; round++) {
		struct conn k;

		make_conn(&k, lfd, la);
		sig_fd = k.a;
		setitimer(ITIMER_REAL, &every, NULL);
		long n = send_until_ebadf(k.a);
		setitimer(ITIMER_REAL, &stop, NULL);
		if (n < 0)
			return 1;
		ASSERT_EQ(sig_fd, -1);
		undo_pair(&k);
	}
	ASSERT_EQ(dsock_solo_owed, 0);
	/* the handler landed inside a section in some rounds (else this
	 * tested nothing) */
	fprintf(stderr, "a close from a signal handler inside a send's section: %d of 100 rounds\n",
		sig_inside);
	ASSERT_TRUE(sig_inside > 0);
	return unit_failures != 0;
}

/* ---- 4. the role passes on ------------------------------------------------ */
static void *send_once(void *arg)
{
	int fd = *(int *)arg;
	char c = 'x';

	if (send(fd, &c, 1, 0) != 1)
		return (void *)1;
	return (void *)(long)(dsock_solo_me ? 2 : 3);
}

static int role_passes_on(int lfd, struct sockaddr_in *la)
{
	struct conn k;
	pthread_t t;
	void *rv;
	char buf[4];

	make_conn(&k, lfd, la);
	for (int i = 0; i < 2; i++) {
		pthread_create(&t, NULL, send_once, &k.a);
		pthread_join(t, &rv);
		ASSERT_EQ((long)rv, 2); /* each was the solo thread in its turn */
	}
	ASSERT_EQ(recv(k.b, buf, sizeof(buf), MSG_WAITALL | MSG_DONTWAIT), 2);
	close(k.a);
	undo_pair(&k);
	return unit_failures != 0;
}

static void in_child(int (*fn)(int, struct sockaddr_in *), int lfd, struct sockaddr_in *la, const char *what)
{
	int st = 0;
	pid_t pid = fork();

	if (pid == 0)
		_exit(fn(lfd, la));
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "%s: child %s %d\n", what, WIFEXITED(st) ? "exited" : "killed by signal",
			WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		unit_failures++;
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_in la;
	struct conn k;
	int lfd;

	unit_isolate(argv, "TEST_SHM_SOLO_CHILD");
	(void)argc;
	/* what the library does at start with the fast path on */
	shm_membarrier_register();
	dsock_solo_init();
	if (!shm_membarrier_ok || atomic_load(&dsock_solo_state) == DSOCK_SOLO_OFF) {
		fprintf(stderr, "membarrier unavailable: skipped\n");
		return 77;
	}
	lfd = loopback_listener(&la);
	if (lfd < 0)
		return 1;
	make_conn(&k, lfd, &la);
	two_writers(&k);
	drop_conn(&k);
	if (UNDER_TSAN)
		UNIT_DONE();
	in_child(close_from_other_thread, lfd, &la, "close from another thread");
	in_child(close_from_signal_handler, lfd, &la, "close from a signal handler");
	in_child(role_passes_on, lfd, &la, "the role passes on");
	UNIT_DONE();
}
