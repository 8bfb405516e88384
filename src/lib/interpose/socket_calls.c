/* Socket creation, addressing and options. */
#include "lib/interpose/api.h"
#include "lib/sock/io.h"
#include "lib/sock/sock.h"

DSOCK_API int socket(int domain, int type, int protocol)
{
	if (DSOCK_GUARDED())
		return dsock_real.socket(domain, type, protocol);
	return (int)dsock_ret(dsock_sock_socket(domain, type, protocol));
}

DSOCK_API int socketpair(int domain, int type, int protocol, int sv[2])
{
	if (DSOCK_GUARDED())
		return dsock_real.socketpair(domain, type, protocol, sv);
	return (int)dsock_ret(dsock_sock_socketpair(domain, type, protocol, sv));
}

DSOCK_API int bind(int fd, const struct sockaddr *a, socklen_t len)
{
	if (DSOCK_GUARDED())
		return dsock_real.bind(fd, a, len);
	return (int)dsock_ret(dsock_sock_bind(fd, a, len));
}

DSOCK_API int listen(int fd, int backlog)
{
	if (DSOCK_GUARDED())
		return dsock_real.listen(fd, backlog);
	return (int)dsock_ret(dsock_sock_listen(fd, backlog));
}

DSOCK_API int accept(int fd, struct sockaddr *a, socklen_t *len)
{
	if (DSOCK_GUARDED())
		return dsock_real.accept(fd, a, len);
	return (int)dsock_ret(dsock_sock_accept4(fd, a, len, 0, 0));
}

DSOCK_API int accept4(int fd, struct sockaddr *a, socklen_t *len, int flags)
{
	if (DSOCK_GUARDED())
		return dsock_real.accept4(fd, a, len, flags);
	return (int)dsock_ret(dsock_sock_accept4(fd, a, len, flags, 1));
}

DSOCK_API int connect(int fd, const struct sockaddr *a, socklen_t len)
{
	if (DSOCK_GUARDED())
		return dsock_real.connect(fd, a, len);
	return (int)dsock_ret(dsock_sock_connect(fd, a, len));
}

DSOCK_API int shutdown(int fd, int how)
{
	if (DSOCK_GUARDED())
		return dsock_real.shutdown(fd, how);
	return (int)dsock_ret(dsock_io_shutdown(fd, how));
}

/* Options are the kernel's answer, except those a transport carrying the
 * connection answers because the kernel's would be wrong. */
static int transport_sockopt(int fd, int set, int level, int opt, void *val, socklen_t *len)
{
	if (!val || !len || DSOCK_GUARDED())
		return -ENOPROTOOPT;
	return dsock_io_sockopt(fd, set, level, opt, val, len);
}

DSOCK_API int getsockopt(int fd, int level, int opt, void *val, socklen_t *len)
{
	int r = transport_sockopt(fd, 0, level, opt, val, len);

	if (r != -ENOPROTOOPT)
		return (int)dsock_ret(r);
	return (int)dsock_ret(SYSRET(dsock_real.getsockopt(fd, level, opt, val, len)));
}

DSOCK_API int setsockopt(int fd, int level, int opt, const void *val, socklen_t len)
{
	int r = transport_sockopt(fd, 1, level, opt, (void *)val, &len);

	if (r != -ENOPROTOOPT)
		return (int)dsock_ret(r);
	return (int)dsock_ret(SYSRET(dsock_real.setsockopt(fd, level, opt, val, len)));
}

DSOCK_API int getsockname(int fd, struct sockaddr *a, socklen_t *len)
{
	return (int)dsock_ret(SYSRET(dsock_real.getsockname(fd, a, len)));
}

DSOCK_API int getpeername(int fd, struct sockaddr *a, socklen_t *len)
{
	return (int)dsock_ret(SYSRET(dsock_real.getpeername(fd, a, len)));
}
