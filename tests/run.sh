#!/usr/bin/env bash
# The whole default test run (about 15 minutes here; DSOCK_TEST_JOBS
# scenarios of the conformance suite at once, 8 by default):
#   unit tests, plain, under ASan+UBSan and under TSan (the threaded
#   fast-path test among them); the export list; the source layout; the
#   conformance suite (every scenario natively and under dsock: fast path
#   on, its connections going back to the kernel mid-stream with epoll
#   ghosts off, fast path off, bells off; the TCP ones over
#   the test transport socketpair, plain and framed as channels; the TCP ones with client and server in
#   two network namespaces, over a bridge and through DNAT) and its harness
#   self-tests; the daemon and CLI; faults and resource exhaustion; the
#   proof across network namespaces (BPF: veth, DNAT, two tenants); a
#   forged claims against it (a replayed nonce over a raw socket,
#   TCP_REPAIR); a connection handed to programs without dsock (exec,
#   SCM_RIGHTS); real
#   programs under dsock, on loopback and across network namespaces (a
#   bridge, DNAT); the integrity soak; the fuzzers (short runs).
# Usage: tests/run.sh [BUILD_DIR]
# Closing line: "tests: N passed, N failed" (one per step).
set -u
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SANBUILD=$BUILD-san
PASS=0 FAIL=0
FAILED=()
# The conformance suite's scenarios at once: they mostly wait (timeouts,
# sleeps, peers that pause), about 20 s of CPU per run of 921, so 8 at
# once on 2 vCPUs take a quarter of the time 2 did, with the same results.
JOBS=${DSOCK_TEST_JOBS:-8}
export DSOCK_TEST_JOBS=$JOBS
# No daemon of the run attaches the proof's programs unless its step asks
# (DSOCK_BPF_PROOF=1): one proving daemon per host, and a stray one (a
# scenario's process that found no DSOCK_SOCKET would start the host's)
# would keep the proof's own tests from theirs.
export DSOCK_BPF_PROOF=0
# A private daemon: never touches a system-wide one.
RUNDIR=$(mktemp -d /tmp/dsock-tests-XXXXXX)
export DSOCK_SOCKET="$RUNDIR/dsockd.sock"
trap '"$BUILD/bin/dsock" stop >/dev/null 2>&1; rm -rf "$RUNDIR"' EXIT

step() {
	local name=$1
	shift
	echo "=== $name"
	local t0=$SECONDS
	if "$@"; then
		PASS=$((PASS + 1))
		echo "=== $name: ok ($((SECONDS - t0)) s)"
	else
		FAIL=$((FAIL + 1))
		FAILED+=("$name")
		echo "=== $name: FAILED ($((SECONDS - t0)) s)"
	fi
}

unit() {
	local dir=$1 rc=0
	for t in "$dir"/tests/test_*; do
		if "$t"; then echo "ok   $(basename "$t")"; else echo "FAIL $(basename "$t")"; rc=1; fi
	done
	return $rc
}

# The warm families (tcp4w, tcp6w) start every scenario on the rings: the
# step fails when fewer than 90 % of them moved bytes through shared memory
# (-m; the harness prints "N of M warm tcp scenarios").
conformance() {
	mkdir -p "$RUNDIR/fastpath"
	DSOCK_FASTPATH=1 "$BUILD/tests/conformance" -j "$JOBS" -r "$RUNDIR/fastpath" -m 90 -w "$BUILD/bin/dsock run --" \
		"$BUILD/tests/conf-scen"
}

# The same with every connection going back to the kernel at its first
# ring read, as one whose consumers sleep does (DSOCK_TEST_BACK_READS=1):
# each scenario's bytes cross that move mid-stream, and enough scenarios
# must really make it (nearly all of those on the rings do; the step fails
# under 300).  With epoll ghosts off, the setting's other value.
conformance_back() {
	local out n
	mkdir -p "$RUNDIR/back"
	out=$(DSOCK_FASTPATH=1 DSOCK_TEST_BACK_READS=1 DSOCK_EPOLL_GHOSTS=0 "$BUILD/tests/conformance" -j "$JOBS" -r "$RUNDIR/back" \
		-w "$BUILD/bin/dsock run --" "$BUILD/tests/conf-scen")
	local rc=$?
	echo "$out"
	n=$(sed -n 's/.*(in \([0-9]*\) a connection then went back.*/\1/p' <<<"$out")
	if [ "${n:-0}" -lt 300 ]; then
		echo "only ${n:-0} scenarios went back to the kernel mid-stream: the step did not test it"
		return 1
	fi
	return $rc
}

