#include "lib/base/signals.h"

#include <signal.h>

int dsock_signals_restart(void)
{
	for (int sig = 1; sig < _NSIG; sig++) {
		struct sigaction sa;
		if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) < 0)
			continue;
		if (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN && !(sa.sa_flags & SA_RESTART))
			return 0;
	}
	return 1;
}
