/* Threads on one fast-path connection, in one process (the library's
 * objects linked in; both ends adopted as an exec'ed program adopts them,
 * over a real loopback TCP pair): a writer and a reader per direction and a
 * poller (poll, epoll, FIONREAD) all at once; every byte is checked.  Built
 * under ThreadSanitizer too (tests/run.sh: `make SAN=thread`), which checks
 * the rings, the shared locks, the leases and the sleepers' protocol for
 * data races.
 *
 * Then a lock word held by a living thread that never lets go: the
 * receiver gives up after its bounded spin and resets that connection
 * only; a second connection keeps working.
 *
 * Then a lock the parent holds at a fork: the child waits for it.
 *
 * Last, a hand-over (back.c) that lands while the peer spins in a blocking
 * receive: the spinner drains the request's wake-up token as it spins, and
 * must answer before it sleeps (a spinner that slept instead would leave
 * the hand-over waiting 2 s, then resetting the connection). */
#include "unit/unit.h"
#include "lib/sock/sock.h"
#include "lib/transport/shm/shm.h"
#include "lib/base/real.h"
#include "unit/shm_pair.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RING 65536u
#define STREAM (4L << 20) /* bytes each way */

static unsigned char pat(long i, int dir)
{
	return (unsigned char)(i * 131 + (i >> 9) + dir * 77);
}

static atomic_int failed, writers_done;

struct job {
	int fd, dir;
	unsigned seed;
};

static void *writer(void *arg)
{
	struct job *j = arg;
	unsigned char buf[6000];

	for (long off = 0; off < STREAM;) {
		long n = 1 + rand_r(&j->seed) % (long)sizeof(buf);
		if (n > STREAM - off)
			n = STREAM - off;
		for (long i = 0; i < n; i++)
			buf[i] = pat(off + i, j->dir);
		ssize_t w = send(j->fd, buf, (size_t)n, MSG_NOSIGNAL);
		if (w <= 0) {
			fprintf(stderr, "writer %d: send: %s\n", j->dir, strerror(errno));
			atomic_store(&failed, 1);
			break;
		}
		off += w;
	}
	shutdown(j->fd, SHUT_WR);
	atomic_fetch_add(&writers_done, 1);
	return NULL;
}

static void *reader(void *arg)
{
	struct job *j = arg;
	unsigned char buf[7000], peek[64];
	long off = 0;

	for (;;) {
		if (rand_r(&j->seed) % 8 == 0) {
			/* a peek shows the next bytes of the stream */
			ssize_t p = recv(j->fd, peek, sizeof(peek), MSG_PEEK);
			for (ssize_t i = 0; i < p; i++)
				if (peek[i] != pat(off + i, j->dir)) {
					fprintf(stderr, "reader %d: peek byte %ld wrong\n", j->dir, off + i);
					atomic_store(&failed, 1);
					return NULL;
				}
		}
		size_t n = 1 + rand_r(&j->seed) % sizeof(buf);
		ssize_t r = recv(j->fd, buf, n, rand_r(&j->seed) % 4 == 0 ? MSG_WAITALL : 0);
		if (r == 0)
			break;
		if (r < 0) {
			fprintf(stderr, "reader %d: recv: %s\n", j->dir, strerror(errno));
			atomic_store(&failed, 1);
			return NULL;
		}
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != pat(off + i, j->dir)) {
				fprintf(stderr, "reader %d: byte %ld wrong\n", j->dir, off + i);
				atomic_store(&failed, 1);
				return NULL;
			}
		off += r;
	}
	if (off != STREAM) {
		fprintf(stderr, "reader %d: EOF after %ld of %ld bytes\n", j->dir, off, STREAM);
		atomic_store(&failed, 1);
	}
	return NULL;
}

/* Looks at both ends while the streams run: only that the answers are sane. */
static void *poller(void *arg)
{
	struct conn *k = arg;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP };

	ev.data.fd = k->a;
	epoll_ctl(ep, EPOLL_CTL_ADD, k->a, &ev);
	ev.data.fd = k->b;
	epoll_ctl(ep, EPOLL_CTL_ADD, k->b, &ev);
	while (atomic_load(&writers_done) < 2 && !atomic_load(&failed)) {
		struct pollfd p[2] = { { k->a, POLLIN | POLLOUT, 0 }, { k->b, POLLIN | POLLOUT, 0 } };
		struct epoll_event out[2];
		int n = 0;
		if (poll(p, 2, 1) < 0 || epoll_wait(ep, out, 2, 1) < 0 || ioctl(k->a, FIONREAD, &n) < 0 || n < 0) {
			fprintf(stderr, "poller: %s\n", strerror(errno));
			atomic_store(&failed, 1);
		}
	}
	close(ep);
	return NULL;
}

static void streams(struct conn *k)
{
	pthread_t t[5];
	struct job j[4] = { { k->a, 0, 1 }, { k->b, 0, 2 }, { k->b, 1, 3 }, { k->a, 1, 4 } };

	pthread_create(&t[0], NULL, writer, &j[0]);
	pthread_create(&t[1], NULL, reader, &j[1]);
	pthread_create(&t[2], NULL, writer, &j[2]);
	pthread_create(&t[3], NULL, reader, &j[3]);
	pthread_create(&t[4], NULL, poller, k);
	for (int i = 0; i < 5; i++)
		pthread_join(t[i], NULL);
	ASSERT_EQ(atomic_load(&failed), 0);
	ASSERT_TRUE(atomic_load(&shm_ring_conns) >= 2); /* the bytes went by the rings */
}