# The TCP scenarios over the second transport, "socketpair", which the
# tests alone use (DSOCK_TRANSPORTS names it): it proves the transport
# interface (offers and results by transport id, provisioning, readiness
# through wait fds of the transport's own), and passes as the shared-memory
# transport does, but for two differences its simple protocol has, listed
# with -k: a superseded urgent byte at the receiver's read position is
# discarded by the kernel (urgent_two_in_a_row: the bytes still unread in
# the pair are not in the kernel's stream, so its read position is
# another), a full peer whose kernel window would reopen later keeps a
# socketpair's buffer full (cold tcp6 epollout_level_full_peer: the switch
# came in the middle of the fill), a hand-over with bytes still unread
# in the pair resets the connection (uring_on_a_connection: the io_uring
# comes with bytes waiting), and so does the last close after one holder
# of a forked connection closed its copy with bytes unread in the pair
# (prefork_both_move_bytes_then_parent_closes, prefork_grandchild_serves:
# it counts no holders).
conformance_socketpair() {
	mkdir -p "$RUNDIR/socketpair"
	DSOCK_FASTPATH=1 DSOCK_TRANSPORTS=socketpair "$BUILD/tests/conformance" -j "$JOBS" -f tcp -r "$RUNDIR/socketpair" \
		-m 90 -k /urgent_two_in_a_row,tcp6/epollout_level_full_peer,/uring_on_a_connection,/prefork_both_move_bytes_then_parent_closes,/prefork_grandchild_serves \
		-w "$BUILD/bin/dsock run --" \
		"$BUILD/tests/conf-scen"
}

# The same over a channel's stream (src/lib/chan/) on a loopback TCP
# connection, as a channel between hosts runs: a daemon of its own, told
# by DSOCK_SP_PIPE=tcp to make each pair's pipe a TCP connection framed as
# a channel of one stream, which its `dsock stat --raw` must say (a daemon
# already running without it would leave the pairs plain); the same known
# differences.
conformance_framed() {
	local sock="$RUNDIR/framed/dsockd.sock" rc
	mkdir -p "$RUNDIR/framed/rec"
	DSOCK_SOCKET="$sock" DSOCK_SP_PIPE=tcp DSOCK_FASTPATH=1 DSOCK_TRANSPORTS=socketpair \
		"$BUILD/tests/conformance" -j "$JOBS" -f tcp -r "$RUNDIR/framed/rec" -m 90 \
		-k /urgent_two_in_a_row,tcp6/epollout_level_full_peer,/uring_on_a_connection,/prefork_both_move_bytes_then_parent_closes,/prefork_grandchild_serves \
		-w "$BUILD/bin/dsock run --" "$BUILD/tests/conf-scen"
	rc=$?
	if ! DSOCK_SOCKET="$sock" "$BUILD/bin/dsock" stat --raw 2>/dev/null | grep -q 'socketpair_framed=1.*socketpair_pipe=tcp'; then
		echo "the daemon did not frame the pairs as channels: the step did not test them"
		rc=1
	fi
	DSOCK_SOCKET="$sock" "$BUILD/bin/dsock" stop >/dev/null 2>&1
	return $rc
}

# The same scenarios with the fast path off: the passthrough layer alone.
conformance_kernel() {
	DSOCK_FASTPATH=0 "$BUILD/tests/conformance" -j "$JOBS" -w "$BUILD/bin/dsock run --" "$BUILD/tests/conf-scen"
}

# Epoll ghosts (src/lib/sock/eghost.c, on by default) with the bells off,
# so that the waits that wake by tokens alone, and the ghost filter that
# judges their events, are kept honest on every scenario.
conformance_ghosts() {
	mkdir -p "$RUNDIR/ghosts"
	DSOCK_FASTPATH=1 DSOCK_EPOLL_GHOSTS=1 DSOCK_BELLS=0 "$BUILD/tests/conformance" -j "$JOBS" -r "$RUNDIR/ghosts" \
		-m 90 -w "$BUILD/bin/dsock run --" "$BUILD/tests/conf-scen" || return 1
	# the threaded ones again with every event the tombstones would place
	# judged by its holder's readiness instead (eghost.c)
	DSOCK_FASTPATH=1 DSOCK_EPOLL_GHOSTS=1 DSOCK_BELLS=0 DSOCK_TEST_GHOST_UNSURE=1 "$BUILD/tests/conformance" -j "$JOBS" \
		-f /rv_ -w "$BUILD/bin/dsock run --" "$BUILD/tests/conf-scen"
}

daemon_tests() {
	DSOCK_FASTPATH=1 python3 tests/daemon/test_daemon.py "$BUILD"
}

