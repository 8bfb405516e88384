#!/usr/bin/env bash
# Builds the fuzzers (clang, libFuzzer, ASan+UBSan) and runs each for a
# bounded time on a copy of the committed corpus.  A crash, a sanitizer
# report or a failed check fails the run and leaves the input in the work
# directory (printed).
#   tests/fuzz/run.sh [SECONDS_EACH]   default 30 (the CI run)
#   tests/fuzz/run.sh 3600 --merge     a long run; folds new coverage back
#                                      into tests/fuzz/corpus/ (minimised)
# Closing line per fuzzer: "fuzz NAME: N runs in S s, corpus C, ok".
set -u
cd "$(dirname "$0")/../.."
SECS=${1:-30}
MERGE=${2:-}
BUILD=build-fuzz
if ! command -v clang >/dev/null; then
	echo "clang is missing (apt-get install clang)"; exit 1
fi
make -s -j2 fuzz CC=clang BUILD=$BUILD SAN=address,undefined,fuzzer-no-link || exit 1
python3 tests/fuzz/seeds.py
WORK=$(mktemp -d /tmp/dsock-fuzz-XXXXXX)
rc=0
for name in ring proto; do
	mkdir -p "$WORK/$name"
	cp tests/fuzz/corpus/$name/* "$WORK/$name/"
	log="$WORK/$name.log"
	# -timeout: an input that runs 10 s is a hang (no call may block)
	( cd "$WORK" && "$OLDPWD/$BUILD/fuzz/fuzz_$name" -max_total_time="$SECS" -timeout=10 \
		-rss_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$WORK/$name-" "$WORK/$name" >"$log" 2>&1 )
	r=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	if [ $r != 0 ]; then
		rc=1
		echo "fuzz $name: FAILED (exit $r); the log: $log"
		grep -m1 -A3 -E "ERROR|check failed|runtime error" "$log"
		ls "$WORK"/$name-* 2>/dev/null
		continue
	fi
	echo "fuzz $name: ${runs:-?} runs in $SECS s, corpus $(ls "$WORK/$name" | wc -l), ok"
	if [ "$MERGE" = --merge ]; then
		mkdir -p "$WORK/$name.min"
		"$BUILD/fuzz/fuzz_$name" -merge=1 "$WORK/$name.min" tests/fuzz/corpus/$name "$WORK/$name" >/dev/null 2>&1
		rm -f tests/fuzz/corpus/$name/[0-9a-f]*
		cp "$WORK/$name.min"/* tests/fuzz/corpus/$name/
		echo "fuzz $name: corpus merged into tests/fuzz/corpus/$name ($(ls tests/fuzz/corpus/$name | wc -l) files)"
	fi
done
[ $rc = 0 ] && rm -rf "$WORK"
exit $rc
