/* A mutex in memory that several processes map (a transport's shared
 * state): process-shared and robust, so a holder's death is seen by the
 * next locker (EOWNERDEAD) instead of hanging it. */
#ifndef DSOCK_PMUTEX_H
#define DSOCK_PMUTEX_H

#include <pthread.h>

/* 0, or -errno. */
static inline int dsock_pmutex_init(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	int r;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	r = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	return -r;
}

#endif