# The harness must be able to fail: a scenario with a wrong expectation, and
# a deliberately wrong interposer, must both be reported.
harness_selftest() {
	local out rc=0
	out=$("$BUILD/tests/conformance" -s -w "$BUILD/bin/dsock run --" "$BUILD/tests/conf-scen")
	if [ $? = 0 ] || ! grep -q "FAIL selftest/wrong_expectation (fails natively" <<<"$out"; then
		echo "harness accepted a scenario whose expectation is wrong:"; echo "$out"; rc=1
	fi
	out=$("$BUILD/tests/conformance" -f peek -w "env LD_PRELOAD=$(realpath "$BUILD")/tests/libbroken.so" "$BUILD/tests/conf-scen")
	if [ $? = 0 ] || [ "$(grep -c '^FAIL' <<<"$out")" -lt 6 ]; then
		echo "harness did not catch the broken interposer:"; echo "$out"; rc=1
	fi
	[ $rc = 0 ] && echo "the harness fails on a wrong expectation and on a broken interposer ($(grep -c '^FAIL' <<<"$out") scenarios caught)"
	return $rc
}

# The real programs with servers and clients in network namespaces of
# their own (skipped unless root); between hosts, on channels (the
# `hosts` place, where the kernel carries them, runs by hand).
apps_across() {
	local rc=0
	for place in bridge dnat channels; do
		tests/apps/run_apps.sh "$BUILD" $place || rc=1
	done
	return $rc
}

step "build" make -s -j2 BUILD="$BUILD"
step "unit tests" unit "$BUILD"
step "exports" tests/unit/exports.sh "$BUILD"
# the layer rules, file lengths and no tracked build outputs (and that the
# check catches each breach)
step "layout" sh -c 'tests/unit/layout.py --self-test && tests/unit/layout.py'
step "build with ASan+UBSan" make -s -j2 san SAN=address,undefined BUILD="$SANBUILD"
step "unit tests under ASan+UBSan" unit "$SANBUILD"
# ThreadSanitizer over the unit tests, the threaded fast-path one included
# (clang: gcc's TSan rejects the library's atomic fences)
step "build with TSan" make -s -j2 san SAN=thread CC=clang BUILD="$BUILD-tsan"
step "unit tests under TSan" unit "$BUILD-tsan"
step "conformance (native vs dsock, fast path on)" conformance
step "conformance (native vs dsock, back to the kernel mid-stream, epoll ghosts off)" conformance_back
step "conformance (native vs dsock, fast path off)" conformance_kernel
step "conformance (native vs dsock, bells off)" conformance_ghosts
step "conformance over the test transport socketpair (TCP scenarios)" conformance_socketpair
step "conformance over the test transport socketpair framed as channels on loopback TCP (TCP scenarios)" conformance_framed
step "conformance across network namespaces: over a bridge, through DNAT (BPF proof, root)" \
	tests/conformance/across_ns.sh "$BUILD"
step "conformance harness self-test" harness_selftest
step "daemon and CLI" daemon_tests
step "faults: SIGKILL, dsockd restart, hostile peer, namespaces, killed peers" python3 tests/faults/test_faults.py "$BUILD"
step "resources: EMFILE, mmap failure, memory limit, fork storm" python3 tests/faults/test_resources.py "$BUILD"
step "proof across namespaces: veth, DNAT, two tenants with identical addresses (BPF, root)" \
	python3 tests/faults/test_proof.py "$BUILD"
step "forged claims across namespaces: a replayed nonce, TCP_REPAIR (BPF, root)" python3 tests/faults/test_forge.py "$BUILD"
step "hand-over to programs without dsock: exec, SCM_RIGHTS" python3 tests/faults/test_handover.py "$BUILD"
step "real programs under dsock" tests/apps/run_apps.sh "$BUILD"
step "real programs across network namespaces: over a bridge, through DNAT, between hosts with a daemon each on channels (BPF proof, root)" apps_across
step "hosts simulated in namespaces, a daemon each: proven over TLS links, plain peers, a hostile host, daemon faults (root)" \
	tests/hosts/run_hosts.sh "$BUILD"
step "integrity soak: native, dsock, dsock going back to the kernel mid-stream, dsock with 10,000 connections, dsock with client ports reused at once (15 s each); 100,000 connections at once" \
	tests/soak/run.sh "$BUILD" 15
step "fuzzers: ring reader, control protocol (30 s each)" tests/fuzz/run.sh 30

[ ${#FAILED[@]} -gt 0 ] && echo "failed steps: ${FAILED[*]}"
echo "tests: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
