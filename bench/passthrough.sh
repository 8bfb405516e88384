#!/usr/bin/env bash
# What passthrough interposition costs: sockperf TCP ping-pong (14 B),
# natively and with both ends under dsock, pinned to one core and unpinned,
# runs interleaved so drift hits both sides alike; plus per-call costs.
# Usage: bench/passthrough.sh [BUILD_DIR] [SECONDS_PER_RUN] [REPS]
# Prints a markdown table (medians over REPS runs).  Not part of the tests:
# speed is measured here, never asserted in a test.
set -eu
BUILD=$(cd "${1:-build}" && pwd)
SECS=${2:-5}
REPS=${3:-5}
DSOCK="$BUILD/bin/dsock"
T=$(mktemp -d /tmp/dsock-bench-XXXXXX)
export DSOCK_SOCKET="$T/dsockd.sock"
trap '"$DSOCK" stop >/dev/null 2>&1; kill $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
command -v sockperf >/dev/null || { echo "sockperf missing: scripts/install-test-deps.sh" >&2; exit 1; }
cc -O2 -o "$T/callcost" "$(dirname "$0")/callcost.c"
"$DSOCK" run -- true

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# one run: MODE (native|dsock) PIN (pinned|unpinned) -> "p50 p99" in usec
one() {
	local mode=$1 pin=$2 p wrap=() tset=()
	p=$(port)
	[ "$mode" = dsock ] && wrap=("$DSOCK" run --)
	[ "$pin" = pinned ] && tset=(taskset -c 0)
	"${tset[@]}" "${wrap[@]}" sockperf server --tcp -i 127.0.0.1 -p "$p" >/dev/null 2>&1 &
	local srv=$!
	sleep 0.3
	"${tset[@]}" "${wrap[@]}" sockperf ping-pong --tcp -i 127.0.0.1 -p "$p" -m 14 -t "$SECS" \
		>"$T/out" 2>&1 || true
	kill $srv 2>/dev/null; wait $srv 2>/dev/null || true
	awk '/percentile 50.000 =/ {p50=$NF} /percentile 99.000 =/ {p99=$NF} END {print p50, p99}' "$T/out"
}

declare -A P50 P99
for pin in pinned unpinned; do
	for r in $(seq "$REPS"); do
		for mode in native dsock; do
			read -r a b < <(one $mode $pin)
			P50[$mode.$pin]+="$a "
			P99[$mode.$pin]+="$b "
		done
	done
done

echo "sockperf TCP ping-pong, 14 B, one-way latency (usec), median of $REPS runs of ${SECS}s, $(date -u +%F)"
echo
echo "| placement | native p50 | dsock p50 | ratio | native p99 | dsock p99 | ratio |"
echo "|---|---|---|---|---|---|---|"
for pin in pinned unpinned; do
	n50=$(tr ' ' '\n' <<<"${P50[native.$pin]}" | grep . | median)
	d50=$(tr ' ' '\n' <<<"${P50[dsock.$pin]}" | grep . | median)
	n99=$(tr ' ' '\n' <<<"${P99[native.$pin]}" | grep . | median)
	d99=$(tr ' ' '\n' <<<"${P99[dsock.$pin]}" | grep . | median)
	printf "| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n" "$pin" "$n50" "$d50" \
		"$(echo "$d50 / $n50" | bc -l)" "$n99" "$d99" "$(echo "$d99 / $n99" | bc -l)"
done
echo
echo "Per-call cost (ns, median of 7 x 200k calls):"
echo
echo "| call | native | dsock | added |"
echo "|---|---|---|---|"
"$T/callcost" >"$T/cc.native"
LD_PRELOAD="$BUILD/lib/libdsock.so" "$T/callcost" >"$T/cc.dsock"
sort -o "$T/cc.native" "$T/cc.native"; sort -o "$T/cc.dsock" "$T/cc.dsock" # (join wants them sorted)
join "$T/cc.native" "$T/cc.dsock" | while read -r name n d; do
	printf "| %s | %.1f | %.1f | %+.1f |\n" "$name" "$n" "$d" "$(echo "$d - $n" | bc -l)"
done
