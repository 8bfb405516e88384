#!/usr/bin/env python3
"""A connection on the rings handed to a program without dsock
(tests/faults/handover.c), with unread data in both rings at that moment:
the peer has written X bytes the hander never read, the hander Y bytes the
peer has not read.  The new holder must read exactly X (the bytes that sat
in the ring included) and more, the peer exactly everything.

  1. exec into a static program (LD_PRELOAD never applies);
  2. exec into a dynamic program that dsock's rules disable;
  3. SCM_RIGHTS to a static program started before (the sender closes);
  4. exec into a program under dsock: the rings are handed over instead;
  6. (root) exec into a set-user-ID program of another user: the loader's
     secure mode ignores dsock's preload.
In 1-4 and 6 the peer is blocked in recv on the connection (it can answer
a hand-over request).  In the following it cannot (but 9a) (HANDOVER_PEER,
see handover.c), each an exec into the static program:
  5. the peer sleeps in nanosleep for 3 s (HANDOVER_STALL=1 is the same);
  7. the peer computes for 3 s without a system call;
  8. the peer is stopped: the test sends it SIGSTOP before the hand-over
     and SIGCONT 10 s later (HANDOVER_STOP_S; natively 3 s); the new
     holder must have read X while the peer was still stopped;
  9a. the peer is blocked in epoll_wait on the connection (EPOLLIN, edge
     triggered: Y is unread) and can answer;
  9b. the peer is blocked in epoll_wait on an unrelated pipe for 3 s.
The hander and the peer in one process, which waits for the new holder
(`handover child FD`, static) while the hand-over runs:
  10a. Python, subprocess.run(pass_fds=[fd]) (tests/faults/handover_same.py);
  10b. Python, os.posix_spawn with the fd inheritable;
  10c. C, vfork then exec;  10d. C, posix_spawn.

Every case runs natively and must print the same outcome lines as under
dsock (time stamp lines "t ..." aside); under dsock a process must have
moved bytes through a ring (DSOCK_FASTPATH_REPORT; in 10a-d both ends, in
4 the exec'd program too), so the hand-over really moved a live fast-path
connection.

Under dsock each case runs in two modes, each with its own private daemon
started before the runs (`dsock run` starts none when one answers):
  privileged    dsockd as root with every capability (CAP_SYS_PTRACE: it
                can fetch the peer's kernel socket with pidfd_getfd and the
                hander moves the peer's direction itself): every case
                byte-exact, no reset, and the new holder has X well under
                2 s after the hand-over began (QUICK), whatever the peer
                does;
  unprivileged  dsockd under setpriv without CAP_SYS_PTRACE (checked: its
                capabilities, and a process started the same way gets EPERM
                from pidfd_getfd on a root process): the cooperative
                protocol; where the peer answers (1-4, 6, 9a) byte-exact;
                where it cannot (5, 7, 8, 9b, 10a-d) a clean reset about
                2 s after the hand-over: the new holder reads a correct
                prefix of X and then EOF or ECONNRESET, no byte is ever
                wrong, and the library's warning on stderr (or `dsock stat
                --raw`, reason=handover-reset) says so.
Runs: each case HANDOVER_REPS times per mode (default 3), 8 and 6 once;
HANDOVER_ONLY=8,10a runs those cases alone; HANDOVER_VERBOSE=1 prints
every run (outcome, hand-over to X read, rings, stderr).  Last line
'handover: N passed, N failed, S s'."""
import os, re, shutil, signal, socket, subprocess, sys, tempfile, threading, time

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
HERE = os.path.dirname(os.path.abspath(__file__))
REPS = int(os.environ.get("HANDOVER_REPS", "3"))
STOP_S = float(os.environ.get("HANDOVER_STOP_S", "10"))
VERBOSE = os.environ.get("HANDOVER_VERBOSE") == "1"  # every run's outcome, timing, rings
QUICK = 1.0  # seconds from "t handover" to the new holder's "t got-x" when nothing waits
DSOCK = os.path.join(BUILD, "bin", "dsock")
DSOCKD = os.path.join(BUILD, "bin", "dsockd")
PROG = os.path.join(BUILD, "tests", "handover")
STATIC = os.path.join(BUILD, "tests", "handover-static")
SAME_PY = os.path.join(HERE, "handover_same.py")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
SETPRIV = shutil.which("setpriv")
UNPRIV = [SETPRIV or "setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace", "--"]
CAP_SYS_PTRACE = 19
tmp = tempfile.mkdtemp(prefix="dsock-handover-")
results = []
modes = {}  # name -> socket path of its daemon
daemon_pid = {}  # socket path -> the pid of the daemon the test started on it


