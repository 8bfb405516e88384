/* The transports the daemon provisions: one line each. */
#include "daemon/provision.h"

extern const struct dd_provision dd_prov_shm, dd_prov_socketpair;

static const struct dd_provision *const provs[] = {
	&dd_prov_shm,
	&dd_prov_socketpair,
};

#define NPROVS (sizeof(provs) / sizeof(provs[0]))

const struct dd_provision *dd_provision_get(unsigned transport)
{
	for (size_t i = 0; i < NPROVS; i++)
		if (provs[i]->transport == transport)
			return provs[i];
	return NULL;
}

int dd_provision_init(void)
{
	for (size_t i = 0; i < NPROVS; i++)
		if (provs[i]->init && provs[i]->init())
			return -1;
	return 0;
}

void dd_provision_stat(char *buf, size_t n)
{
	for (size_t i = 0; i < NPROVS; i++)
		if (provs[i]->stat)
			provs[i]->stat(buf, n);
}

void dd_provision_forget(const struct dd_proc *p)
{
	for (size_t i = 0; i < NPROVS; i++)
		if (provs[i]->forget)
			provs[i]->forget(p);
}
