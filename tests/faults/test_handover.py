#!/usr/bin/env python3
"""A connection on the rings handed to a program without dsock
(tests/faults/handover.c), with unread data in both rings at that moment:

  1. exec into a static program (LD_PRELOAD never applies);
  2. exec into a dynamic program that dsock's rules disable;
  3. SCM_RIGHTS to a static program started before (the sender closes);
  4. exec into a program under dsock: the rings are handed over instead;
  5. the peer stays away from its socket for 3 s, so it cannot answer:
     the connection ends (EOF or reset) after about 2 s; no byte is wrong;
  6. (root) exec into a set-user-ID program of another user: the loader's
     secure mode ignores dsock's preload.

1-4 run natively too and must print the same; under dsock the client must
have moved bytes through a ring (DSOCK_FASTPATH_REPORT), so the hand-over
really moved a live fast-path connection; in 4 the new program must have
used the ring too (the daemon gave it the connection's memory: the old
program had closed its own memfd once mapped).  Last line 'handover: N passed,
N failed'."""
import os, shutil, subprocess, sys, tempfile

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
REPS = int(os.environ.get("HANDOVER_REPS", "5"))
DSOCK = os.path.join(BUILD, "bin", "dsock")
PROG = os.path.join(BUILD, "tests", "handover")
STATIC = os.path.join(BUILD, "tests", "handover-static")
tmp = tempfile.mkdtemp(prefix="dsock-handover-")
results = []


def check(name, cond, detail=""):
    results.append(bool(cond))
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else "  " + str(detail)[-1500:]), flush=True)


def run(args, dsock=True, extra=None):
    env = dict(os.environ, DSOCK_SOCKET=os.path.join(tmp, "d.sock"), DSOCK_FASTPATH="1",
               DSOCK_FASTPATH_REPORT=os.path.join(tmp, "report"), **(extra or {}))
    try:
        os.unlink(os.path.join(tmp, "report"))
    except OSError:
        pass
    cmd = ([DSOCK, "run", "--"] if dsock else []) + [PROG] + args
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    try:
        rings = [int(l.split()[1]) for l in open(os.path.join(tmp, "report"))]
    except OSError:
        rings = []
    return r, rings


def outcome(r):
    return sorted(l for l in r.stdout.splitlines() if l.strip())


CASES = [
    ("1. exec into a static program", ["exec", STATIC], None, ["client ok", "helper ok"]),
    ("2. exec into a program the rules disable", ["exec", PROG, "handover-plain"],
     {"DSOCK_RULES": "deny program handover-plain"}, ["client ok", "helper ok"]),
    ("3. SCM_RIGHTS to a static program", ["pass", STATIC], None, ["client ok", "helper ok", "server ok"]),
    ("4. exec into a program under dsock (rings handed over)", ["exec", PROG], None, ["client ok", "helper ok"]),
]

try:
    for name, args, extra, want in CASES[:4]:
        n, _ = run(args, dsock=False, extra=extra)
        check(name + ": natively", outcome(n) == want, (n.stdout, n.stderr))
        bad = []
        for i in range(REPS):
            r, rings = run(args, extra=extra)
            # the client is the one process of the run that stays under
            # dsock from start to end: it must have used a ring
            # in 4 the exec'd program (the server's pid) reports too
            least = 2 if name.startswith("4.") else 1
            if outcome(r) != want or len(rings) < least or max(rings) < 1 or "reset" in r.stderr:
                bad.append((i, r.stdout, r.stderr[-600:], rings))
        check(f"{name}: under dsock, {REPS} runs byte-exact, on the rings before", not bad, bad[:1])

    if os.geteuid() == 0 and shutil.which("useradd"):
        user = "dsockiso"
        subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", user], capture_output=True)
        suid = os.path.join(tmp, "handover-suid")
        shutil.copy(PROG, suid)
        shutil.chown(suid, user)
        os.chmod(suid, 0o4755)
        CASES.append(("6. exec into a set-user-ID program", ["exec", suid], None, ["client ok", "helper ok"]))
    else:
        print("skip 6. a set-user-ID program (needs root and useradd)")
    for name, args, extra, want in CASES[4:]:
        n, _ = run(args, dsock=False, extra=extra)
        check(name + ": natively", outcome(n) == want, (n.stdout, n.stderr))
        r, rings = run(args, extra=extra)
        check(name + ": under dsock, byte-exact, on the rings before",
              outcome(r) == want and rings and max(rings) >= 1 and "reset" not in r.stderr,
              (r.stdout, r.stderr[-600:], rings))

    r, rings = run(["exec", STATIC], extra={"HANDOVER_STALL": "1"})
    out = r.stdout
    clean = "FAIL" in out and " is " not in out and ("EOF" in out or "reset" in out.lower())
    check("5. a peer that cannot answer: the connection ends cleanly, no wrong byte",
          clean and "did not answer" in r.stderr, (out, r.stderr[-800:]))
finally:
    subprocess.run([DSOCK, "stop"], env=dict(os.environ, DSOCK_SOCKET=os.path.join(tmp, "d.sock")),
                   capture_output=True, timeout=20)

print(f"handover: {sum(results)} passed, {len(results) - sum(results)} failed")
sys.exit(0 if all(results) else 1)