def check(name, cond, detail=""):
    results.append(bool(cond))
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else "  " + str(detail)[-2500:]), flush=True)


# ---------------------------------------------------------------- daemons

def caps_of(pid):
    caps = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Cap"):
                k, v = line.split(":")
                caps[k] = int(v, 16)
    return caps


def has_ptrace(caps, *keys):
    return all(caps.get(k, 0) >> CAP_SYS_PTRACE & 1 for k in keys)


def answers(sock):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(sock)
        return True
    except OSError:
        return False
    finally:
        s.close()


def start_daemon(sock, unpriv):
    """dsockd on sock, as src/cli/daemon.c starts it (it returns once its
    socket listens); its pid from the lock file beside the socket."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run((UNPRIV if unpriv else []) + [DSOCKD, "--socket", sock], env=env,
                       capture_output=True, text=True, timeout=20)
    end = time.monotonic() + 5
    while not answers(sock) and time.monotonic() < end:
        time.sleep(0.01)
    try:
        pid = int(open(sock + ".lock").read().split()[0])
        return pid, caps_of(pid), r
    except (OSError, ValueError, IndexError):
        return None, {}, r


GETFD = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pfd = libc.syscall(434, int(sys.argv[1]), 0)           # pidfd_open
if pfd < 0:
    print("pidfd_open", os.strerror(ctypes.get_errno())); sys.exit(0)
fd = libc.syscall(438, pfd, 0, 0)                        # pidfd_getfd(pidfd, 0, 0)
print("ok" if fd >= 0 else "pidfd_getfd " + os.strerror(ctypes.get_errno()))
"""


def getfd_experiment(target, unpriv):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run((UNPRIV if unpriv else []) + [PY, "-c", GETFD, str(target)], env=env,
                       capture_output=True, text=True, timeout=20)
    return (r.stdout + r.stderr).strip()


def setup_modes():
    target = subprocess.Popen(["sleep", "120"], stdin=subprocess.DEVNULL)
    try:
        tcaps = caps_of(target.pid)
        sock = os.path.join(tmp, "priv.sock")
        pid, caps, r = start_daemon(sock, False)
        plain = getfd_experiment(target.pid, False)
        ok = pid and answers(sock)
        daemon_pid[sock] = pid
        check("setup: the privileged daemon answers and has CAP_SYS_PTRACE; pidfd_getfd from a process "
              "with its capabilities on a root process works",
              ok and has_ptrace(caps, "CapEff", "CapPrm") and plain == "ok",
              (pid, {k: hex(v) for k, v in caps.items()}, plain, r.stderr))
        if ok:
            modes["privileged"] = sock
        if os.geteuid() != 0 or not SETPRIV:
            print("skip unprivileged mode (needs root and setpriv)", flush=True)
            return
        sock = os.path.join(tmp, "unpriv.sock")
        pid, caps, r = start_daemon(sock, True)
        denied = getfd_experiment(target.pid, True)
        daemon_pid[sock] = pid
        ok = (pid and answers(sock) and not has_ptrace(caps, "CapEff") and not has_ptrace(caps, "CapPrm")
              and not has_ptrace(caps, "CapBnd") and has_ptrace(tcaps, "CapEff")
              and denied == "pidfd_getfd " + os.strerror(1))
        check(f"setup: the unprivileged daemon (pid {pid}, {' '.join(UNPRIV[:-1])}) answers, lacks "
              "CAP_SYS_PTRACE, and a process started so gets EPERM from pidfd_getfd on a root process "
              "with full capabilities", ok,
              (pid, {k: hex(v) for k, v in caps.items()}, hex(tcaps.get("CapEff", 0)), denied, r.stderr))
        if ok:
            modes["unprivileged"] = sock
    finally:
        target.kill()
        target.wait()


# ---------------------------------------------------------------- one run

class Run:
    pass


def stamps_of(lines):
    st = {}
    for _, l in lines:
        p = l.split()
        if len(p) >= 3 and p[0] == "t":
            try:
                st.setdefault(" ".join(p[1:-1]), float(p[-1]))
            except ValueError:
                pass
    return st


