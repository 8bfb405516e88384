/* A deliberately wrong interposer, preloaded only by the harness self-test:
 * MSG_PEEK loses a byte and an empty nonblocking recv says EINTR instead of
 * EAGAIN.  The conformance harness must catch both. */
#include <dlfcn.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/types.h>

ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	static ssize_t (*real)(int, void *, size_t, int);
	ssize_t r;

	if (!real)
		real = (ssize_t (*)(int, void *, size_t, int))dlsym(RTLD_NEXT, "recv");
	r = real(fd, buf, n, flags);
	if (r > 1 && (flags & MSG_PEEK))
		return r - 1;
	if (r < 0 && errno == EAGAIN)
		errno = EINTR;
	return r;
}
