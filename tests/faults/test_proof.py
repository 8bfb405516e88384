#!/usr/bin/env python3
"""The kernel-recorded proof of identity, end to end (root only: it needs
network namespaces, nftables and a daemon that loads BPF).  A daemon of its
own runs with DSOCK_BPF_PROOF=1 and attaches the programs at the cgroup-v2
root; each scenario runs real processes under dsock in namespaces it makes
and removes:

  1. client and server in two network namespaces joined by a veth pair:
     both ends move onto shared memory, every byte echoed intact;
  1b. a second daemon asked to prove attaches no programs of its own
     while this one's are attached (two would break each other's
     records): it reads their records;
  2. the same through DNAT (the client dials a published address that
     nftables rewrites to the server's): no tuple of one end mirrors the
     other's, and the ends still pair;
  3. two tenants with identical addressing (two pairs of namespaces, each
     10.50.0.2 -> 10.50.0.3:9000, client port 40000 in both): each client
     pairs with its own server only (each server tags its echo); then 40
     connections at once in each, from client ports 40000-40039 in both;
  4. a plain server (not under dsock): the client stays on the kernel
     (its record half filled: no answer came; reason handshake-unproven),
     and a plain client to a dsock server: the server stays on the kernel;
  5. loopback in one namespace: not marked (no record), paired by the
     addresses as before;
  6. as 1, each end also in mount and PID namespaces of its own (as in a
     container; the daemon's socket reached by its path): paired, the
     daemon seeing both by their pids on the host;
  7. the daemon stops (its programs detached with it) and starts again: a
     pair on shm keeps echoing throughout, a connection made meanwhile
     stays on the kernel (no record, no shared memory), one made after
     the restart pairs;
  8. the programs detached by force under a living daemon (root's
     BPF_LINK_DETACH): the pair keeps echoing, a new connection stays on
     the kernel at both ends (no record); 8b. on SIGHUP the daemon
     finds them detached and attaches them again: new connections pair;
     8c. a daemon that watches its programs (DSOCK_BPF_WATCH_MS) does so
     unasked;
  9. SYN cookies at the server (tcp_syncookies=2): the child proven from
     the client's echo and the cookie, both ends on shm;
  9b. a listener with TCP_DEFER_ACCEPT (the bare third ACK dropped, the
     child made from the first data segment): proven from the echo that
     segment carries, both ends on shm;
 10. TCP Fast Open (a cookie fetched, then data in the SYN): the client
     on the kernel with reason tcp-fast-open, every byte echoed;
 11. a container made as a runtime makes one: a user namespace (host uid
     100000, root inside), tmpfs over /run, the daemon's socket directory
     bind-mounted at /run/dsock and hidden at its own path: paired with a server in
     another namespace, known by its host uid, its dsock stat showing its
     own processes only, unable to stop the daemon;
 12. the operator's pairing rules (DSOCK_PAIR_RULES): a client in a
     namespace a rule denies, and a server in a cgroup a rule denies, stay
     on the kernel (denied-by-rule), every byte echoed; namespaces no rule
     names pair; a rule naming a namespace that does not exist stops the
     daemon with its message; 12b. a client whose own rules (DSOCK_RULES)
     deny the server's port: not marked at all (no record), on the kernel;
     12c. a client dialling an address that is not private: not marked by
     default (no record, the kernel), marked with DSOCK_PROOF_MARK=all (on
     shm);
 13. the host's daemon (root's default socket, in a mount namespace with a
     /run of its own) proves by default, and not with DSOCK_BPF_PROOF=0.
Every client also tries to write its own record (setsockopt
DSOCK_IDENTITY): refused, the record unchanged.

Each check prints ok/FAIL; exit 0 on pass; last line 'proof: N passed, N failed'.
Skips (exit 0) when not root, or when the daemon cannot load its programs."""
import os, shutil, signal, subprocess, sys, time

sys.dont_write_bytecode = True  # (no __pycache__ in the tree)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proofkit import *  # noqa: E402,F403  (the daemon, the processes, the checks)