def run(case, sock, dsock=True, poll_stat=False):
    """One run of case; natively when not dsock.  Stdout is read line by
    line as it comes (case 8 stops the peer when it says its pid)."""
    report = os.path.join(tmp, "report")
    env = dict(os.environ, DSOCK_FASTPATH="1", DSOCK_FASTPATH_REPORT=report, **(case.get("env") or {}))
    env.pop("LD_PRELOAD", None)
    if sock:
        env["DSOCK_SOCKET"] = sock
    try:
        os.unlink(report)
    except OSError:
        pass
    cmd = ([DSOCK, "run", "--"] if dsock else []) + case["cmd"]
    R = Run()
    R.lines, R.t_stop, R.t_cont, R.stat_reset, R.timed_out = [], None, None, False, False
    timers = []
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)

    def cont(pid):
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
        R.t_cont = time.monotonic()

    def out():
        for line in p.stdout:
            line = line.rstrip("\n")
            R.lines.append((time.monotonic(), line))
            w = line.split()
            if case.get("stop") and len(w) == 3 and w[:2] == ["t", "peer"] and R.t_stop is None:
                pid = int(w[2])
                os.kill(pid, signal.SIGSTOP)
                R.t_stop = time.monotonic()
                t = threading.Timer(STOP_S if dsock else min(STOP_S, 3.0), cont, (pid,))
                t.start()
                timers.append(t)

    err = []
    threads = [threading.Thread(target=out), threading.Thread(target=lambda: err.append(p.stderr.read()))]

    def stat_poll():
        senv = dict(os.environ, DSOCK_SOCKET=sock)
        senv.pop("LD_PRELOAD", None)
        while p.poll() is None:
            try:
                s = subprocess.run([DSOCK, "stat", "--raw"], env=senv, capture_output=True, text=True,
                                   timeout=20)
                if "reason=handover-reset" in s.stdout:
                    R.stat_reset = True
            except (OSError, subprocess.SubprocessError):
                pass  # (a build replacing dsock meanwhile)
            time.sleep(0.2)
    if poll_stat and sock:
        threads.append(threading.Thread(target=stat_poll))
    for t in threads:
        t.start()
    try:
        p.wait(timeout=60 + STOP_S)
        threads[0].join(timeout=30)  # the peer (a child) may outlive the main process
    except subprocess.TimeoutExpired:
        pass
    if p.poll() is None or threads[0].is_alive():
        R.timed_out = True
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except OSError:
                pass
        p.wait()
    for t in threads:
        t.join(timeout=30)
    for t in timers:
        t.join(timeout=STOP_S + 5)
    R.rc = p.returncode
    R.stderr = "".join(err)
    R.stdout = "\n".join(l for _, l in R.lines)
    R.outcome = sorted(l for _, l in R.lines if l.strip() and not l.startswith("t "))
    R.stamps = stamps_of(R.lines)
    try:
        R.rings = [tuple(int(x) for x in l.split()) for l in open(report)]
    except (OSError, ValueError):
        R.rings = []
    R.daemon_ok = True
    if sock:
        try:  # `dsock run` would have started a (privileged) daemon in its place
            R.daemon_ok = int(open(sock + ".lock").read().split()[0]) == daemon_pid.get(sock) and \
                os.path.exists(f"/proc/{daemon_pid.get(sock)}")
        except (OSError, ValueError, IndexError):
            R.daemon_ok = False
    R.took = None
    if "handover" in R.stamps and "got-x" in R.stamps:
        R.took = R.stamps["got-x"] - R.stamps["handover"]
    return R


def describe(R):
    took = "-" if R.took is None else f"{R.took:.3f}s"
    extra = ""
    if R.t_stop is not None:
        gx = R.stamps.get("got-x")
        extra = (f", SIGSTOP at +0, X read at {'-' if gx is None else f'+{gx - R.t_stop:.3f}s'}, "
                 f"SIGCONT at {'-' if R.t_cont is None else f'+{R.t_cont - R.t_stop:.3f}s'}")
    return (f"[outcome {R.outcome}; hand-over to X read {took}{extra}; peer state "
            f"{[k.split()[1] for k in R.stamps if k.startswith('peer-state')]}; rings (pid conns back) "
            f"{R.rings}; stat handover-reset {R.stat_reset}; timed out {R.timed_out}; stderr "
            f"{R.stderr.strip()[-700:]!r}]")


