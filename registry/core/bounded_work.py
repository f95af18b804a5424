"""CPU-heavy work on registrant input, run in child processes with a deadline.

Compiling and meta-validating a registrant's schema, checking compatibility, validating and
repairing arguments: each can be made slow by its input (jsonschema-rs validation is exponential
in the nesting of `anyOf` over shared `$ref`s, and holds the GIL while it builds error reports),
and work in a thread can be neither interrupted nor kept from freezing the event loop. So such
work runs in a small pool of worker processes: the event loop only waits, and a task that outlives
its deadline (DEADLINE_SECONDS of CPU time, WALL_SECONDS of wall-clock time) has its worker killed
(and replaced), failing with `WorkTimedOut` alone. The
functions run must be module-level (they are pickled by reference) and return picklable values.

Tasks are shared fairly between tenants (registry.core.fair_share): at most CAPREG_TENANT_HEAVY_TASKS of one
tenant's tasks run or queue for a worker at once, the rest wait in their tenant's own line.

One pool per server process. Its workers start on first use, not with the server: the first task
starts every slot's worker (the others in the background), and once the whole pool has had no task
for IDLE_SECONDS every worker is stopped, so a server that is not registering holds no worker
processes (about 60 MB each). All or none, never one at a time: a pool that kept one warm worker and
started the next only when a second task came made that second task, typically another tenant's
while the first tenant's slow one runs, wait for a start-up (1 to 2 s) its neighbour did not, which
broke the fair share (CI failure of stop 29, tests/web/test_fair_share.py). A worker's start-up is
not charged to the deadline of the task that waits for it. Workers are new interpreters (not forked from a process
running an event loop and threads), run at a lower priority than the server, cap their own address
space, and exit when their parent does.
See docs/security.md for the limits.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import math
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from registry.core.fair_share import TenantShares, current_owner, tenant_limit

# A task may use DEADLINE_SECONDS of CPU time (rounded up to whole seconds by RLIMIT_CPU) and, however
# busy the machine, no more than WALL_SECONDS of wall-clock time.
DEADLINE_SECONDS = 2.0
WALL_SECONDS = 3 * DEADLINE_SECONDS
WORKERS = max(1, min(2, os.cpu_count() or 1))
_START_TIMEOUT_SECONDS = 60.0
# Once the pool has had no task for this long its workers are stopped (checked every _REAP_EVERY_SECONDS at most).
IDLE_SECONDS = 60.0
_REAP_EVERY_SECONDS = 5.0
_ADDRESS_SPACE_BYTES = 4 * 1024**3

T = TypeVar("T")


class WorkTimedOut(Exception):
    """The task ran past its deadline; its worker was killed."""


class WorkFailed(Exception):
    """The task raised, or its worker died (for example out of memory)."""


class _WorkerGone(WorkFailed):
    """The worker was dead before the task reached it: not the task's fault, so it is retried."""


def _serve(fd: int, preload: Sequence[str] = ()) -> None:
    """A worker's loop (`python -c ...` in a child process): run each (function, args) received on
    the socket `fd` and send back its outcome."""
    conn = Connection(fd)
    parent = os.getppid()

    def orphaned() -> None:  # a task may run long: do not outlive the server that asked for it
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=orphaned, daemon=True).start()
    # Registrant work yields the CPU to the processes serving requests.
    try:
        os.nice(5)
    except OSError:
        pass
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (_ADDRESS_SPACE_BYTES, _ADDRESS_SPACE_BYTES))
    except (ImportError, ValueError, OSError):
        pass
    # Import the usual payloads before saying ready, so the first task's deadline is not spent importing
    # (named by the app: this module imports none of its callers).
    for module in preload:
        importlib.import_module(module)

    conn.send(("ready", None))
    while True:
        try:
            function, args, cpu_seconds = conn.recv()
        except (EOFError, OSError):
            return
        _limit_cpu(cpu_seconds)
        try:
            outcome = ("ok", function(*args))
        except Exception as exc:  # returned to the caller, which raises WorkFailed
            outcome = ("error", f"{type(exc).__name__}: {exc}")
        try:
            conn.send(outcome)
        except Exception as exc:  # an unpicklable result
            conn.send(("error", f"result not transferable: {exc}"))


