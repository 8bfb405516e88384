"""Where a workload's processes run (bench/workloads.py takes one as `at`).

LOOP: every process in the suite's own namespace, on 127.0.0.1.

across(dnat): each role (client, server, front, app, db) in a network
namespace of its own, as containers on one host: a "host" namespace holds
a Linux bridge, and each role's namespace is joined to it by a veth pair
(Docker's default bridge network).  With dnat=True a client dials a
service address instead of the server's, which the host rewrites to the
server's and masquerades (kube-proxy's ClusterIP form for a pod that
reaches a service on its own node): the server sees the host's address.

A dsock daemon pairs connections across namespaces only by the
kernel-recorded proof: proving_daemon() restarts the suite's daemon with
DSOCK_BPF_PROOF=1 (root), plain_daemon() without it.  Hosts: the same
namespaces as hosts of their own, a daemon each."""
import os, subprocess, time

from harness import DSOCK, ENV, run

DSOCKD = os.path.join(os.path.dirname(DSOCK), "dsockd")

HOST = "dsockBh"
ROLES = ("client", "server", "front", "app", "db")


class Place:
    def __init__(self, dnat=False, spaces=False):
        self.dnat, self.spaces = dnat, spaces

    def pre(self, role):
        """The prefix that runs a command in role's namespace."""
        return ["ip", "netns", "exec", ns(role)] if self.spaces else []

    def addr(self, role):
        """The address role's servers listen on."""
        return "10.97.0.%d" % (2 + ROLES.index(role)) if self.spaces else "127.0.0.1"

    def dial(self, role):
        """The address others dial to reach role."""
        return "10.97.100.%d" % (2 + ROLES.index(role)) if self.dnat else self.addr(role)


LOOP = Place()


class KeptOnKernel(Place):
    """On loopback, every connection left on the kernel under dsock
    (DSOCK_FASTPATH=0), as one to a plain peer or to another host is: what
    the spin on kernel sockets gives."""

    def pre(self, role):
        return ["env", "DSOCK_FASTPATH=0"]


KEPT = KeptOnKernel()


class Hosts(Place):
    """Each role in a namespace of its own on the bridge, as across(), but
    as on hosts of their own: each with a daemon of its own (its own
    control socket, host key and allow-list of the others, reading the
    suite's proving daemon's records), so the daemons prove a connection
    between two hosts over their links, as deployed hosts' daemons do.
    Offered to the default transport, a connection between hosts stays on
    the kernel, and what dsock gives there is the spin on kernel sockets;
    ChannelHosts offers it to the transport whose ends run over a channel
    between hosts."""

    def __init__(self):
        super().__init__(spaces=True)
        self.started = set()

    def env(self, role):
        d = os.path.dirname(host_socket(role))
        return ["DSOCK_SOCKET=" + host_socket(role), "DSOCK_BPF_PROOF=1", "DSOCK_HOST_KEY=" + d + "/host.key",
                "DSOCK_HOSTS_ALLOW=" + d + "/allow"]

    def start(self):
        """Keys, allow-lists and the daemons, once the suite's proving
        daemon runs (each host's reads its records): through nsenter,
        since `ip netns exec` hides the cgroup mount."""
        fps = {}
        for role in ROLES:
            os.makedirs(os.path.dirname(host_socket(role)), mode=0o755, exist_ok=True)
            fps[role] = subprocess.run(["env", *self.env(role), DSOCKD, "--fingerprint"], capture_output=True,
                                       text=True, check=True).stdout.strip()
        for role in ROLES:
            with open(os.path.join(os.path.dirname(host_socket(role)), "allow"), "w") as f:
                f.writelines(f"{fps[o]} {o}\n" for o in ROLES if o != role)
        for role in ROLES:
            subprocess.run(["nsenter", "--net=/run/netns/" + ns(role), "env", *self.env(role), DSOCK, "run", "--",
                            "true"], env=ENV, capture_output=True, check=True)

    def pre(self, role):
        return super().pre(role) + ["env", *self.env(role)]


