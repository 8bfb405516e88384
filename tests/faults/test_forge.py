#!/usr/bin/env python3
"""Forged claims against the kernel-recorded proof (root only; a daemon of
its own with DSOCK_BPF_PROOF=1, two network namespaces on a veth pair, as
test_proof.py):

  1. a replayed nonce: a victim client in dsockF1 connects to a server in
     dsockF2 and offers its connection, which waits for its mate (the
     server leaves the victim's connection unread for now).  An attacker
     in the victim's namespace, who learnt the victim's nonce (here from
     the victim's own record, which any holder of the socket may read),
     opens a connection to the same listener by hand over a raw socket:
     its SYN and its third ACK carry the victim's nonce, its data makes
     the server offer the child.  The child's record holds the victim's
     nonce as received (the replay reached the record), and the daemon
     pairs it with nothing: the forged child on the kernel, the victim
     paired with its own server once that one reads, every byte its own.
  2. TCP_REPAIR: a socket under dsock put into the established state by
     TCP_REPAIR with sequence numbers of its choosing (no handshake, the
     programs see no SYN) has no complete record, offers, and pairs with
     nothing: on the kernel.
  3. a socket of another user's: a process of uid 65534 that holds a
     connection root made (inherited across exec, as SCM_RIGHTS would
     give it) and offers it to the daemon itself, by the protocol, is
     answered "kernel" with the reason socket-of-another-user; the same
     process offering a connection it made is held for its mate.

Each check prints ok/FAIL; last line 'forge: N passed, N failed'.
Skips (exit 0) when not root, or when the daemon cannot load its programs."""
import os, shutil, sys, time

sys.dont_write_bytecode = True  # (no __pycache__ in the tree)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proofkit import *  # noqa: E402,F403  (the daemon, the processes, the checks)

NSF = ["dsockF1", "dsockF2"]
PORT = 9050

# Serves every connection with tagged echoes (as SERVER_MANY) and prints,
# per accepted connection, its peer's port and its record's sent and recv
# (hex); the first connection is served only after a line on stdin.
SERVER_REC = r'''
import socket, sys, threading
addr, port, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((addr, port)); l.listen(16); print("ready", flush=True)
def serve(a, first):
    if first: sys.stdin.readline()
    while True:
        n = a.recv(1)
        if not n: return
        got = b""
        while len(got) < n[0]:
            b = a.recv(n[0] - len(got))
            if not b: return
            got += b
        a.sendall(tag + got)
first = True
while True:
    a, peer = l.accept()
    try:
        r = a.getsockopt(0x6473, 2, 64)
    except OSError:
        r = b""
    print("conn", peer[1], r[:8].hex() or "-", r[8:16].hex() or "-", flush=True)
    threading.Thread(target=serve, args=(a, first), daemon=True).start()
    first = False
'''

# The victim: prints its record's sent nonce (hex), makes its four data
# calls at once (four messages sent, so that it offers), then reads the
# four answers and prints "ok" when each is its own server's; again at
# each line on stdin.
VICTIM = r'''
import socket, sys
addr, port, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
c = socket.create_connection((addr, port))
print(c.getsockopt(0x6473, 2, 64)[:8].hex(), flush=True)
msgs = [bytes([65 + i]) * (3 + i) for i in range(4)]
while True:
    for m in msgs: c.sendall(bytes([len(m)]) + m)
    for m in msgs:
        want, got = len(tag) + len(m), b""
        while len(got) < want:
            b = c.recv(want - len(got))
            if not b: print("eof", flush=True); sys.exit(1)
            got += b
        if got != tag + m: print("bad", got, flush=True); sys.exit(1)
    print("ok", flush=True)
    if not sys.stdin.readline(): break
'''

