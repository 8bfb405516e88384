"""A hostile or unknown host against a daemon's host links (run inside a
host's namespace by run_hosts.sh).  Speaks the links' protocol itself
(TLS 1.3, then 4-byte headers: type, payload length, little-endian) with
a key of its own, and prints one "ok ..." or "FAIL ..." line per check:

  unlisted KEY CRT ADDR PORT
      a host whose key is not on the daemon's allow-list is refused: the
      link ends in the handshake or at the first read, before any message
  liar KEY CRT ADDR PORT SERVER_PORT
      a host whose key is allowed, and which lies:
      - a claim of the passive end (only a connecting end claims): refused
        at once;
      - a claim with nonces no socket recorded: refused (no mate) when its
        wait ends;
      - a true claim: its own connection to the dsock server at
        ADDR:SERVER_PORT, marked for the kernel's proof, with the nonces
        its own record holds: matched, and never confirmed (the
        server's end then stays on the kernel: run_hosts.sh reads the
        daemon's log);
      - the same claim again, replayed: refused (its offer is taken);
      - a second true claim: matched; a CONFIRM of an id never claimed
        changes nothing, its own CONFIRM proves the server's end, and the
        same CONFIRM replayed changes nothing;
      - a claim whose id the daemon's tables reserve (~0): refused at
        once, and CONFIRMs of ~0 and 0 change nothing;
      - a malformed message: the link is closed.
  channel KEY CRT ADDR PORT SERVER_PORT ADDR6
      a host whose key is allowed, against a server carried on channels
      (DSOCK_TRANSPORTS=socketpair) at ADDR:SERVER_PORT: its own true
      claim, confirmed, and its token sent over the link; then at the
      channel port (PORT + 1):
      - the claim's id with another token, from the link's address:
        closed at once;
      - the claim's id and token from another address (ADDR6, IPv6,
        while the link is IPv4: no link comes from it): closed at once;
      - the claim's id and token from the link's address: taken (the
        server's process writes its first frame into it), and the
        daemon says TAKEN over the link;
      and when that channel closes, the connection carries on on the
      kernel, byte-exact.
  hello KEY CRT ADDR PORT
      an allowed host's link comes up (HELLO back within 5 s)
"""
import os
import socket
import ssl
import struct
import sys
import time

SOL_DSOCK, DSOCK_OPTIN, DSOCK_IDENTITY = 0x6473, 1, 2
HELLO, CLAIM, ANSWER, CONFIRM, CHANNEL, TAKEN = 1, 2, 3, 4, 5, 6
VERSION = 3
SHM, SOCKETPAIR = 2, 3  # (enum dsock_path: the claimant's transport)
MATCHED, REFUSED = 1, 2
ACTIVE, PASSIVE = 1, 2


def report(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)


def link(key, crt, addr, port):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # (the liar does not care who answers)
    ctx.load_cert_chain(crt, key)
    raw = socket.create_connection((addr, port), timeout=10)
    # (each message goes at once: a CONFIRM held back by Nagle would
    # arrive after the connection it confirms has closed)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return ctx.wrap_socket(raw)


def open_link(key, crt, addr, port):
    """A link with HELLO sent, reads timing out after 5 s."""
    s = link(key, crt, addr, port)
    send(s, HELLO, struct.pack("<II", VERSION, 0))
    s.settimeout(5)
    return s


def send(s, mtype, payload):
    s.sendall(struct.pack("<HH", mtype, len(payload)) + payload)


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        k = s.recv(n - len(b))
        if not k:
            raise EOFError("closed")
        b += k
    return b


def recv_msg(s):
    mtype, n = struct.unpack("<HH", recv_exact(s, 4))
    return mtype, recv_exact(s, n)


def addr_bytes(ip, port):
    a = b"\0" * 10 + b"\xff\xff" + socket.inet_aton(ip)
    return a + struct.pack("<HH", port, socket.AF_INET)


