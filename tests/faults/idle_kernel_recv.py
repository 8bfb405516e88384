"""A receiver blocked on connections the kernel carries (a blocking recv,
then poll, then epoll_wait, each for 300 ms with nothing coming) costs no
CPU beyond one spin: prints the CPU ms of the worst of the three waits,
and the bytes that finally came.  Run natively and under dsock
(test_resources.py 13)."""
import os, resource, select, socket, time

def cpu_ms():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return (u.ru_utime + u.ru_stime) * 1000

l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(4)
c = socket.create_connection(l.getsockname())
a, _ = l.accept()
pid = os.fork()
if pid == 0:  # the peer: a byte every 300 ms, three times
    for _ in range(3):
        time.sleep(0.3)
        a.send(b"x")
    os._exit(0)
worst, got = 0, b""
for how in ("recv", "poll", "epoll"):
    t0 = cpu_ms()
    if how == "poll":
        p = select.poll()
        p.register(c, select.POLLIN)
        p.poll(5000)
    elif how == "epoll":
        e = select.epoll()
        e.register(c, select.EPOLLIN)
        e.poll(5)
    got += c.recv(1)
    worst = max(worst, cpu_ms() - t0)
os.waitpid(pid, 0)
print("%d %s" % (worst, got.decode()))