# The attacker (not under dsock): a TCP handshake by hand over a raw
# socket from src:sport to dst:dport, its SYN and its third ACK carrying
# the nonce NONCE (hex) in dsock's option, then three tagged-echo
# messages, each answer acknowledged.  Prints "synack N" (whether the
# SYN-ACK carried the option: the listener answered the replayed nonce)
# and "answers N" (bytes the server sent back).  The kernel's RSTs for
# this port are dropped by the test's nft rule.
ATTACKER = r'''
import os, random, select, socket, struct, sys, time
src, dst, sport, dport, nonce = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), bytes.fromhex(sys.argv[5])
OPT = bytes([254, 12, 0xd5, 0x0c]) + nonce
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
def seg(seq, ack, flags, opts=b"", data=b""):
    h = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, (20 + len(opts)) // 4 << 4, flags, 65535, 0, 0) + opts
    ph = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(h) + len(data))
    c = csum(ph + h + data)
    return h[:16] + struct.pack("!H", c) + h[18:] + data
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
def recv_seg(secs=3):
    end = time.time() + secs
    while time.time() < end:
        if not select.select([raw], [], [], 0.2)[0]: continue
        p = raw.recv(65536)
        ihl = (p[0] & 15) * 4
        t = p[ihl:]
        sp, dp, seq, ack, off, flags = struct.unpack("!HHIIBB", t[:14])
        if sp == dport and dp == sport and socket.inet_ntoa(p[12:16]) == dst:
            return seq, ack, flags, t[20:(off >> 4) * 4], t[(off >> 4) * 4:]
    return None
isn = random.getrandbits(32)
raw.sendto(seg(isn, 0, 0x02, OPT), (dst, 0))
got = recv_seg()
if not got or got[2] & 0x12 != 0x12: print("no synack", flush=True); sys.exit(1)
sseq, _, _, opts, _ = got
print("synack", int(bytes([254, 12, 0xd5, 0x0c]) in opts), flush=True)
seq, ack = isn + 1, sseq + 1
raw.sendto(seg(seq, ack, 0x10, OPT), (dst, 0))
answers = 0
for m in (b"\x05hello", b"\x05world", b"\x06again!"):
    raw.sendto(seg(seq, ack, 0x18, b"", m), (dst, 0))
    seq += len(m)
    end = time.time() + 3
    while time.time() < end:
        got = recv_seg(1)
        if not got: continue
        if got[4]:
            ack = got[0] + len(got[4])
            answers += len(got[4])
            raw.sendto(seg(seq, ack, 0x10), (dst, 0))
            break
print("answers", answers, flush=True)
sys.stdin.readline()
'''

# A socket put into the established state by TCP_REPAIR (no handshake),
# under dsock: it makes four data calls while in repair mode (queued, not
# sent), prints its record ("none", "mark" or "complete") and waits.
REPAIR = r'''
import socket, sys
addr, port, sport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
TCP_REPAIR, TCP_REPAIR_QUEUE, TCP_QUEUE_SEQ = 19, 20, 21
s = socket.socket()
s.setsockopt(socket.SOL_TCP, TCP_REPAIR, 1)
s.setsockopt(socket.SOL_TCP, TCP_REPAIR_QUEUE, 2)
s.setsockopt(socket.SOL_TCP, TCP_QUEUE_SEQ, 1000000)
s.setsockopt(socket.SOL_TCP, TCP_REPAIR_QUEUE, 1)
s.setsockopt(socket.SOL_TCP, TCP_QUEUE_SEQ, 2000000)
s.bind(("0.0.0.0", sport))
s.connect((addr, port))
s.setsockopt(socket.SOL_TCP, TCP_REPAIR_QUEUE, 2)
for i in range(4):
    s.send(b"\x03abc")
try:
    r = s.getsockopt(0x6473, 2, 64)
    rec = "complete" if int.from_bytes(r[24:28], "little") & 12 == 12 else "mark"
except OSError:
    rec = "none"
print("repaired", rec, flush=True)
sys.stdin.readline()
'''


# Takes a connection root made (fd argv[3], inherited) and offers it to
# the daemon by the protocol, then one it makes itself; prints the result
# and the reason of each ("given R N", "own R N").
TAKER = r'''
import os, socket, struct, sys
path, ver, fd, addr, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
def hdr(t, p): return struct.pack("<IHHII", 0x4b435344, ver, t, 16 + len(p), 1) + p
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(path)
s.send(hdr(1, struct.pack("<Ii32s16sQII", 0, 0, b"taker", b"0", 0, 0, 0)))
s.settimeout(8)
def offer(sid, sock):  # connect end, shm (2), netns proof (1)
    socket.send_fds(s, [hdr(9, struct.pack("<QIHH", sid, 1, 2, 1))], [sock.fileno()])
    while True:
        msg, fds, _, _ = socket.recv_fds(s, 4096, 4)
        for f in fds: os.close(f)
        if len(msg) >= 40 and struct.unpack_from("<Q", msg, 16)[0] == sid:
            return struct.unpack_from("<I", msg, 28)[0], struct.unpack_from("<I", msg, 36)[0]
print("given", *offer(1, socket.socket(fileno=fd)), flush=True)
print("own", *offer(2, socket.create_connection((addr, port))), flush=True)
'''

# Root's connection to the server, handed to TAKER as uid 65534 by exec.
GIVER = r'''
import os, socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
os.set_inheritable(c.fileno(), True)
os.execvp("setpriv", ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                      sys.argv[3], sys.argv[4], sys.argv[5], str(c.fileno()), sys.argv[1], sys.argv[2]])
'''


def proto_enum(name, first):
    """The value of DSOCK_R_<name> (common/reason.h) or DSOCK_RES_<name>
    (common/proto.h), as the sources number them."""
    import re
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../src/common")
    if first == "R":
        body = open(os.path.join(src, "reason.h")).read()
        names = re.findall(r"^\s*DSOCK_R_(\w+)", body, re.M)
        return names.index(name)
    return int(re.search(r"DSOCK_RES_%s = (\d+)" % name, open(os.path.join(src, "proto.h")).read()).group(1))


