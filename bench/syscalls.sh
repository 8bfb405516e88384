#!/usr/bin/env bash
# System calls per request of redis-server and redis-benchmark, natively or
# under dsock, counted by perf's syscall tracepoints (issue 21: "state the
# per-message system-call count, kernel against dsock").
#
#   bench/syscalls.sh [BUILD] [TEST] [CLIENTS]     (defaults: build get 50)
#
# Prints, for each mode, the requests/s and per request: every system call
# (sys_enter) and those of them seen at least once per 100 requests.
set -eu
BUILD=${1:-build}; TEST=${2:-get}; CLIENTS=${3:-50}; N=${N:-400000}; PORT=7781
EV=raw_syscalls:sys_enter
for c in epoll_wait epoll_ctl read write recvfrom sendto recvmsg sendmsg sched_yield ioctl getsockopt futex; do
	EV=$EV,syscalls:sys_enter_$c
done
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for mode in kernel dsock; do
	W=()
	[ "$mode" = dsock ] && W=(env -u DSOCK_FASTPATH DSOCK_SOCKET="$T/d.sock" "$BUILD/bin/dsock" run --)
	"${W[@]}" redis-server --port $PORT --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 &
	for _ in $(seq 50); do redis-cli -p $PORT ping >/dev/null 2>&1 && break; sleep 0.1; done
	RP=$(pgrep -f "redis-server.*:$PORT" | head -1)
	perf stat -e "$EV" -p "$RP" -x, -o "$T/srv" &
	PS=$!
	OUT=$(perf stat -e "$EV" -x, -o "$T/cli" "${W[@]}" redis-benchmark -p $PORT -t "$TEST" -c "$CLIENTS" -n $N -q \
		2>/dev/null | tr '\r' '\n' | grep "requests per" | tail -1)
	kill -INT $PS; wait $PS 2>/dev/null || true
	redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || kill "$RP"
	wait 2>/dev/null || true
	echo "$mode: $OUT"
	for side in srv cli; do
		printf "  %s:" "$side"
		grep -v '^#' "$T/$side" | grep -v '^$' | awk -F, -v n=$N '{ split($3, a, ":"); sub("sys_enter_", "", a[2]);
			if ($1 + 0 > n / 100) printf " %s %.2f", a[2], $1 / n }'
		echo
	done
done
