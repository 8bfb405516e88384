/* The records of epoll registrations, shared by the files of dsock's
 * epoll wrapper: epset.c (registrations, hidden data) and epark.c
 * (level-triggered EPOLLOUT parked while a transport has no room). */
#ifndef DSOCK_EPSET_INT_H
#define DSOCK_EPSET_INT_H

#include "lib/sock/watch.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/epoll.h>

struct dsock_sock;

struct member {
	int epfd, fd;
	unsigned events;
	uint64_t data;
	int disarmed;               /* EPOLLONESHOT reported by us */
	int in_added;               /* EPOLLIN added for the kernel (ready.h) */
	int parked;                 /* level-triggered EPOLLOUT taken out of the
				     * kernel's registration (EPOLLIN in, for the
				     * space token) while the transport has no room */
	uint64_t mark;              /* EPOLLET: the arrival count last reported */
	int watched;                /* its transport has waits (watch.h) */
	struct dsock_watch w;       /* and these other fds stand for it too */
	struct dsock_sock *sock;    /* the socket at registration; NULL: an epoll set */
	int capable;                /* a transport may carry it (light.h) */
	int ghost;                  /* deleted by the application, still in the
				     * kernel's set (eghost.c) */
	int untracked;              /* an fd that is neither a socket of ours nor
				     * a set (a pipe, an eventfd, a timer),
				     * recorded only in sets born here while ghosts
				     * are on, so that the records hold every
				     * registration there (eghost.c); in no
				     * chain by socket, counted in no set */
	/* chains: every member, by fd, by (epfd, data), by socket */
	struct member *next[4], **pprev[4];
};

enum { ALL, BY_FD, BY_DATA, BY_SOCK };

/* The lock of every registration record. */
extern pthread_mutex_t dsock_epset_mu;
/* The registration of epfd with data; NULL when none, or when two share
 * the data (mu held). */
struct member *dsock_epset_by_data(int epfd, uint64_t data);
/* m's kernel registration has EPOLLIN added to the application's (on), or
 * not (mu held). */
void dsock_epset_in_added(struct member *m, int on);
/* m is parked (on) or not (mu held; epark.c). */
void dsock_epset_set_parked(struct member *m, int on);

/* (mu held) The first member in the chain that holds (epfd, data), if
 * any; m unlinked and freed (a ghost taken out of the kernel's set first);
 * the ghosts of set epfd (-1: of every set) taken out of the kernel's set
 * and freed; 1 if epfd is a member of another set. */
struct member *dsock_epset_data_chain(int epfd, uint64_t data);
/* (mu held) The first member in the chain that holds socket s's members
 * (NULL: the epoll sets nested in others), if any; the first of every
 * member (next[ALL]). */
struct member *dsock_epset_sock_chain(const struct dsock_sock *s);
struct member *dsock_epset_all_members(void);
/* (mu held) The records of set `from` are set `to`'s from now on (ealias.c:
 * its key closed, an alias stays).  (mu not held) The aliases among fds
 * first..last are forgotten, and a key among them hands its records to an
 * alias that stays.  Lock order: mu, then the aliases', then light.c's. */
void dsock_epset_rekey(int from, int to);
void dsock_epset_alias_forget(unsigned first, unsigned last);
/* How many members there are (none: nothing to look up). */
extern _Atomic size_t dsock_epset_nmembers;
void dsock_epset_drop(struct member *m);
void dsock_epset_drop_ghosts(int epfd);
int dsock_epset_nested(int epfd);

/* Ghosts (eghost.c, mu held): whether the application's DEL of m may
 * leave the kernel's registration in place; whether the kernel's
 * registration of m already is what ev asks for (its MOD would change
 * nothing); m becomes a ghost (on) or a member again; the ghosts of epfd
 * with this data other than keep are taken out of the kernel's set (how
 * many). */
int dsock_ghost_may(const struct member *m);
int dsock_ghost_same(const struct member *m, const struct epoll_event *ev, unsigned kernel_events);
void dsock_ghost_set(struct member *m, int on);
int dsock_ghosts_drop_data(int epfd, uint64_t data, const struct member *keep);
/* 1 while set epfd may hold ghosts (mu held) */
int dsock_epset_ghosts_allowed(int epfd);

#endif
