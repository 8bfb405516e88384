# Containers on one host, built as Docker's default bridge network is
# (sourced by the tests that run across network namespaces; root only):
# a namespace "host" with a Linux bridge, each "container" a namespace
# joined to it by a veth pair, and in the host a DNAT rule per container
# for a service address (kube-proxy's ClusterIP form: address rewritten,
# port kept) with the masquerade that lets one container reach another
# through it.
#
#   topo_up HOST NET4 NET6 NS...   makes them: the bridge has NET4.0.1 and
#       NET6::1; the i-th NS (from 0) has NET4.0.(i+2) and NET6::(i+2) on
#       its eth0, and is reached through DNAT at NET4.100.(i+2) and
#       NET6:100::(i+2)
#   topo_down HOST NS...           removes them (and whatever a failed
#       run left)
# e.g. topo_up dsockCh 10.98 fd98 dsockCc dsockCs: the client 10.98.0.2,
# the server 10.98.0.3, its service address 10.98.100.3.

topo_down() {
	local n
	for n in "$@"; do ip netns del "$n" 2>/dev/null; done
	return 0
}

topo_up() {
	local host=$1 net4=$2 net6=$3 i=2 n rules=""
	shift 3
	topo_down "$host" "$@"
	(
		set -e
		ip netns add "$host"
		ip -n "$host" link add br0 type bridge
		ip -n "$host" addr add "$net4.0.1/24" dev br0
		ip -n "$host" addr add "$net6::1/64" dev br0 nodad
		ip -n "$host" link set br0 up
		ip -n "$host" link set lo up
		ip netns exec "$host" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
		for n in "$@"; do
			ip netns add "$n"
			ip link add "v$n" netns "$host" type veth peer name eth0 netns "$n"
			ip -n "$host" link set "v$n" master br0 up
			ip -n "$n" addr add "$net4.0.$i/24" dev eth0
			ip -n "$n" addr add "$net6::$i/64" dev eth0 nodad
			ip -n "$n" link set eth0 up
			ip -n "$n" link set lo up
			ip -n "$n" route add default via "$net4.0.1"
			ip -n "$n" -6 route add default via "$net6::1"
			i=$((i + 1))
		done
	) || return 1
	for ((i = 2; i < $# + 2; i++)); do
		rules+="		ip daddr $net4.100.$i dnat ip to $net4.0.$i
		ip6 daddr $net6:100::$i dnat ip6 to $net6::$i
"
	done
	ip netns exec "$host" nft -f - <<EOF
table inet dsocktopo {
	chain pre {
		type nat hook prerouting priority dstnat;
$rules	}
	chain post {
		type nat hook postrouting priority srcnat;
		ct status dnat masquerade
	}
}
EOF
}

# stop_proving_daemon DSOCK: stops the daemon of $DSOCK_SOCKET and waits
# until it is gone: its BPF links go with it, and no second proving daemon
# may ever overlap it
stop_proving_daemon() {
	local pid
	pid=$(awk '{print $1; exit}' "$DSOCK_SOCKET.lock" 2>/dev/null)
	"$1" stop >/dev/null 2>&1
	for _ in $(seq 100); do
		[ -n "$pid" ] && [ -d "/proc/$pid" ] || break
		sleep 0.05
	done
	[ -n "$pid" ] && [ -d "/proc/$pid" ] && kill -9 "$pid"
	return 0
}
