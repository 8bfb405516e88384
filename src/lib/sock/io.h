/* Data calls of the socket layer.  For a socket a transport owns, the call
 * goes to the transport; otherwise straight to the kernel through libc.
 * Each returns a count or -errno. */
#ifndef DSOCK_IO_H
#define DSOCK_IO_H

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

ssize_t dsock_io_read(int fd, void *buf, size_t n);
ssize_t dsock_io_readv(int fd, const struct iovec *iov, int cnt);
ssize_t dsock_io_write(int fd, const void *buf, size_t n);
ssize_t dsock_io_writev(int fd, const struct iovec *iov, int cnt);
ssize_t dsock_io_recv(int fd, void *buf, size_t n, int flags);
ssize_t dsock_io_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *a, socklen_t *al);
ssize_t dsock_io_recvmsg(int fd, struct msghdr *m, int flags);
int dsock_io_recvmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *t);
ssize_t dsock_io_send(int fd, const void *buf, size_t n, int flags);
ssize_t dsock_io_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *a, socklen_t al);
ssize_t dsock_io_sendmsg(int fd, const struct msghdr *m, int flags);
int dsock_io_sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags);
ssize_t dsock_io_sendfile(int out, int in, off_t *off, size_t n);
/* sendfile by reads: up to n bytes of file from pos, read 64 KiB at a time
 * into a buffer, each chunk given to send(arg, m) (a count or -errno);
 * stops at a short send, the file's end or an error.  Returns the count
 * sent, or (nothing sent) the error, or 0 at the file's end. */
ssize_t dsock_sendfile_by_reads(int file, off_t pos, size_t n, ssize_t (*send)(void *arg, const struct msghdr *m),
				void *arg);
int dsock_io_shutdown(int fd, int how);
/* fd may reach a holder without dsock (SCM_RIGHTS, an io_uring): the
 * transport carrying it gives the connection back to the kernel, in this
 * process too (a failure has reset it). */
void dsock_io_hand_over(int fd);
/* ioctl req (FIONREAD, SIOCATMARK) as the transport carrying fd answers
 * it into *val: 0, or -ENOTSUP: the kernel's answer. */
int dsock_io_ioctl(int fd, unsigned long req, int *val);
/* getsockopt (set 0) or setsockopt (1) where the transport carrying fd
 * answers the option; -ENOPROTOOPT: the kernel's answer. */
int dsock_io_sockopt(int fd, int set, int level, int opt, void *val, socklen_t *len);

#endif
