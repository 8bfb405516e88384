/* Epoll registrations dsock knows of, indexed (epset.c), and the sockets
 * whose data the kernel's readiness does not show. */
#ifndef DSOCK_EPSET_H
#define DSOCK_EPSET_H

#include <stdint.h>
#include <sys/epoll.h>

/* The fd a registration of epfd with this data names; -1 when none, or
 * when two registrations of the set share the data (we cannot tell). */
int dsock_epset_member_fd(int epfd, uint64_t data);
/* The same, and *in_added: 1 if EPOLLIN was added for the kernel to the
 * application's events (dsock_epoll_kernel_events). */
int dsock_epset_member(int epfd, uint64_t data, int *in_added);
/* Members of epfd whose socket is hidden readable (and epoll sets nested
 * in it, one level, that hold one), as EPOLLIN events; ONESHOT members are
 * disarmed, EPOLLET ones reported once per arrival.  *wants_kernel: one of
 * them needs the kernel's look too (it asked for EPOLLOUT or the like, or
 * is edge-triggered or one-shot: the kernel's edge must be used up). */
int dsock_epset_hidden(int epfd, struct epoll_event *out, int max, int *wants_kernel);
void dsock_epset_fork_prepare(void);
void dsock_epset_fork_parent(void);
void dsock_epset_fork_child(void);

#endif
