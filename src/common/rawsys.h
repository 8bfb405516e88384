/* A system call made with the instruction itself.
 *
 * The preload library exports syscall() (lib/interpose/syscall_calls.c:
 * a program's raw calls on sockets and epoll sets reach the socket layer),
 * so the library's own raw calls must not go through that name.
 * dsock_sys(n, args...) returns what syscall(n, args...) would: the
 * result, or -1 with errno set. */
#ifndef DSOCK_RAWSYS_H
#define DSOCK_RAWSYS_H

#include <errno.h>
#include <sys/syscall.h>

static inline long dsock_sys6(long n, long a, long b, long c, long d, long e, long f)
{
	long r;
#if defined(__x86_64__)
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc 0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	r = x0;
#else
#error "dsock_sys6: this architecture's system call instruction is not written"
#endif
	if ((unsigned long)r > -4096UL) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

#define DSOCK_SYS_(n, a, b, c, d, e, f, ...) \
	dsock_sys6((long)(n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))
#define dsock_sys(...) DSOCK_SYS_(__VA_ARGS__, 0, 0, 0, 0, 0, 0, 0)

#endif