def _limit_cpu(seconds: float) -> None:
    """Let this process use `seconds` more CPU time, then be killed by SIGXCPU (Rust code included,
    which no Python-level timer could interrupt)."""
    try:
        import resource

        usage = resource.getrusage(resource.RUSAGE_SELF)
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = math.ceil(usage.ru_utime + usage.ru_stime + seconds)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ImportError, ValueError, OSError):
        pass


class _Worker:
    """One child process. Started with `subprocess` rather than multiprocessing's spawn, which
    would re-import the server's __main__ module in the child."""

    def __init__(self, preload: Sequence[str] = ()) -> None:
        ours, theirs = socket.socketpair()
        path = os.pathsep.join(p for p in sys.path if p)
        env = {**os.environ, "PYTHONPATH": path}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from registry.core.bounded_work import _serve; _serve(int(sys.argv[1]), sys.argv[2:])",
                str(theirs.fileno()),
                *preload,
            ],
            pass_fds=(theirs.fileno(),),
            env=env,
            cwd=os.getcwd(),
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self.ready = False

    def wait_ready(self) -> None:
        if not self.ready:
            try:
                if not self.conn.poll(_START_TIMEOUT_SECONDS):
                    raise WorkFailed("worker did not start")
                self.conn.recv()
            except (EOFError, OSError):
                raise _WorkerGone("worker did not start") from None
            self.ready = True

    def call(self, function: Callable[..., Any], args: tuple, deadline: float, wall: float) -> Any:
        self.wait_ready()
        try:
            self.conn.send((function, args, deadline))
        except OSError:
            raise _WorkerGone("worker gone") from None
        if not self.conn.poll(wall):
            raise WorkTimedOut(f"took more than {wall:g} s")
        try:
            status, value = self.conn.recv()
        except (EOFError, OSError):
            try:
                code = self.process.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            if code == -signal.SIGXCPU:
                raise WorkTimedOut(f"took more than {deadline:g} s of CPU time") from None
            raise WorkFailed(f"worker died (exit status {code})") from None
        if status != "ok":
            raise WorkFailed(value)
        return value

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(5)
        self.conn.close()