def claim(s, cid, sent, recv, role, local, peer, transport=SHM):
    send(s, CLAIM, struct.pack("<QQQII", cid, sent, recv, role, transport) + addr_bytes(*local) + addr_bytes(*peer))


def answer(s, timeout):
    s.settimeout(timeout)
    mtype, p = recv_msg(s)
    if mtype != ANSWER:
        raise ValueError("message type %d" % mtype)
    return struct.unpack("<QII", p)


def marked(addr, port):
    """A connection marked for the kernel's proof, past the server's offer:
    the socket, its record's nonces and its local address."""
    c = socket.socket()
    c.setsockopt(SOL_DSOCK, DSOCK_OPTIN, 1)
    c.connect((addr, port))
    rec = c.getsockopt(SOL_DSOCK, DSOCK_IDENTITY, 32)
    sent, recv = struct.unpack_from("<QQ", rec)
    for i in range(6):  # (the server offers at its fourth data call)
        c.sendall(b"ping %d\n" % i)
        c.recv(100)
    return c, sent, recv, c.getsockname()


def unlisted(key, crt, addr, port):
    t0 = time.time()
    try:
        s = open_link(key, crt, addr, port)
        got = s.recv(64)
        report(not got, "an unlisted host's link ends before any message (read %r)" % got)
    except (ssl.SSLError, OSError, EOFError) as e:
        report(time.time() - t0 < 5, "an unlisted host is refused in the TLS handshake (%s)" % type(e).__name__)


def liar(key, crt, addr, port, server_port):
    s = open_link(key, crt, addr, port)
    mtype, p = recv_msg(s)
    report(mtype == HELLO and struct.unpack("<II", p)[0] == VERSION, "an allowed host's link is up (HELLO back)")
    me = s.getsockname()[0].replace("::ffff:", "")
    # a passive end's claim
    claim(s, 1, 11, 12, PASSIVE, (me, 40000), (addr, server_port))
    cid, res, reason = answer(s, 2)
    report(cid == 1 and res == REFUSED, "a claim of a passive end is refused at once (result %d)" % res)
    # nonces no socket recorded
    t0 = time.time()
    claim(s, 2, int.from_bytes(os.urandom(8), "little") | 1, int.from_bytes(os.urandom(8), "little") | 1, ACTIVE,
          (me, 40001), (addr, server_port))
    cid, res, reason = answer(s, 10)
    report(cid == 2 and res == REFUSED, "a claim with nonces no socket recorded is refused after %.1f s" %
           (time.time() - t0))
    # a true claim: our own marked connection to the dsock server
    c, sent, recv, local = marked(addr, server_port)
    claim(s, 3, sent, recv, ACTIVE, local, (addr, server_port))
    cid, res, reason = answer(s, 10)
    report(cid == 3 and res == MATCHED, "a true claim (its own connection's nonces) is matched (result %d)" % res)
    claim(s, 4, sent, recv, ACTIVE, local, (addr, server_port))
    cid, res, reason = answer(s, 10)
    report(cid == 4 and res == REFUSED, "the same claim replayed is refused (result %d)" % res)
    c.sendall(b"still\n")
    report(c.recv(100) == b"still\n", "the connection itself carries on (on the kernel)")
    c.close()
    c, sent, recv, local = marked(addr, server_port)
    claim(s, 5, sent, recv, ACTIVE, local, (addr, server_port))
    cid, res, reason = answer(s, 10)
    send(s, CONFIRM, struct.pack("<QII", 77, MATCHED, 0))
    send(s, CONFIRM, struct.pack("<QII", 5, MATCHED, 0))
    c.sendall(b"again\n")
    report(cid == 5 and res == MATCHED and c.recv(100) == b"again\n",
           "a second true claim is matched (result %d) and confirmed" % res)
    send(s, CONFIRM, struct.pack("<QII", 5, MATCHED, 0))  # replayed: nothing
    time.sleep(0.2)  # (the daemon reads the CONFIRMs before the close)
    c.close()
    # ids the daemon's tables reserve (empty and deleted slots): a claim
    # naming one is refused at once, and CONFIRMs naming them change
    # nothing (the daemon lives on: the next check needs it)
    c, sent, recv, local = marked(addr, server_port)
    claim(s, (1 << 64) - 1, sent, recv, ACTIVE, local, (addr, server_port))
    cid, res, reason = answer(s, 2)
    for _ in range(2):
        send(s, CONFIRM, struct.pack("<QII", (1 << 64) - 1, MATCHED, 0))
        send(s, CONFIRM, struct.pack("<QII", 0, MATCHED, 0))
    report(cid == (1 << 64) - 1 and res == REFUSED, "a claim with a reserved id (~0) is refused at once (result %d)" % res)
    c.close()
    # a malformed message closes the link
    send(s, 9, b"\0" * 8)
    s.settimeout(5)
    try:
        got = s.recv(64)
        report(not got, "a malformed message closes the link")
    except (ssl.SSLError, OSError) as e:
        report(True, "a malformed message closes the link (%s)" % type(e).__name__)