def main():
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nft"):
        print("skip: the proof across namespaces needs root, ip and nft")
        print("proof: 0 passed, 0 failed")
        return 0
    cleanup()
    subprocess.run([DSOCK, "stop"], env=ENV, capture_output=True)
    log = SOCK + ".log"
    # the daemon: started by the first `dsock run`, with DSOCK_BPF_PROOF=1
    subprocess.run([DSOCK, "run", "--", "true"], env=ENV, capture_output=True, timeout=30)
    time.sleep(0.2)
    text = open(log).read() if os.path.exists(log) else ""
    if "kernel-recorded proof on" not in text:
        print("skip: the daemon did not attach its BPF programs: " + text.strip()[-300:])
        print("proof: 0 passed, 0 failed")
        subprocess.run([DSOCK, "stop"], env=ENV, capture_output=True)
        return 0
    try:
        r = netns_pair("dsockP1", "dsockP2", "10.198.0.1", "10.198.0.2", "dsp")
        check("namespaces made", r.returncode == 0, r.stderr)
        # 1. across namespaces
        s, c = exchange("1. veth", "dsockP2", "dsockP1", "10.198.0.2", "10.198.0.2", 9000, "P")
        r = subprocess.run([DSOCK, "stat", "--raw"], env=ENV, capture_output=True, text=True).stdout
        rows = {l.split()[1]: l for l in r.splitlines() if l.startswith("proc ")}
        check("1. dsock stat shows each end's network namespace",
              c and all(" netns=%d " % os.stat("/run/netns/" + n).st_ino in rows.get("pid=%d" % p.pid, "")
                        for p, n in ((c, "dsockP1"), (s, "dsockP2"))), list(rows.values()))
        end(s, c)
        # 1b. a second proving daemon on the host attaches nothing (the
        # first one's programs are attached) and reads their records:
        # case 2 then pairs by the first
        sock2 = os.path.join(tmp, "second.sock")
        env2 = dict(ENV, DSOCK_SOCKET=sock2)
        subprocess.run([DSOCK, "run", "--", "true"], env=env2, capture_output=True, timeout=30)
        time.sleep(0.2)
        text = open(sock2 + ".log").read() if os.path.exists(sock2 + ".log") else ""
        subprocess.run([DSOCK, "stop"], env=env2, capture_output=True)
        check("1b. a second proving daemon attaches no programs and reads the first one's records",
              "another daemon's programs" in text and "reading their records" in text and
              "kernel-recorded proof on" not in text, text[-300:])
        # 2. through DNAT, as to a published port: the client dials
        # 10.198.9.9:8080 (routed to the server's namespace), which rewrites
        # it to 10.198.0.2:9001 before routing
        r = sh("ip netns exec dsockP2 nft -f - <<'EOF' && ip -n dsockP1 route add 10.198.9.9/32 via 10.198.0.2\n"
               "table ip dsocknat {\n chain pre {\n  type nat hook prerouting priority -100;\n"
               "  ip daddr 10.198.9.9 tcp dport 8080 dnat to 10.198.0.2:9001\n }\n}\nEOF\n")
        check("2. DNAT rule made", r.returncode == 0, r.stderr)
        s, c = exchange("2. DNAT", "dsockP2", "dsockP1", "10.198.0.2", "10.198.9.9", 9001, "D", dport=8080)
        end(s, c)
        # 3. two tenants, identical addresses and ports
        ok = all(netns_pair(a, b, "10.50.0.2", "10.50.0.3", d).returncode == 0
                 for a, b, d in (("dsockT1a", "dsockT1b", "dt1"), ("dsockT2a", "dsockT2b", "dt2")))
        check("3. tenants' namespaces made", ok)
        s1 = start("dsockT1b", SERVER, "10.50.0.3", 9000, "one")
        s2 = start("dsockT2b", SERVER, "10.50.0.3", 9000, "two")
        ready = [line(p) for p in (s1, s2)]
        c1 = start("dsockT1a", CLIENT, "10.50.0.3", 9000, "one", 40000)
        c2 = start("dsockT2a", CLIENT, "10.50.0.3", 9000, "two", 40000)
        outs = [line(p) for p in (c1, c2)]
        check("3. each tenant's client hears its own server only",
              ready == ["ready"] * 2 and outs == ["ok complete"] * 2,
              (ready, outs))
        for p in (c1, c2, s1, s2):
            rows = wait_path(p.pid, "shm")
            check("3. pid %d on shm" % p.pid, all("path=shm" in l for l in rows), rows)
        end(c1, c2, s1, s2)
        # 3b. the same with 40 connections at once in each tenant, from
        # the same client ports 40000-40039 in both
        s1 = start("dsockT1b", SERVER_MANY, "10.50.0.3", 9001, "one")
        s2 = start("dsockT2b", SERVER_MANY, "10.50.0.3", 9001, "two")
        ready = [line(p) for p in (s1, s2)]
        c1 = start("dsockT1a", CLIENT_MANY, "10.50.0.3", 9001, "one", 40)
        c2 = start("dsockT2a", CLIENT_MANY, "10.50.0.3", 9001, "two", 40)
        outs = [line(p, 60) for p in (c1, c2)]
        check("3b. 40 connections in each tenant at once, identical 4-tuples: each hears its own server only",
              ready == ["ready"] * 2 and outs == ["ok 40"] * 2, (ready, outs))
        for p in (c1, c2):
            rows = wait_path(p.pid, "shm", n=40)
            check("3b. pid %d: its 40 connections on shm" % p.pid,
                  len(rows) == 40 and all("path=shm" in l for l in rows), rows[:3])
        end(c1, c2, s1, s2)
        # 4. a plain server
        s, c = exchange("4. plain server", "dsockP2", "dsockP1", "10.198.0.2", "10.198.0.2", 9002, "",
                        plain_server=True, want="kernel", why="handshake-unproven")
        end(s, c)
        # 4b. a plain client (not under dsock) to a dsock server: the
        # marked listener's answer goes only to a SYN with the option
        srv = start("dsockP2", SERVER, "10.198.0.2", 9013, "Q")
        cli = start("dsockP1", CLIENT, "10.198.0.2", 9013, "Q", 0, plain=True) if line(srv) == "ready" else None
        out = line(cli).split() if cli else []
        check("4b. plain client: every byte echoed, no record of its own", out == ["ok", "no-record"], out)
        rows = wait_path(srv.pid, "kernel")
        check("4b. ... the server is on kernel", rows and all("path=kernel" in l for l in rows), rows)
        end(cli, srv)
        # 5. loopback in one namespace
        s, c = exchange("5. loopback", "dsockP1", "dsockP1", "127.0.0.1", "127.0.0.1", 9003, "L")
        end(s, c)
        # 6. container-like: network, mount and PID namespaces of their own
        srv = start("dsockP2", SERVER, "10.198.0.2", 9004, "C", container=True)
        cli = start("dsockP1", CLIENT, "10.198.0.2", 9004, "C", 0, container=True) if line(srv) == "ready" else None
        out = line(cli).split() if cli else []
        check("6. in PID and mount namespaces: every byte echoed, the record complete", out == ["ok", "complete"], out)
        rows = wait_path(":9004 ", "shm", n=2)
        check("6. ... both ends on shm", len(rows) == 2 and all("path=shm" in l for l in rows), rows)
        end(cli, srv)
        # 9. SYN cookies at the server (every SYN answered by one): the
        # child, made from the cookie's ACK, reads the client's nonce in
        # its echo and computes its own from the cookie
        sh("ip netns exec dsockP2 sysctl -qw net.ipv4.tcp_syncookies=2")
        s, c = exchange("9. SYN cookies", "dsockP2", "dsockP1", "10.198.0.2", "10.198.0.2", 9010, "K")
        end(s, c)
        sh("ip netns exec dsockP2 sysctl -qw net.ipv4.tcp_syncookies=1")
        # 9b. a listener with TCP_DEFER_ACCEPT drops the bare third ACK
        # and makes its child from the first data segment, whose echo
        # proves it
        s, c = exchange("9b. TCP_DEFER_ACCEPT", "dsockP2", "dsockP1", "10.198.0.2", "10.198.0.2", 9014, "D", defer=True)
        end(s, c)
        # 10. TCP Fast Open: the first connection fetches a cookie, the
        # second sends its first bytes in the SYN
        sh("ip netns exec dsockP1 sysctl -qw net.ipv4.tcp_fastopen=3; ip netns exec dsockP2 sysctl -qw net.ipv4.tcp_fastopen=3")
        for k, p in ((1, 9011), (2, 9012)):
            s, c = exchange("10. TCP Fast Open, connection %d" % k, "dsockP2", "dsockP1", "10.198.0.2", "10.198.0.2",
                            p, "F", want="kernel", rec="any", tfo=True, why="tcp-fast-open")
            end(s, c)
        # 11. a container as a runtime makes one: a user namespace of its
        # own (root inside, host uid 100000 outside), its own /run (tmpfs)
        # and the daemon's socket directory bind-mounted at /run/dsock, as
        # `-v` does; in dsockP1
        # (the mounts are made as root in a mount namespace of its own, the
        # build bound in at /run/dsock-build so that uid 100000 reaches it
        # wherever the tree is, and the test's directory hidden at its own
        # path once bound: the socket is reached only through the bind)
        os.chmod(tmp, 0o755)
        mounts = ("mount -t tmpfs none /run && mkdir /run/dsock /run/dsock-build && mount --bind %s /run/dsock && "
                  "mount --bind %s /run/dsock-build && mount -t tmpfs none %s && exec \"$@\"" % (tmp, BUILD, tmp))
        srv = start("dsockP2", SERVER, "10.198.0.2", 9020, "U")
        cont = ["ip", "netns", "exec", "dsockP1", "unshare", "--mount", "sh", "-c", mounts, "sh",
                "setpriv", "--reuid=100000", "--regid=100000", "--clear-groups",
                "unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--mount-proc",
                "/run/dsock-build/bin/dsock", "run", "--no-daemon", "--"]
        cli = None
        if line(srv) == "ready":
            cli = subprocess.Popen(cont + [PY, "-c", CLIENT, "10.198.0.2", "9020", "U", "0"],
                                   env=dict(ENV, DSOCK_SOCKET="/run/dsock/d.sock"), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append(cli)
        out = line(cli).split() if cli else []
        check("11. in a user namespace, the socket bind-mounted: every byte echoed, the record complete",
              out == ["ok", "complete"], (out, cli and cli.poll() is not None and cli.stderr.read()[-400:]))
        rows = wait_path(":9020 ", "shm", n=2)
        check("11. ... both ends on shm", len(rows) == 2 and all("path=shm" in l for l in rows), rows)
        r = subprocess.run([DSOCK, "stat", "--raw"], env=ENV, capture_output=True, text=True)
        mine = [l for l in r.stdout.splitlines() if l.startswith("proc ") and " uid=100000 " in l]
        check("11. ... the daemon knows the client by its uid on the host (100000)", len(mine) == 1, r.stdout[-600:])
        # what the container may do: see its own processes only, not stop the daemon
        r = subprocess.run(cont[:-3] + ["stat", "--raw"], env=dict(ENV, DSOCK_SOCKET="/run/dsock/d.sock"),
                           capture_output=True, text=True)
        seen = [l for l in r.stdout.splitlines() if l.startswith("proc ")]
        check("11. ... its dsock stat shows its own processes only",
              r.returncode == 0 and seen and all(" uid=100000 " in l for l in seen), r.stdout[-600:] + r.stderr[-300:])
        r = subprocess.run(cont[:-3] + ["stop"], env=dict(ENV, DSOCK_SOCKET="/run/dsock/d.sock"),
                           capture_output=True, text=True)
        check("11. ... it cannot stop the daemon", r.returncode != 0 and subprocess.run(
              [DSOCK, "stat", "--raw"], env=ENV, capture_output=True).returncode == 0, r.stdout + r.stderr)
        end(cli, srv)
        # 7. the daemon stops and starts again
        srv = start("dsockP2", SERVER, "10.198.0.2", 9005, "R")
        cli = start("dsockP1", CLIENT, "10.198.0.2", 9005, "R", 0) if line(srv) == "ready" else None
        out = line(cli).split() if cli else []
        rows = wait_path(":9005 ", "shm", n=2)
        check("7. a pair on shm", out == ["ok", "complete"] and len(rows) == 2 and
              all("path=shm" in l for l in rows), (out, rows))
        stop_daemon()
        check("7. with the daemon gone: the pair's bytes echoed intact, its memory still mapped",
              cli and again(cli) == "ok" and maps_shm(cli) and maps_shm(srv))
        s2 = start("dsockP2", SERVER, "10.198.0.2", 9006, "N", nodaemon=True)
        c2 = start("dsockP1", CLIENT, "10.198.0.2", 9006, "N", 0, nodaemon=True) if line(s2) == "ready" else None
        out = line(c2).split() if c2 else []
        check("7. a connection made meanwhile: echoed on the kernel, no record, no shared memory",
              out == ["ok", "no-record"] and not maps_shm(c2) and not maps_shm(s2), out)
        end(c2, s2)
        # (its watch off: test 8 detaches its programs, and a connection
        # made then must meet them detached)
        check("7. the daemon back, its programs attached", start_daemon({"DSOCK_BPF_WATCH_MS": "0"}))
        check("7. the first pair still echoes", cli and again(cli) == "ok")
        s3, c3 = exchange("7. after the restart", "dsockP2", "dsockP1", "10.198.0.2", "10.198.0.2", 9007, "A")
        end(c3, s3)
        # 8. the programs detached by force, the daemon living on
        check("8. the daemon's three links detached by force", detach_programs() == 3)
        check("8. the first pair still echoes", cli and again(cli) == "ok")
        s4, c4 = exchange("8. programs detached", "dsockP2", "dsockP1", "10.198.0.2", "10.198.0.2", 9008, "X",
                          want="kernel", rec="no-record")
        end(c4, s4)
        # 8b. SIGHUP: the daemon looks at once, finds them detached and
        # attaches them again; 8c. its watch (every DSOCK_BPF_WATCH_MS)
        # does the same unasked
        os.kill(int(open(SOCK + ".lock").read().split()[0]), signal.SIGHUP)
        check("8b. on SIGHUP the daemon attaches its programs again", wait_log("attached again", 1))
        s4, c4 = exchange("8b. attached again", "dsockP2", "dsockP1", "10.198.0.2", "10.198.0.2", 9015, "H")
        end(c4, s4)
        check("8b. the first pair still echoes", cli and again(cli) == "ok")
        end(cli, srv)
        stop_daemon()
        check("8c. a daemon that watches its programs every 300 ms", start_daemon({"DSOCK_BPF_WATCH_MS": "300"}))
        check("8c. its three links detached by force", detach_programs() >= 3)
        check("8c. the daemon attaches them again unasked", wait_log("attached again", 1))
        s4, c4 = exchange("8c. attached again", "dsockP2", "dsockP1", "10.198.0.2", "10.198.0.2", 9016, "W")
        end(c4, s4)
        # 12. the operator's pairing rules (DSOCK_PAIR_RULES, the daemon's)
        stop_daemon()
        cgroot = next((l.split()[4] for l in open("/proc/self/mountinfo") if " - cgroup2 " in l), None)
        cg = cgroot and os.path.join(cgroot, "dsock-test-deny1")
        if cg and not os.path.isdir(cg):
            os.mkdir(cg)
        check("12. a daemon with a rule naming a namespace and one naming a cgroup", cg and start_daemon(
              {"DSOCK_PAIR_RULES": "deny netns /run/netns/dsockP1; deny cgroup /dsock-test-deny*"}))
        s5, c5 = exchange("12. the client's namespace denied", "dsockP2", "dsockP1", "10.198.0.2", "10.198.0.2",
                          9030, "Y", want="kernel", why="denied-by-rule", rec="complete")
        end(c5, s5)
        srv = start("dsockT1b", SERVER, "10.50.0.3", 9031, "Z", cgroup=cg)
        cli = start("dsockT1a", CLIENT, "10.50.0.3", 9031, "Z", 0) if line(srv) == "ready" else None
        out = line(cli).split() if cli else []
        rows = paths(srv.pid)
        check("12. the server's cgroup denied: every byte echoed, the server on the kernel, denied-by-rule",
              out == ["ok", "complete"] and rows and all("path=kernel" in l and "reason=denied-by-rule" in l
                                                         for l in rows), (out, rows))
        end(cli, srv)
        s6, c6 = exchange("12. namespaces no rule names", "dsockT1b", "dsockT1a", "10.50.0.3", "10.50.0.3", 9032, "W")
        end(c6, s6)
        # 12b. a client whose own rules keep the server's port on the
        # kernel: its socket is not even marked (no cost in the handshake)
        srv = start("dsockT1b", SERVER, "10.50.0.3", 9033, "L")
        cli = start("dsockT1a", CLIENT, "10.50.0.3", 9033, "L", 0, env={"DSOCK_RULES": "deny port 9033"}) \
            if line(srv) == "ready" else None
        out = line(cli).split() if cli else []
        rows = paths(cli.pid) if cli else []
        check("12b. the client's own rules deny the port: no mark, no record, on the kernel (denied-by-rule)",
              out == ["ok", "no-record"] and rows and all("path=kernel" in l and "reason=denied-by-rule" in l
                                                          for l in rows), (out, rows))
        end(cli, srv)
        # 12c. a connection to an address that is not private: not marked
        # by default (no option on a SYN that may leave the host), marked
        # with DSOCK_PROOF_MARK=all
        sh("ip -n dsockT1a addr add 198.51.100.2/24 dev dt1a; ip -n dsockT1b addr add 198.51.100.3/24 dev dt1b")
        s7, c7 = exchange("12c. to a public address", "dsockT1b", "dsockT1a", "0.0.0.0", "198.51.100.3", 9034, "U",
                          want="kernel", rec="no-record")
        end(c7, s7)
        s7, c7 = exchange("12c. to a public address, DSOCK_PROOF_MARK=all", "dsockT1b", "dsockT1a", "0.0.0.0",
                          "198.51.100.3", 9035, "V", env={"DSOCK_PROOF_MARK": "all"})
        end(c7, s7)
        log = open(SOCK + ".log").read() if os.path.exists(SOCK + ".log") else ""
        stop_daemon()
        check("12. a bad rule: the daemon says so and does not serve",
              not start_daemon({"DSOCK_PAIR_RULES": "deny netns /nonexistent/ns"}) and
              "pairing rules: DSOCK_PAIR_RULES:1: netns /nonexistent/ns" in open(SOCK + ".log").read())
        if cg:
            os.rmdir(cg)
        # 13. the host's daemon (root's default socket, here in a mount
        # namespace with a /run of its own) proves by default, and not
        # with DSOCK_BPF_PROOF=0
        stop_daemon()
        host = ('mount -t tmpfs none /run && "$0" run -- true; sleep 0.2; cat /run/dsock/dsockd.sock.log; '
                'pid=$(cut -d" " -f1 /run/dsock/dsockd.sock.lock); "$0" stop >/dev/null; '
                'for i in $(seq 100); do [ -d /proc/$pid ] || break; sleep 0.05; done')
        for val, want in ((None, True), ("0", False)):
            env = {k: v for k, v in ENV.items() if k not in ("DSOCK_SOCKET", "DSOCK_BPF_PROOF")}
            if val is not None:
                env["DSOCK_BPF_PROOF"] = val
            r = subprocess.run(["unshare", "--mount", "sh", "-c", host, DSOCK], env=env, capture_output=True,
                               text=True, timeout=60)
            check("13. the host's daemon, DSOCK_BPF_PROOF %s: %s" % (val or "unset", "proves" if want else "does not"),
                  ("kernel-recorded proof on" in r.stdout) == want and "serving on /run/dsock/dsockd.sock" in r.stdout,
                  r.stdout[-400:] + r.stderr[-200:])
    finally:
        teardown()
    return summary("proof")


if __name__ == "__main__":
    sys.exit(main())