/* ---- a lock held forever by a living thread ----------------------------- */
static atomic_int hold_state; /* 1 holding, 2 let go */
static uint32_t *held_word;

static void *holder(void *arg)
{
	(void)arg;
	shm_lock(held_word);
	atomic_store(&hold_state, 1);
	while (atomic_load(&hold_state) == 1)
		usleep(1000);
	shm_unlock(held_word);
	return NULL;
}

static void lock_held_forever(struct conn *bad, struct conn *good)
{
	pthread_t t;
	char c = 'x', got = 0;
	struct timespec t0, t1;

	/* the receive lock of bad.a's incoming ring, held by a thread that lives */
	held_word = &bad->h->ring[1].rx_lock;
	pthread_create(&t, NULL, holder, NULL);
	while (atomic_load(&hold_state) != 1)
		usleep(100);
	ASSERT_EQ(send(bad->b, &c, 1, 0), 1);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ssize_t r = recv(bad->a, &got, 1, 0);
	int e = errno;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	ASSERT_EQ(r, -1);
	ASSERT_EQ(e, ECONNRESET);
	ASSERT_TRUE(secs < 30); /* bounded (about 0.2 s here; slower under sanitizers) */
	fprintf(stderr, "a receive lock held forever: recv gave up after %.2f s with %s\n", secs, strerror(e));
	/* the other connection is untouched */
	ASSERT_EQ(send(good->a, &c, 1, 0), 1);
	ASSERT_EQ(recv(good->b, &got, 1, 0), 1);
	ASSERT_EQ(got, 'x');
	atomic_store(&hold_state, 2);
	pthread_join(t, NULL);
}

/* ---- a lock held by the parent across a fork ----------------------------- */
/* The child's one thread inherits the parent's cached lock owner id: with
 * it, the child would take the parent's lock for its own (-EDEADLK, which
 * the data path turns into a reset).  It must wait for the parent instead. */
static void lock_across_fork(struct conn *k)
{
	uint32_t *w = &k->h->ring[0].tx_lock;
	int st = 0;

	ASSERT_EQ(shm_lock(w), 0);
	pid_t pid = fork();
	if (pid == 0) {
		int r = shm_lock(w); /* waits for the parent's unlock */
		_exit(r == 0 ? 0 : r == -EDEADLK ? 2 : 3);
	}
	usleep(100 * 1000);
	shm_unlock(w);
	waitpid(pid, &st, 0);
	ASSERT_TRUE(WIFEXITED(st));
	ASSERT_EQ(WEXITSTATUS(st), 0); /* 2: it took the parent's lock for its own */
	shm_unlock(w); /* the child's (it left without letting go) */
}

/* ---- a hand-over while the peer spins ----------------------------------- */
static atomic_int spin_ready;
static char spin_got[8];
static ssize_t spin_r;

static void *spin_reader(void *arg)
{
	int fd = *(int *)arg;
	size_t got = 0;

	atomic_store(&spin_ready, 1);
	while (got < 5) {
		spin_r = recv(fd, spin_got + got, 5 - got, 0);
		if (spin_r <= 0)
			break;
		got += (size_t)spin_r;
	}
	return NULL;
}

static long long mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void handover_while_spinning(int lfd, struct sockaddr_in *la)
{
	unsigned seed = 7;
	int rounds = 30, ok = 0;

	for (int i = 0; i < rounds; i++) {
		struct conn k;
		pthread_t t;

		make_conn(&k, lfd, la);
		atomic_store(&spin_ready, 0);
		memset(spin_got, 0, sizeof(spin_got));
		pthread_create(&t, NULL, spin_reader, &k.b);
		while (!atomic_load(&spin_ready))
			;
		/* into its spin (50 us), somewhere */
		long long until = mono_ns() + 2000 + rand_r(&seed) % 30000;
		while (mono_ns() < until)
			;
		struct dsock_sock *s = dsock_fdt_get(k.a);
		long long t0 = mono_ns();
		int r = s->tp->handover(s, k.a);
		long long took = mono_ns() - t0;
		dsock_sock_put(s);
		/* the new holder writes on the kernel socket only */
		ASSERT_EQ(dsock_real.send(k.a, "hello", 5, 0), 5);
		pthread_join(t, NULL);
		if (r || spin_r <= 0 || memcmp(spin_got, "hello", 5)) {
			fprintf(stderr, "round %d: hand-over %d after %.3f s, reader got %zd '%.5s'\n", i, r,
				took / 1e9, spin_r, spin_got);
			unit_failures++;
			break;
		}
		ok++;
		drop_conn(&k);
	}
	fprintf(stderr, "a hand-over while the peer spins: %d of %d rounds exact\n", ok, rounds);
}

int main(int argc, char **argv)
{
	struct sockaddr_in la;
	struct conn k1, k2, k3;
	int lfd;

	unit_isolate(argv, "TEST_SHM_THREADS_CHILD");
	(void)argc;
	lfd = loopback_listener(&la);
	if (lfd < 0)
		return 1;
	make_conn(&k1, lfd, &la);
	streams(&k1);
	make_conn(&k2, lfd, &la);
	make_conn(&k3, lfd, &la);
	lock_held_forever(&k2, &k3);
	lock_across_fork(&k3);
	handover_while_spinning(lfd, &la);
	UNIT_DONE();
}
