"""Upstream reproducer (distributed; cryptography for certificates): a Client that fails
to start deadlocks a later Client start.  Component: distributed.client.Client (no
cleanup when start fails) + distributed.utils.LoopRunner (its lock held while GC may run
``Client.__del__``).  distributed 2026.8.0 (same code on main, July 2026), Python 3.11.

``Client.__init__`` calls ``start()`` (client.py:1250): the event-loop thread starts
(``LoopRunner.start``, client.py:1410), then the connection (1417).  If that fails the
exception leaves the constructor with the loop running and no object to close.  After an
OSError ``_close()`` runs (client.py:1496) but the loop is never stopped (a thread leaked
per attempt); any other error (``tls://`` without a TLS context: TypeError, comm/tcp.py:457;
"encryption required": RuntimeError, tcp.py:469) leaves the Client "connecting", in a
reference cycle through its traceback, until the garbage collector runs ``__del__``
(client.py:1706) -> ``close()`` -> ``LoopRunner.stop()``, which takes the class-wide,
non-reentrant ``LoopRunner._lock`` (utils.py:508, 597).  ``LoopRunner.start`` holds that
lock while it starts the loop thread and waits up to 10 s for it (utils.py:541-587); a
collection there deadlocks the starting thread on the lock it holds (forever), or, in the
new loop thread, stalls the start 10 s into ``assert loop is not None`` (utils.py:587).
Part 1 (default GC; issue 17: "after four failed TLS clients the next connect
deadlocks") hits one or the other where allocation counts decide; part 2 collects exactly
inside ``LoopRunner.start`` and always deadlocks.  Run (exits 1 with the threads' stacks):
``timeout 120 python benchmarks/repro_tls_deadlock.py``
"""
import faulthandler, gc, json, os, subprocess, sys, tempfile, threading, time

from distributed import Client
from distributed.security import Security

d = tempfile.mkdtemp()
sec = Security.temporary()               # one self-signed certificate for every role
for name, pem in (("ca", sec.tls_ca_file), ("cert", sec.tls_scheduler_cert),
                  ("key", sec.tls_scheduler_key)):
    with open(os.path.join(d, name + ".pem"), "w") as fh:
        fh.write(pem)
sched = subprocess.Popen(
    [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
     "--port", "0", "--protocol", "tls", "--dashboard-address", "127.0.0.1:0",
     "--scheduler-file", f"{d}/s.json", "--tls-ca-file", f"{d}/ca.pem",
     "--tls-cert", f"{d}/cert.pem", "--tls-key", f"{d}/key.pem"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def hung():                               # after 40 s: dump every thread, exit 1
    print("DEADLOCK; the threads:", flush=True)
    faulthandler.dump_traceback(sys.stdout, all_threads=True)
    sched.kill()
    sched.wait()
    os._exit(1)


watchdog = threading.Timer(40, hung)
watchdog.daemon = True
watchdog.start()                          # before part 2 patches Thread.start
try:
    while not os.path.exists(f"{d}/s.json"):
        time.sleep(0.1)
    address = json.load(open(f"{d}/s.json"))["address"]

    def failed_client():
        t0 = time.monotonic()
        try:
            Client(address, timeout=3)        # no certificate: TypeError, loop left running
        except Exception as exc:
            print(f"   failed in {time.monotonic() - t0:4.1f} s: {type(exc).__name__}; "
                  f"IO loop threads: {sum(t.name == 'IO loop' for t in threading.enumerate())}")

    print("1. failed TLS clients, default GC (expect a 10 s AssertionError or a deadlock):")
    for _ in range(6):
        failed_client()
    with Client(address, security=sec, timeout=3) as c:
        print("   a correct client still connects:", c.scheduler_info()["address"])

    print("2. a collection inside LoopRunner.start, which holds LoopRunner._lock:")
    start = threading.Thread.start
    threading.Thread.start = lambda self: (gc.collect(), start(self))[1]
    failed_client()
    failed_client()                       # the main thread now waits for the lock it holds
    print("   not reproduced")
finally:
    sched.kill()