WRONG = re.compile(r" byte \d+ is \d+, not \d+")
RESET_WARN = re.compile(r"handover-reset|reset: .*(program without dsock|hands it to)")


def common_faults(case, R):
    """What no run may show, in any mode."""
    bad = []
    if R.timed_out:
        bad.append("timed out")
    if not getattr(R, "daemon_ok", True):
        bad.append("the daemon the test started for this mode is gone or was replaced")
    if "speaks protocol version" in R.stderr:
        bad.append("the test's daemon is of another build (the library was rebuilt during the run?)")
    if WRONG.search(R.stdout):
        bad.append("a WRONG BYTE")
    want_state = case.get("state")
    if want_state:
        got = [k.split()[1] for k in R.stamps if k.startswith("peer-state")]
        if got != [want_state]:
            bad.append(f"the peer was not in state {want_state} at the hand-over: {got}")
    return bad


def faults_exact(case, R, native=False):
    bad = common_faults(case, R)
    if R.outcome != case["want"]:
        bad.append(f"outcome is not {case['want']}")
    if not native:
        if "reset" in R.stderr:
            bad.append("a reset on stderr")
        if not case["rings"](R.rings):
            bad.append("the connection was not on the rings before the hand-over")
    if R.took is None or R.took >= QUICK:
        bad.append(f"the new holder did not have X within {QUICK}s of the hand-over")
    if case.get("stop") and not (R.stamps.get("got-x") and R.t_cont and R.stamps["got-x"] < R.t_cont):
        bad.append("the new holder did not have X while the peer was stopped")
    return bad


def faults_reset(case, R):
    """The cooperative protocol with a peer that cannot answer: a clean
    reset after about 2 s, the new holder reads a correct prefix of X."""
    bad = common_faults(case, R)
    holder = case["holder"]
    hl = [l for l in R.outcome if l.startswith(holder + " ")]
    if len(hl) != 1 or not re.fullmatch(
            holder + r" FAIL: stream 0 ends at \d+ of 100000 \((EOF|Connection reset by peer)\)", hl[0]):
        bad.append(f"the new holder did not end with a correct prefix of X then EOF/ECONNRESET: {hl}")
    if not (RESET_WARN.search(R.stderr) or R.stat_reset):
        bad.append("neither the library's warning on stderr nor `dsock stat --raw` shows a hand-over reset")
    if R.took is None or not 1.5 <= R.took <= 6:
        bad.append("the reset did not come about 2 s after the hand-over")
    if not case["rings"](R.rings):
        bad.append("the connection was not on the rings before the hand-over")
    return bad


# ---------------------------------------------------------------- cases

def one_ring(rings):
    return bool(rings) and max(n for _, n, _ in rings) >= 1


def two_holders(rings):  # 4: the client and the exec'd program under dsock
    return len(rings) >= 2 and max(n for _, n, _ in rings) >= 1


def both_ends(rings):  # 10: one process, both ends used a ring
    return bool(rings) and max(n for _, n, _ in rings) >= 2


EXACT_CLIENT = ["client ok", "helper ok"]
EXACT_SAME = ["child ok", "parent ok"]


def case_of(key, name, cmd, want=EXACT_CLIENT, env=None, rings=one_ring, unpriv="exact", holder="helper",
            state=None, stop=False, reps=None):
    return dict(key=key, name=name, cmd=cmd, want=want, env=env, rings=rings, unpriv=unpriv,
                holder=holder, state=state, stop=stop, reps=reps)


def c_case(key, name, args, **kw):
    return case_of(key, name, [PROG] + args, **kw)


def peer_case(key, name, peer, state, unpriv="reset", **kw):
    return c_case(key, name, ["exec", STATIC], env={"HANDOVER_PEER": peer}, state=state, unpriv=unpriv, **kw)


