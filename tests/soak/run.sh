#!/usr/bin/env bash
# The integrity soak natively and under dsock, SECONDS each (default 15,
# the CI run; a long run: tests/soak/run.sh 600).  Both must end with zero
# errors, and under dsock the streams must really have used the rings.
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
for mode in native dsock; do
	if [ $mode = native ]; then
		timeout $((SECS + 60)) "$SOAK" -s "$SECS" -r "$SEED" "$@" >"$TMP/out" 2>&1
	else
		DSOCK_FASTPATH_REPORT="$TMP/report" timeout $((SECS + 60)) \
			"$BUILD/bin/dsock" run -- "$SOAK" -s "$SECS" -r "$SEED" "$@" >"$TMP/out" 2>&1
	fi
	r=$?
	summary=$(grep -a '^soak: [0-9]' "$TMP/out")
	echo "$mode: ${summary:-no summary} (exit $r)"
	if [ $r != 0 ]; then
		rc=1
		grep -a -v '^soak: seed' "$TMP/out" | head -20
	fi
done
rings=$(awk '{s += $2} END {print s + 0}' "$TMP/report" 2>/dev/null || echo 0)
echo "dsock: $rings connections moved bytes through the rings (seed $SEED)"
if [ "${rings:-0}" -lt 100 ]; then
	echo "too few connections on the fast path: the soak did not test it"
	rc=1
fi
rm -rf "$TMP"
exit $rc