def settled(who, secs=10):
    """The rows of `who` once the daemon has judged them (no end still
    pairing-pending), or what they are after secs."""
    end_by = time.time() + secs
    while True:
        rows = paths(who)
        if rows and not any("reason=pairing-pending" in l for l in rows) or time.time() > end_by:
            return rows
        time.sleep(0.2)


def main():
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nft"):
        print("skip: forged claims need root, ip and nft")
        print("forge: 0 passed, 0 failed")
        return 0
    cleanup(NSF)
    stop_daemon()
    if not start_daemon():
        print("skip: the daemon did not attach its BPF programs")
        print("forge: 0 passed, 0 failed")
        stop_daemon()
        return 0
    try:
        r = netns_pair("dsockF1", "dsockF2", "10.199.0.1", "10.199.0.2", "dsf")
        check("namespaces made", r.returncode == 0, r.stderr)
        # 1. a replayed nonce
        srv = start("dsockF2", SERVER_REC, "10.199.0.2", PORT, "S")
        vic = start("dsockF1", VICTIM, "10.199.0.2", PORT, "S") if line(srv) == "ready" else None
        nonce = line(vic) if vic else ""
        conn_v = line(srv).split()
        check("1. the victim connected, its nonce read", len(nonce) == 16 and conn_v[:1] == ["conn"],
              (nonce, conn_v))
        time.sleep(0.3)  # (its offer made: it waits for its mate)
        sport = 33333
        sh("ip netns exec dsockF1 nft -f - <<'EOF'\ntable ip forge {\n chain out {\n"
           "  type filter hook output priority 0;\n  tcp sport %d tcp flags rst drop\n }\n}\nEOF" % sport)
        atk = start("dsockF1", ATTACKER, "10.199.0.1", "10.199.0.2", sport, PORT, nonce or "00" * 8, plain=True)
        out_a = [line(atk), line(atk)]
        conn_a = line(srv).split()
        check("1. the listener answered the replayed nonce in its SYN-ACK", out_a[0] == "synack 1", out_a)
        check("1. the forged connection was served (its data echoed)",
              out_a[1].startswith("answers ") and int(out_a[1].split()[1]) > 0, out_a)
        check("1. the forged child's record holds the victim's nonce as received",
              len(conn_a) == 4 and conn_a[1] == str(sport) and conn_a[3] == nonce, (conn_a, nonce))
        srv.stdin.write("go\n")
        srv.stdin.flush()
        check("1. the victim hears its own server", line(vic) == "ok")
        check("1. ... and again (each end has taken the pairing in)", again(vic) == "ok")
        rows = wait_path(vic.pid, "shm") if vic else []
        check("1. the victim is on shm, paired with its own server",
              rows and all("path=shm" in l for l in rows), rows)
        rows = settled(":%d " % sport)
        check("1. the forged child is on the kernel, judged unpaired",
              rows and all("path=kernel" in l for l in rows), rows)
        rows = [l for l in paths(srv.pid) if ":%d " % sport not in l]
        check("1. the server's other end (the victim's) is on shm", rows and all("path=shm" in l for l in rows),
              rows)
        sh("ip netns exec dsockF1 nft delete table ip forge")
        end(atk, vic, srv)
        # 2. TCP_REPAIR
        srv = start("dsockF2", SERVER_REC, "10.199.0.2", PORT + 1, "R")
        rep = start("dsockF1", REPAIR, "10.199.0.2", PORT + 1, 34444) if line(srv) == "ready" else None
        out = line(rep) if rep else ""
        check("2. a socket established by TCP_REPAIR has no complete record", out in ("repaired none",
                                                                                   "repaired mark"), out)
        rows = settled(rep.pid) if rep else []
        check("2. ... and pairs with nothing: on the kernel, judged unpaired",
              rows and all("path=kernel" in l for l in rows), rows)
        end(rep, srv)
        # 3. a socket of another user's, offered by the protocol
        import re
        os.chmod(tmp, 0o755)
        ver = re.search(r"#define DSOCK_PROTO_VERSION (\d+)", open(os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "../../src/common/proto.h")).read()).group(1)
        srv = start("dsockF2", SERVER_REC, "10.199.0.2", PORT + 2, "O")
        tk = start("dsockF1", GIVER, "10.199.0.2", PORT + 2, TAKER, SOCK, ver, plain=True) \
            if line(srv) == "ready" else None
        given, own = (line(tk).split(), line(tk).split()) if tk else ([], [])
        kernel, held, why = proto_enum("KERNEL", "RES"), proto_enum("HELD", "RES"), proto_enum("NOT_OWNER", "R")
        check("3. a connection root made, offered by a process of uid 65534: kernel, socket-of-another-user",
              given == ["given", str(kernel), str(why)], (given, kernel, why))
        check("3. ... while one it made itself is held for its mate", own[:2] == ["own", str(held)], own)
        end(tk, srv)
    finally:
        teardown(NSF)  # (the nft table goes with dsockF1)
    return summary("forge")


if __name__ == "__main__":
    sys.exit(main())
