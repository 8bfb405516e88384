#!/usr/bin/env bash
# The conformance suite's TCP scenarios with client and server in two
# network namespaces, natively and under dsock (root only).  It builds a
# host of its own as Docker's default bridge network is built
# (tests/lib/topo.sh): a namespace "host" with a Linux bridge, two
# "containers" each joined to it by a veth pair, and in the host a DNAT
# rule for each one's service address with the masquerade that lets a
# container reach another through it.  The scenarios run in the
# client's namespace; fam_server makes their listeners in the server's
# (tests/conformance/rec.c):
#   bridge  the client dials the server's own address on the bridge
#           (every TCP family);
#   dnat    the client dials the service address: the server sees the
#           host's address, no tuple of one end mirrors the other's (the
#           warm families, whose every scenario pairs: what the DNAT
#           changes for dsock is the proof alone).
# A daemon of its own with DSOCK_BPF_PROOF=1 pairs the ends by the
# kernel-recorded proof; the warm families must move their bytes through
# a transport in at least 90 % of their scenarios (-m 90), as on loopback.
# Usage: tests/conformance/across_ns.sh BUILD_DIR [bridge|dnat]...
# Skips (exit 0) when not root or when the daemon cannot load its programs.
set -u
BUILD=$(cd "${1:-build}" && pwd)
shift
MODES=${*:-bridge dnat}
H=dsockCh C=dsockCc S=dsockCs
TMP=$(mktemp -d /tmp/dsock-across-XXXXXX)
export DSOCK_SOCKET=$TMP/d.sock DSOCK_BPF_PROOF=1

. "$(dirname "$0")/../lib/topo.sh"

cleanup() {
	stop_proving_daemon "$BUILD/bin/dsock"
	topo_down $H $C $S
	rm -rf "$TMP"
}

if [ "$(id -u)" != 0 ] || ! command -v nft >/dev/null; then
	echo "skip: the suite across namespaces needs root and nft"
	exit 0
fi
trap cleanup EXIT
topo_up $H 10.98 fd98 $C $S || { echo "cannot build the namespaces"; exit 1; }

# the daemon, started by a first `dsock run` in the machine's own
# namespaces (`ip netns exec` remounts /sys, hiding the cgroup-v2 root it
# attaches at): it is reached by its socket's path from every namespace
"$BUILD/bin/dsock" run -- true
if ! grep -q "kernel-recorded proof on" "$DSOCK_SOCKET.log" 2>/dev/null; then
	echo "skip: the daemon did not attach its BPF programs: $(tail -c 300 "$DSOCK_SOCKET.log" 2>/dev/null)"
	exit 0
fi

rc=0
for mode in $MODES; do
	case $mode in
	bridge) dial4=10.98.0.3 dial6=fd98::3 only=tcp ;;
	dnat) dial4=10.98.100.3 dial6=fd98:100::3 only=w/ ;;
	*) echo "unknown mode $mode"; exit 2 ;;
	esac
	echo "--- $mode: client in $C dials $dial4 / $dial6, server in $S"
	mkdir -p "$TMP/$mode"
	ip netns exec $C env CONF_SERVER_NETNS=/run/netns/$S CONF_SERVER_ADDR4=10.98.0.3 CONF_SERVER_ADDR6=fd98::3 \
		CONF_DIAL4=$dial4 CONF_DIAL6=$dial6 DSOCK_FASTPATH=1 \
		"$BUILD/tests/conformance" -j "${DSOCK_TEST_JOBS:-8}" -f $only -r "$TMP/$mode" -m 90 -w "$BUILD/bin/dsock run --" \
		"$BUILD/tests/conf-scen" || rc=1
done
exit $rc