class ChannelHosts(Hosts):
    """The same hosts and daemons (started by Hosts.start), with the
    programs under dsock offering their connections to the transport that
    runs over a channel between hosts (DSOCK_TRANSPORTS=socketpair): the
    claimant's daemon dials a channel per connection."""

    def pre(self, role):
        return super().pre(role) + ["DSOCK_TRANSPORTS=socketpair"]


def host_socket(role):
    return os.path.join(os.path.dirname(ENV["DSOCK_SOCKET"]), "host-" + role, "d.sock")


def stop_host_daemons():
    for role in ROLES:
        if os.path.exists(host_socket(role) + ".lock"):
            subprocess.run([DSOCK, "stop"], env=dict(ENV, DSOCK_SOCKET=host_socket(role)), capture_output=True)


def ns(role):
    return "dsockB" + role


def sh(script):
    r = subprocess.run(["bash", "-ec", script], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("namespaces: " + r.stderr.strip()[-400:])


def teardown():
    for n in [HOST] + [ns(r) for r in ROLES]:
        subprocess.run(["ip", "netns", "del", n], capture_output=True)


def build():
    """Makes the namespaces, the bridge and the DNAT rules; returns
    (bridge, dnat) Places."""
    teardown()
    lines = [f"ip netns add {HOST}", f"ip -n {HOST} link add br0 type bridge",
             f"ip -n {HOST} addr add 10.97.0.1/24 dev br0", f"ip -n {HOST} link set br0 up",
             f"ip -n {HOST} link set lo up", f"ip netns exec {HOST} sysctl -qw net.ipv4.ip_forward=1"]
    rules = []
    for i, role in enumerate(ROLES):
        n, a = ns(role), 2 + i
        lines += [f"ip netns add {n}", f"ip link add v{role} netns {HOST} type veth peer name eth0 netns {n}",
                  f"ip -n {HOST} link set v{role} master br0 up", f"ip -n {n} addr add 10.97.0.{a}/24 dev eth0",
                  f"ip -n {n} link set eth0 up", f"ip -n {n} link set lo up",
                  f"ip -n {n} route add default via 10.97.0.1"]
        rules.append(f"  ip daddr 10.97.100.{a} dnat to 10.97.0.{a}")
    nft = ("table ip dsockbench {\n chain pre {\n  type nat hook prerouting priority dstnat;\n" + "\n".join(rules) +
           "\n }\n chain post {\n  type nat hook postrouting priority srcnat;\n  ct status dnat masquerade\n }\n}\n")
    sh("\n".join(lines) + f"\nip netns exec {HOST} nft -f - <<'EOF'\n{nft}EOF\n")
    return Place(spaces=True), Place(dnat=True, spaces=True)


def stop_daemon():
    """Stops the suite's daemon and waits until it is gone."""
    lock = ENV["DSOCK_SOCKET"] + ".lock"
    try:
        pid = int(open(lock).read().split()[0])
    except (OSError, ValueError, IndexError):
        pid = 0
    subprocess.run([DSOCK, "stop"], env=ENV, capture_output=True)
    for _ in range(100):  # its BPF links go with it: never two proving daemons at once
        if not pid or not os.path.exists(f"/proc/{pid}"):
            return
        time.sleep(0.05)
    os.kill(pid, 9)


def proving_daemon():
    """Restarts the suite's daemon with the kernel-recorded proof; returns
    None, or why it could not attach its programs."""
    stop_daemon()
    log = ENV["DSOCK_SOCKET"] + ".log"
    seen = os.path.getsize(log) if os.path.exists(log) else 0
    ENV["DSOCK_BPF_PROOF"] = "1"
    run([DSOCK, "run", "--", "true"], "native")  # in this namespace: `ip netns exec` hides the cgroup root
    time.sleep(0.2)
    text = open(log).read()[seen:] if os.path.exists(log) else ""
    return None if "kernel-recorded proof on" in text else (text.strip().splitlines() or ["no log"])[-1]


def plain_daemon():
    stop_daemon()
    ENV.pop("DSOCK_BPF_PROOF", None)
    run([DSOCK, "run", "--", "true"], "native")
