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

One pool per server process, started on first use; workers are new interpreters (not forked from a
process running an event loop and threads), run at a lower priority than the server, cap their own address
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

    def call(self, function: Callable[..., Any], args: tuple, deadline: float, wall: float) -> Any:
        if not self.ready:
            try:
                if not self.conn.poll(_START_TIMEOUT_SECONDS):
                    raise WorkFailed("worker did not start")
                self.conn.recv()
            except (EOFError, OSError):
                raise _WorkerGone("worker did not start") from None
            self.ready = True
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
    ) -> None:
        self.deadline, self.wall = deadline, wall
        self._size = workers
        self.shares = TenantShares(per_tenant if per_tenant is not None else tenant_limit(workers))
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        # One thread per worker waits on it, so no other use of the default executor can starve.
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="capreg-bounded-work")
        self._started = False
        self._lock = threading.Lock()
        self._all: set[_Worker] = set()
        self._preload: tuple[str, ...] = ()

    def start(self, preload: Sequence[str] = ()) -> None:
        """Start the worker processes (they import `preload`, module names, in the background);
        idempotent."""
        with self._lock:
            if not self._started:
                self._preload = tuple(preload)
                for _ in range(self._size):
                    self._add()
                self._started = True

    def _add(self) -> None:
        worker = _Worker(self._preload)
        self._all.add(worker)
        self._idle.put(worker)

    def _call(self, function: Callable[..., T], args: tuple) -> T:
        try:
            return self._call_once(function, args)
        except _WorkerGone:
            return self._call_once(function, args)

    def _call_once(self, function: Callable[..., T], args: tuple) -> T:
        self.start()
        worker = self._idle.get()
        if worker.process.poll() is not None:  # died while idle (killed, out of memory): replace it
            self._all.discard(worker)
            worker.kill()
            worker = _Worker(self._preload)
            self._all.add(worker)
        try:
            return worker.call(function, args, self.deadline, self.wall)
        except (WorkTimedOut, WorkFailed, OSError):
            # The worker may be mid-task or dead: replace it rather than reuse it.
            self._all.discard(worker)
            worker.kill()
            worker = _Worker(self._preload)
            self._all.add(worker)
            raise
        finally:
            self._idle.put(worker)

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` in a worker, within the share of the tenant whose request this is."""
        loop = asyncio.get_running_loop()
        async with self.shares.slot(current_owner()):
            return await loop.run_in_executor(self._threads, self._call, function, args)

    def close(self) -> None:
        for worker in list(self._all):
            worker.kill()
        self._all.clear()


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