def closed_at_once(c, what):
    """Whether the daemon closed channel connection c within 1 s."""
    c.settimeout(1)
    try:
        got = c.recv(64)
        report(got == b"", "%s: closed at once" % what)
    except socket.timeout:
        report(False, "%s: still open after 1 s" % what)
    except OSError as e:
        report(True, "%s: closed at once (%s)" % (what, type(e).__name__))
    c.close()


def channel(key, crt, addr, port, server_port, addr6):
    s = open_link(key, crt, addr, port)
    recv_msg(s)  # its HELLO
    c, sent, recv, local = marked(addr, server_port)
    claim(s, 9, sent, recv, ACTIVE, local, (addr, server_port), SOCKETPAIR)
    cid, res, reason = answer(s, 10)
    send(s, CONFIRM, struct.pack("<QII", 9, MATCHED, 0))
    token = os.urandom(16)
    send(s, CHANNEL, struct.pack("<Q", 9) + token)
    report(cid == 9 and res == MATCHED, "a true claim to a server carried on channels is matched (result %d)" % res)
    time.sleep(0.2)  # (the daemon has the token before the first dial)
    first = b"dsockch1" + struct.pack("<Q", 9)
    w = socket.create_connection((addr, port + 1), timeout=5)
    w.sendall(first + bytes(16))
    closed_at_once(w, "a channel with the claim's id and another token")
    w = socket.create_connection((addr6, port + 1), timeout=5)
    w.sendall(first + token)
    closed_at_once(w, "a channel with the claim's id and token from an address not the link's")
    w = socket.create_connection((addr, port + 1), timeout=5)
    w.sendall(first + token)
    w.settimeout(5)
    try:
        got = w.recv(64)
    except OSError:
        got = b""
    # (a frame's header is 16 bytes: the server's process writes its
    # first frame, the protocol's HELLO, once it holds the channel)
    try:
        mtype, p = recv_msg(s)
    except (OSError, EOFError):
        mtype, p = 0, b"\0" * 8
    report(len(got) >= 16 and mtype == TAKEN and struct.unpack_from("<Q", p)[0] == 9,
           "the true channel from the link's address is taken: TAKEN over the link, %d bytes of the server's "
           "first frame on the channel" % len(got))
    w.close()
    c.sendall(b"kernel\n")
    c.settimeout(5)
    report(c.recv(100) == b"kernel\n", "after that channel closed, the connection carries on on the kernel")
    c.close()


def hello(key, crt, addr, port):
    t0 = time.time()
    try:
        s = open_link(key, crt, addr, port)
        mtype, p = recv_msg(s)
        report(mtype == HELLO, "an allowed host's link is up within %.2f s" % (time.time() - t0))
    except (ssl.SSLError, OSError, EOFError) as e:
        report(False, "an allowed host's link failed: %s" % e)


if __name__ == "__main__":
    if sys.argv[1] == "hello":
        hello(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif sys.argv[1] == "channel":
        channel(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7])
    elif sys.argv[1] == "unlisted":
        unlisted(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        liar(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
