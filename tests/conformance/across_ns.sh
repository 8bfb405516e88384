#!/usr/bin/env bash
# The conformance suite's TCP scenarios with client and server in two
# network namespaces, natively and under dsock (root only).  It builds a
# host of its own as Docker's default bridge network is built: a namespace
# "host" with a Linux bridge, two "containers" each joined to it by a veth
# pair, and in the host a DNAT rule for a service address (kube-proxy's
# ClusterIP form: address rewritten, port kept) with the masquerade that
# lets a container reach another through it.  The scenarios run in the
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

cleanup() {
	local pid
	pid=$(awk '{print $1; exit}' "$DSOCK_SOCKET.lock" 2>/dev/null)
	"$BUILD/bin/dsock" stop >/dev/null 2>&1
	# the daemon's BPF links go with it: wait, so that no second proving
	# daemon ever overlaps this one
	for _ in $(seq 100); do
		[ -n "$pid" ] && [ -d /proc/$pid ] || break
		sleep 0.05
	done
	[ -n "$pid" ] && [ -d /proc/$pid ] && kill -9 "$pid"
	for n in $H $C $S; do ip netns del $n 2>/dev/null; done
	rm -rf "$TMP"
}

if [ "$(id -u)" != 0 ] || ! command -v nft >/dev/null; then
	echo "skip: the suite across namespaces needs root and nft"
	exit 0
fi
for n in $H $C $S; do ip netns del $n 2>/dev/null; done
trap cleanup EXIT

set -e
for n in $H $C $S; do ip netns add $n; done
ip -n $H link add br0 type bridge
ip -n $H addr add 10.98.0.1/24 dev br0
ip -n $H addr add fd98::1/64 dev br0 nodad
ip -n $H link set br0 up
ip -n $H link set lo up
ip netns exec $H sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
i=2
for n in $C $S; do
	ip link add veth$n netns $H type veth peer name eth0 netns $n
	ip -n $H link set veth$n master br0 up
	ip -n $n addr add 10.98.0.$i/24 dev eth0
	ip -n $n addr add fd98::$i/64 dev eth0 nodad
	ip -n $n link set eth0 up
	ip -n $n link set lo up
	ip -n $n route add default via 10.98.0.1
	ip -n $n -6 route add default via fd98::1
	i=$((i + 1))
done
ip netns exec $H nft -f - <<'EOF'
table inet dsockconf {
	chain pre {
		type nat hook prerouting priority dstnat;
		ip daddr 10.98.100.3 dnat ip to 10.98.0.3
		ip6 daddr fd98:100::3 dnat ip6 to fd98::3
	}
	chain post {
		type nat hook postrouting priority srcnat;
		ct status dnat masquerade
	}
}
EOF
set +e

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
		"$BUILD/tests/conformance" -j 2 -f $only -r "$TMP/$mode" -m 90 -w "$BUILD/bin/dsock run --" \
		"$BUILD/tests/conf-scen" || rc=1
done
exit $rc