CASES = [
    c_case("1", "1. exec into a static program", ["exec", STATIC]),
    c_case("2", "2. exec into a program the rules disable", ["exec", PROG, "handover-plain"],
           env={"DSOCK_RULES": "deny program handover-plain"}),
    c_case("3", "3. SCM_RIGHTS to a static program", ["pass", STATIC],
           want=["client ok", "helper ok", "server ok"]),
    c_case("4", "4. exec into a program under dsock (rings handed over)", ["exec", PROG], rings=two_holders),
    peer_case("5", "5. the peer asleep in nanosleep 3 s", "sleep", "S"),
]
if os.geteuid() == 0 and shutil.which("useradd"):
    user = "dsockiso"
    subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", user], capture_output=True)
    suid = os.path.join(tmp, "handover-suid")
    shutil.copy(PROG, suid)
    shutil.chown(suid, user)
    os.chmod(suid, 0o4755)
    CASES.append(c_case("6", "6. exec into a set-user-ID program", ["exec", suid], reps=1))
else:
    print("skip 6. a set-user-ID program (needs root and useradd)")
CASES += [
    peer_case("7", "7. the peer computing 3 s (no system call)", "busy", "R"),
    peer_case("8", f"8. the peer stopped (SIGSTOP, SIGCONT {STOP_S:g} s later)", "stop", "T", stop=True,
              reps=1),
    peer_case("9a", "9a. the peer in epoll_wait on the connection (EPOLLIN|EPOLLET)", "epoll-in", "S",
              unpriv="exact"),
    peer_case("9b", "9b. the peer in epoll_wait on an unrelated pipe for 3 s", "epoll-other", "S"),
    case_of("10a", "10a. one Python process, subprocess.run(pass_fds) of a static program",
            [PY, SAME_PY, "run", STATIC], want=EXACT_SAME, rings=both_ends, unpriv="reset", holder="child"),
    case_of("10b", "10b. one Python process, os.posix_spawn of a static program",
            [PY, SAME_PY, "spawn", STATIC], want=EXACT_SAME, rings=both_ends, unpriv="reset", holder="child"),
    c_case("10c", "10c. one C process, vfork then exec of a static program", ["same", "vfork", STATIC],
           want=EXACT_SAME, rings=both_ends, unpriv="reset", holder="child"),
    c_case("10d", "10d. one C process, posix_spawn of a static program", ["same", "spawn", STATIC],
           want=EXACT_SAME, rings=both_ends, unpriv="reset", holder="child"),
]
only = os.environ.get("HANDOVER_ONLY")  # e.g. "8,10a": these cases alone
if only:
    CASES = [c for c in CASES if c["key"] in only.split(",")]

t0 = time.monotonic()
summary = []
try:
    setup_modes()
    for case in CASES:
        n = run(case, None, dsock=False)
        bad = faults_exact(case, n, native=True)
        if VERBOSE:
            print(f"     {case['key']} natively: {bad or 'as expected'} {describe(n)}", flush=True)
        check(case["name"] + ": natively", not bad, (bad, describe(n)))
        for mode, sock in modes.items():
            expect = "exact" if mode == "privileged" else case["unpriv"]
            reps = case["reps"] or REPS
            fails = []
            for i in range(reps):
                R = run(case, sock, poll_stat=expect == "reset")
                bad = faults_exact(case, R) if expect == "exact" else faults_reset(case, R)
                if VERBOSE:
                    print(f"     {case['key']} {mode} run {i}: {bad or 'as expected'} {describe(R)}", flush=True)
                if bad:
                    fails.append((i, bad, describe(R)))
            what = ("byte-exact, no reset, X within %gs" % QUICK if expect == "exact" else
                    "a clean reset after about 2 s, no wrong byte")
            check(f"{case['name']}: {mode}, {reps} runs {what}, on the rings before", not fails,
                  f"{len(fails)} of {reps} runs: {fails[:1]}")
            summary.append((case["key"], mode, expect, reps - len(fails), reps))
finally:
    for sock in modes.values():
        subprocess.run([DSOCK, "stop"], env=dict(os.environ, DSOCK_SOCKET=sock), capture_output=True, timeout=20)

if all(results):
    shutil.rmtree(tmp, ignore_errors=True)
else:
    print(f"(the daemons' logs and the last run's report are in {tmp})")
print("summary (case mode expected: runs as expected):",
      ", ".join(f"{k} {m[:5]} {e}: {g}/{n}" for k, m, e, g, n in summary))
print(f"handover: {sum(results)} passed, {len(results) - sum(results)} failed, {time.monotonic() - t0:.0f} s")
sys.exit(0 if all(results) else 1)