class BoundedWork:
    """A pool of worker processes; `run` awaits a function's result in one of them."""

    def __init__(
        self,
        workers: int = WORKERS,
        deadline: float = DEADLINE_SECONDS,
        wall: float = WALL_SECONDS,
        per_tenant: int | None = None,
        idle: float = IDLE_SECONDS,
    ) -> None:
        self.deadline, self.wall, self.idle = deadline, wall, idle
        self._size = workers
        self.shares = TenantShares(per_tenant if per_tenant is not None else tenant_limit(workers))
        # One entry per slot: its worker, or None while the slot has no process (not yet started, or
        # stopped when idle); a task takes an entry and puts it back, so at most `workers` run at once.
        # Last in, first out: the worker used last takes the next task (its caches are warm).
        self._idle: queue.LifoQueue[_Worker | None] = queue.LifoQueue()
        for _ in range(workers):
            self._idle.put(None)
        # One thread per worker waits on it, so no other use of the default executor can starve.
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="capreg-bounded-work")
        self._started = False
        self._lock = threading.Lock()
        self._all: set[_Worker] = set()
        self._preload: tuple[str, ...] = ()
        self._closed = threading.Event()
        self._reaper: threading.Thread | None = None
        self._running = 0  # tasks holding a slot now
        self._last_task = time.monotonic()  # when the last task ended

    def start(self, preload: Sequence[str] = ()) -> None:
        """Name the modules each worker imports when it starts (`preload`); idempotent. No process
        starts here: a slot starts its worker when a task first needs it."""
        with self._lock:
            if not self._started:
                self._preload = tuple(preload)
                self._started = True

    def _new_worker(self) -> _Worker:
        worker = _Worker(self._preload)
        with self._lock:
            self._all.add(worker)
            if self._reaper is None and self.idle > 0:
                self._reaper = threading.Thread(target=self._reap_idle, name="capreg-bounded-work-reaper", daemon=True)
                self._reaper.start()
        return worker

    def _retire(self, worker: _Worker) -> None:
        with self._lock:
            self._all.discard(worker)
        worker.kill()

    def _call(self, function: Callable[..., T], args: tuple) -> T:
        try:
            return self._call_once(function, args)
        except _WorkerGone:
            return self._call_once(function, args)

    def _call_once(self, function: Callable[..., T], args: tuple) -> T:
        self.start()
        worker = self._idle.get()
        with self._lock:
            self._running += 1
        try:
            if worker is not None and worker.process.poll() is not None:  # died while idle (killed, out of memory)
                self._retire(worker)
                worker = None
            if worker is None:
                worker = self._new_worker()
                self._start_empty_slots()
            try:
                return worker.call(function, args, self.deadline, self.wall)
            except (WorkTimedOut, WorkFailed, OSError):
                # The worker may be mid-task or dead: replace it rather than reuse it.
                self._retire(worker)
                worker = self._new_worker()
                raise
        finally:
            with self._lock:
                self._running -= 1
                self._last_task = time.monotonic()
            self._idle.put(worker)

    def warm(self) -> None:
        """Start every slot's worker and wait until each is ready, as if a task had just run (for
        tests and benches that must not measure a start-up). Blocks: call it off the event loop."""
        self.start()
        held = [self._idle.get() for _ in range(self._size)]  # every slot, once no task holds it
        try:
            for n, worker in enumerate(held):
                if worker is None or worker.process.poll() is not None:
                    if worker is not None:
                        self._retire(worker)
                    worker = held[n] = self._new_worker()
                worker.wait_ready()
        finally:
            with self._lock:
                self._last_task = time.monotonic()
            for worker in reversed(held):
                self._idle.put(worker)

    def _take_idle_slots(self) -> list[_Worker | None]:
        """Every slot no task holds now, out of the queue (the caller puts each back, in reverse)."""
        held: list[_Worker | None] = []
        while True:
            try:
                held.append(self._idle.get_nowait())
            except queue.Empty:
                return held

    def _start_empty_slots(self) -> None:
        """Start a worker in every slot that has none (without waiting for them to be ready), so the
        next task, whoever's, finds one starting or ready instead of starting its own."""
        held = self._take_idle_slots()
        for worker in reversed(held):  # back in the order they were (the queue is last in, first out)
            if worker is None:
                try:
                    worker = self._new_worker()
                except OSError:  # no process now (out of memory, pids): the slot starts one when used
                    worker = None
            self._idle.put(worker)

    def _reap_idle(self) -> None:
        """Stop the workers once the pool has had no task for `idle` seconds (a thread of its own, while
        the pool lives)."""
        while not self._closed.wait(min(self.idle / 4, _REAP_EVERY_SECONDS)):
            self.stop_idle_workers()

    def stop_idle_workers(self, now: float | None = None) -> int:
        """Stop every worker once the whole pool has had no task for `idle` seconds (at `now`); the
        next task starts them again. While any task runs, or ran more recently, none is stopped. How
        many were stopped."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self._running or now - self._last_task < self.idle:
                return 0
        held = self._take_idle_slots()
        stopped = 0
        with self._lock:  # a task that started meanwhile holds its slot: then stop nothing
            quiet = not self._running and len(held) == self._size
        for worker in reversed(held):  # back in the order they were (the queue is last in, first out)
            if quiet and worker is not None:
                self._retire(worker)
                worker, stopped = None, stopped + 1
            self._idle.put(worker)
        return stopped

    def processes(self) -> int:
        """Worker processes alive now (for tests and metrics)."""
        with self._lock:
            return sum(1 for worker in self._all if worker.process.poll() is None)

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` in a worker, within the share of the tenant whose request this is."""
        loop = asyncio.get_running_loop()
        async with self.shares.slot(current_owner()):
            return await loop.run_in_executor(self._threads, self._call, function, args)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            workers = list(self._all)
            self._all.clear()
        for worker in workers:
            worker.kill()


_pool: BoundedWork | None = None
_pool_lock = threading.Lock()


def bounded_work() -> BoundedWork:
    """This process's pool (one per server process, shared by every app instance in it)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = BoundedWork()
            atexit.register(_pool.close)
        return _pool


async def run_bounded(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)` in a worker process within the deadline, else WorkTimedOut / WorkFailed."""
    return await bounded_work().run(function, *args)
