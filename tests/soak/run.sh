#!/usr/bin/env bash
# The integrity soak natively, under dsock, under dsock with every
# connection going back to the kernel mid-stream (SOAK_ASLEEP=0 leaves that
# out), under dsock with 10,000 connections at a time (SOAK_MANY=0), and
# under dsock with the client's ports reused within a fraction of a second
# (SOAK_REUSE=0), SECONDS each (default 15, the CI run; a long run: tests/soak/run.sh build
# 600).  All must end with zero errors; under
# dsock the streams must really have used the rings (and gone back).
# Then (SOAK_100K=0 leaves it out) 100,000 connections open at once under
# dsock (tests/soak/many.c, spread over as many process pairs as the fd
# limit needs): every byte checked, at least 99 % of them paired on the
# rings at the peak, and every pair gone from the daemon afterwards.
# Usage: tests/soak/run.sh [BUILD_DIR] [SECONDS] [extra soak options]
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
SECS=${2:-15}
shift $(($# < 2 ? $# : 2))
SOAK="$BUILD/tests/soak"
SEED=${DSOCK_SOAK_SEED:-$(date +%s)}
TMP=$(mktemp -d /tmp/dsock-soak-XXXXXX)
rc=0

# Runs the command; if the soak is still running after LIMIT seconds, shows
# where each of its processes is stuck (kernel wait channel, gdb backtrace)
# and kills them: exit 124.
watched() {
	local limit=$1 pid t=0
	shift
	"$@" >"$TMP/out" 2>&1 &
	pid=$!
	while kill -0 $pid 2>/dev/null; do
		sleep 1
		t=$((t + 1))
		[ $t -lt "$limit" ] && continue
		echo "soak: still running after $limit s; where its processes are:"
		for p in $(pgrep -f "$SOAK -s"); do
			echo "== pid $p ppid $(awk '{print $4}' /proc/$p/stat 2>/dev/null)" \
				"state $(awk '{print $3}' /proc/$p/stat 2>/dev/null) wchan $(cat /proc/$p/wchan 2>/dev/null)"
			command -v gdb >/dev/null && gdb -p "$p" -batch -ex bt 2>/dev/null | grep '^#' | head -25
		done
		pkill -9 -f "$SOAK -s"
		kill -9 $pid 2>/dev/null
		wait $pid
		return 124
	done
	wait $pid
}

# "asleep": every connection goes back to the kernel at its first ring
# read, as one whose consumers sleep does (DSOCK_TEST_BACK_READS=1), with
# bytes in flight.  "many": 10,000 connections at a time, both processes in epoll_wait, so that their links carry
# the wake-ups; no fork helpers there (a fork refuses every pairing still
# pending, and with 10,000 connections nearly all of them are).  "reuse":
# 1,000 connections at a time from a window of 1,100 client ports, so that
# a new connection often has the addresses of one reset a moment before
# (a reset leaves no TIME_WAIT) whose server end may still be offered.
for mode in native dsock $([ "${SOAK_ASLEEP:-1}" = 1 ] && echo asleep) $([ "${SOAK_MANY:-1}" = 1 ] && echo many) \
	$([ "${SOAK_REUSE:-1}" = 1 ] && echo reuse); do
	rm -f "$TMP/report"
	if [ $mode = native ]; then
		watched $((SECS + 60)) "$SOAK" -s "$SECS" -r "$SEED" "$@"
	elif [ $mode = many ]; then
		DSOCK_FASTPATH_REPORT="$TMP/report" watched $((SECS + 120)) "$BUILD/bin/dsock" run -- \
			"$SOAK" -s "$SECS" -r "$SEED" -e -c 10000 -f 0 "$@"
	elif [ $mode = reuse ]; then
		DSOCK_FASTPATH_REPORT="$TMP/report" watched $((SECS + 60)) "$BUILD/bin/dsock" run -- \
			"$SOAK" -s "$SECS" -r "$SEED" -e -c 1000 -f 0 -p 1100 "$@"
	else
		DSOCK_FASTPATH_REPORT="$TMP/report" DSOCK_TEST_BACK_READS=$([ $mode = asleep ] && echo 1 || echo 0) \
			watched $((SECS + 60)) "$BUILD/bin/dsock" run -- "$SOAK" -s "$SECS" -r "$SEED" "$@"
	fi
	r=$?
	summary=$(grep -a '^soak: [0-9]' "$TMP/out")
	echo "$mode: ${summary:-no summary} (exit $r)"
	if [ $r != 0 ]; then
		rc=1
		grep -a -v '^soak: seed' "$TMP/out" | head -20
	fi
	[ $mode = native ] && continue
	read -r rings back < <(awk '{s += $2; b += $3} END {print s + 0, b + 0}' "$TMP/report" 2>/dev/null || echo 0 0)
	echo "$mode: $rings connections moved bytes through the rings, $back of them went back to the kernel (seed $SEED)"
	if [ "${rings:-0}" -lt $(case $mode in many | reuse) echo 1000 ;; *) echo 100 ;; esac) ]; then
		echo "too few connections on the fast path: the soak did not test it"
		rc=1
	fi
	if [ $mode = asleep ] && [ "${back:-0}" -lt 100 ]; then
		echo "too few connections went back to the kernel: the soak did not test it"
		rc=1
	fi
done
if [ "${SOAK_100K:-1}" = 1 ]; then
	N=100000
	per=$(( $(ulimit -Hn) - 300 ))
	[ "$per" -gt $N ] && per=$N
	pairs=$(( (N + per - 1) / per ))
	rm -f "$TMP/report" "$TMP/peak"
	MANY_AT_PEAK="$BUILD/bin/dsock stat --raw | grep -m1 '^daemon' > $TMP/peak; grep Shmem: /proc/meminfo >> $TMP/peak" \
		DSOCK_FASTPATH_REPORT="$TMP/report" watched 600 "$BUILD/bin/dsock" run -- "$BUILD/tests/many" $N 12 $pairs
	r=$?
	echo "100k: $(grep -a '^many:' "$TMP/out" || echo 'no summary') (exit $r)"
	[ $r = 0 ] || { rc=1; grep -a -v '^server:' "$TMP/out" | head -20; }
	live=$(grep -o 'shm_conns=[0-9]*' "$TMP/peak" 2>/dev/null | cut -d= -f2)
	rings=$(awk '{s += $2} END {print s + 0}' "$TMP/report" 2>/dev/null || echo 0)
	echo "100k: ${live:-0} pairs on the rings at the peak ($(grep -o 'shm_pools=[0-9]*' "$TMP/peak")," \
		"$(grep Shmem: "$TMP/peak" | tr -s ' ')); $rings ends moved bytes through them"
	if [ "${live:-0}" -lt $((N * 99 / 100)) ] || [ "$rings" -lt $((2 * N * 99 / 100)) ]; then
		echo "100k: fewer than 99 % of the connections paired"
		rc=1
	fi
	# the daemon lets go of every pair once both ends closed or left
	left=""
	for _ in $(seq 50); do
		left=$("$BUILD/bin/dsock" stat --raw | grep -m1 '^daemon' | grep -o 'shm_conns=[0-9]*')
		[ "$left" = shm_conns=0 ] && break
		sleep 0.2
	done
	echo "100k: afterwards $left"
	[ "$left" = shm_conns=0 ] || rc=1
fi
rm -rf "$TMP"
exit $rc
