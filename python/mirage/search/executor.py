"""Where the search's work items and candidate checks run: a local process pool (the
default) or the tasks of a Ray cluster, behind one small interface.

An executor runs `fn(arg)` in worker processes that were first set up by
`init(deadline, stop_flag, *init_args)` (the driver's `_init_worker`: it builds the
generator once per worker, not once per item). `deadline` is the worker's own
`time.monotonic()` value of the driver's deadline (the clocks of two machines differ: it
travels as wall-clock time), and `stop_flag.is_set()` turns true after `stop()` (Ctrl-C):
the generator looks at both every 256 states and returns what it found so far.

- `submit(fn, arg)`: start a call, queued behind the others where every worker is busy
  (the driver keeps few queued, so that a check it submits starts soon); returns its
  handle;
- `next_done(timeout)`: `(handle, result)` of a call that finished (any order; raises what
  the call raised, `TimeoutError` after `timeout` seconds); `running`: the calls in flight;
- `stop()`: running work items return what they have found so far, later ones nothing
  (the checks of candidates run on);
- `want(n)`: n workers are idle with nothing to run; a running call that can hand part of
  its work back (the driver's `_Piece`) asks `steal()`, which is true for n of them
  (each takes one), and returns early with the rest of its work; returns how many of
  the previous `want`'s were taken;
- `terminate()`: abandon the calls in flight (their processes are killed);
- `close()`: the calls still in flight are abandoned too.

`executor="ray"` (`LocalPool`'s twin `RayPool`) connects to the cluster of the caller's
`ray.init`, else to `$MIRAGE_RAY_ADDRESS`, else starts Ray on this machine. A task whose
worker dies, or that raises, is run again (`RETRIES` times, by Ray), so a lost worker loses
nothing; a task that still fails fails the search as it would locally. Ray is optional:
`pip install 'mirage[ray]'`.
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import itertools
import multiprocessing as mp
import os
import queue
import signal
import socket
import time
import uuid

from ..verify.blas import loaded as blas_libraries, set_threads as set_blas_threads

EXECUTORS = ("local", "ray")
ADDRESS_VARIABLE = "MIRAGE_RAY_ADDRESS"
RETRIES = 3  # runs of a Ray task after the first, when its worker dies or it raises
POLL = 0.2  # seconds between two looks of a Ray worker at the stop flag


def make(kind: str, workers: int, init, init_args: tuple, deadline: float | None):
    """An executor of `kind` ("local" or "ray") with `workers` processes (0: all the cores
    of this machine, or of the Ray cluster)."""
    if kind == "ray":
        return RayPool(workers, init, init_args, deadline)
    return LocalPool(workers or os.cpu_count() or 1, init, init_args, deadline)


def ray_workers() -> int:
    """The CPUs of the Ray cluster (connecting first)."""
    return max(1, int(_ray().cluster_resources().get("CPU", 1)))


class LocalPool:
    """Forked processes of this machine (`multiprocessing`)."""

    def __init__(self, workers: int, init, init_args: tuple, deadline: float | None):
        ctx = mp.get_context("fork")
        self.workers = workers
        self._stop = ctx.Event()
        self._want = ctx.Value("i", 0)  # `want`: shared with the workers
        self._wanted = 0
        with _one_blas_thread() as inherited:  # mp's Pool forks its workers here
            self._pool = ctx.Pool(workers, _local_init,
                                  (init, not inherited, self._want, deadline, self._stop) + tuple(init_args))
        self._ids = itertools.count()
        self._done: queue.Queue = queue.Queue()  # (handle, result, exception), filled by the pool's thread
        self.running: set = set()

    def submit(self, fn, arg) -> int:
        h = next(self._ids)
        self.running.add(h)
        self._pool.apply_async(fn, (arg,), callback=lambda out: self._done.put((h, out, None)),
                               error_callback=lambda e: self._done.put((h, None, e)))
        return h

    def next_done(self, timeout: float | None = None):
        try:  # interrupted by Ctrl-C (a lock's wait is, on POSIX), it leaves the calls as they are
            h, out, err = self._done.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError from None
        self.running.discard(h)
        if err is not None:
            raise err
        return h, out

    def stop(self) -> None:
        self._stop.set()

    def want(self, n: int) -> int:
        with self._want.get_lock():
            taken, self._wanted = self._wanted - self._want.value, n
            self._want.value = n
        return taken

    def terminate(self) -> None:
        self._pool.terminate()
        self.running.clear()

    def close(self) -> None:
        if self.running:  # calls no longer wanted (checks started ahead): abandoned, not awaited
            self._pool.terminate()
        else:
            self._pool.close()
        self._pool.join()


_wanted = {"want": None}  # in a worker process: where `steal` looks (`want`)


def steal() -> bool:
    """In a worker: whether an idle worker waits for work (`want`), which this call then
    gives (one of those asked for: the count goes down by one)."""
    w = _wanted["want"]
    if w is None:
        return False
    if isinstance(w, _RemoteWant):
        return w.steal()
    if w.value <= 0:  # without the lock: asked at every step of a long call
        return False
    with w.get_lock():
        if w.value <= 0:
            return False
        w.value -= 1
        return True


def _local_init(init, set_blas, want, *args):
    # what this worker inherited from the driver (a one-worker search's generator before,
    # split's memos, the modules) out of its garbage collector's reach: a full collection
    # walks every object it tracks and writes to each, so each worker copied those pages.
    # QKNorm at max_block_ops=11 on the GPU machine's 16 CPUs after a one-worker search:
    # 14.4 s of the units' 70.0 s of CPU in 35 full collections, 952k page faults. Frozen
    # in the worker (it costs nothing: the collector's lists are moved whole), so that the
    # driver's collections stay as they were.
    gc.freeze()
    # a driver connected to Ray has Ray's SIGTERM handler, which its forked children
    # inherit: it would print a crash report when `terminate()` stops them
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _wanted["want"] = want
    if set_blas:  # the parent could not fork them at one BLAS thread (`_one_blas_thread`)
        set_blas_threads(1)
    init(*args)


# (getter, setter) of OpenBLAS's thread count, as numpy's and scipy's copies name them
_OPENBLAS_COUNT = [(f"{p}_get_num_threads{s}", f"{p}_set_num_threads{s}")
                   for p in ("openblas", "scipy_openblas") for s in ("", "64_", "_64_")]


@contextlib.contextmanager
def _one_blas_thread():
    """This process's OpenBLAS at one thread while a pool forks its workers, then back at
    its own count; yields whether it could (each OpenBLAS found has a getter). One worker
    runs per core, so the workers must run one BLAS thread each (verify/blas.py), and they
    get it by inheritance: a forked child that sets the count itself restarts OpenBLAS's
    thread pool first (one thread per core, each spinning ~0.1 s before it sleeps). On
    the 16-CPU GPU machine that took 3.3 s of the 17.8 s of CPU of a 16-worker GQA search
    (max_block_ops=7), 0.1-0.3 s in each worker before its first call, and delayed the
    first calls while up to 240 threads spun; forked at one thread, 0.1 s in all."""
    saved = []  # (setter, count before)
    libs = blas_libraries("openblas")
    for _, lib in libs:
        for get, put in _OPENBLAS_COUNT:
            if hasattr(lib, get) and hasattr(lib, put):
                saved.append((getattr(lib, put), getattr(lib, get)()))
                break
    for put, _ in saved:
        put(ctypes.c_int(1))
    try:
        yield bool(saved) and len(saved) == len(libs)
    finally:
        for put, n in saved:
            put(ctypes.c_int(n))


# -- Ray ---------------------------------------------------------------------------------

def _ray():
    """The `ray` module, connected to a cluster (see the module's docstring)."""
    try:
        import ray
    except ImportError:
        raise ImportError("executor='ray' needs Ray, which is not installed: pip install 'mirage[ray]' "
                          "(or pip install ray)") from None
    if not ray.is_initialized():
        address = os.environ.get(ADDRESS_VARIABLE) or None
        if address is not None:
            _check_reachable(address)
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    return ray


def _check_reachable(address: str) -> None:
    """A `host:port` nobody answers at is an error now: Ray would retry for minutes."""
    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not port.isdigit():  # "auto", "ray://...": Ray's to resolve
        return
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as e:
        raise ConnectionError(f"{ADDRESS_VARIABLE}={address}: no Ray cluster answers there ({e.strerror or e}); "
                              f"start one (ray start --head) or correct the address") from None


_remote: dict = {}  # per driver process: the remote function and the stop-flag actor


def _remote_parts(ray):
    rc = ray.get_runtime_context()
    session = (rc.get_session_name(), rc.get_job_id())  # a later ray.init is another cluster or job
    if _remote.get("session") != session:
        _remote.clear()
        _remote["task"] = ray.remote(num_cpus=1, max_retries=RETRIES, retry_exceptions=True)(_task)
        _remote["flags"] = ray.remote(num_cpus=0)(_StopFlags).remote()
        _remote["session"] = session
    return _remote["task"], _remote["flags"]


class RayPool:
    """Tasks of a Ray cluster: one per call, at most `workers` in flight."""

    def __init__(self, workers: int, init, init_args: tuple, deadline: float | None):
        self._ray = ray = _ray()
        self.workers = workers or ray_workers()
        self._task, self._flags = _remote_parts(ray)
        self._token = uuid.uuid4().hex  # this search's context on the workers
        wall = None if deadline is None else time.time() + (deadline - time.monotonic())
        self._context = ray.put((init, tuple(init_args), wall))
        self.running: set = set()  # object refs of the calls in flight
        self._wanted = 0

    def submit(self, fn, arg):
        # the context travels inside a list, so that Ray does not fetch it for every call:
        # a worker fetches it once per search (`_task`)
        ref = self._task.remote(self._token, [self._context], self._flags, fn, arg)
        self.running.add(ref)
        return ref

    def next_done(self, timeout: float | None = None):
        # Ctrl-C inside the wait leaves the calls in flight, to be collected after `stop()`
        done, _ = self._ray.wait(list(self.running), num_returns=1, timeout=timeout)
        if not done:
            raise TimeoutError
        self.running.discard(done[0])
        return done[0], self._ray.get(done[0])  # raises what the task raised after its retries

    def stop(self) -> None:
        self._ray.get(self._flags.set.remote(self._token))

    def want(self, n: int) -> int:
        if n == self._wanted == 0:  # the driver says it after every call: the actor hears the others
            return 0
        self._wanted = n
        return self._ray.get(self._flags.want.remote(self._token, n))

    def terminate(self) -> None:
        for ref in self.running:
            self._ray.cancel(ref, force=True)
        self.running.clear()

    def close(self) -> None:
        if self.running:
            self.terminate()
        self._flags.clear.remote(self._token)
        del self._context


class _StopFlags:
    """The Ray actor behind `RayPool.stop`: the searches (tokens) told to stop."""

    def __init__(self):
        self._stopped: set = set()
        self._want: dict = {}  # token -> (`RayPool.want`'s count, less the steals since; that count)

    def set(self, token: str) -> None:
        self._stopped.add(token)

    def clear(self, token: str) -> None:
        self._stopped.discard(token)
        self._want.pop(token, None)

    def want(self, token: str, n: int) -> int:
        left, asked = self._want.get(token, (0, 0))
        self._want[token] = (n, n)
        return asked - left

    def wanted(self, token: str) -> int:
        return self._want.get(token, (0, 0))[0]

    def steal(self, token: str) -> bool:
        left, asked = self._want.get(token, (0, 0))
        if left <= 0:
            return False
        self._want[token] = (left - 1, asked)
        return True

    def is_set(self, token: str) -> bool:
        return token in self._stopped


class _RemoteFlag:
    """`is_set()` of a search's stop flag on a Ray worker: asks the actor at most every
    `POLL` seconds, without waiting for the answer (the generator asks every 256 states)."""

    def __init__(self, flags, token: str):
        self._flags, self._token = flags, token
        self._asked = None
        self._last = 0.0
        self._set = False

    def is_set(self) -> bool:
        import ray

        if self._set:
            return True
        if self._asked is not None and ray.wait([self._asked], timeout=0)[0]:
            self._set = ray.get(self._asked)
            self._asked = None
        if self._asked is None and not self._set and time.monotonic() - self._last >= POLL:
            self._asked = self._flags.is_set.remote(self._token)
            self._last = time.monotonic()
        return self._set


class _RemoteWant:
    """`steal()` on a Ray worker: asks the actor how many workers wait at most every `POLL`
    seconds, without waiting for the answer, and takes one (a call to the actor) only
    where some did."""

    def __init__(self, flags, token: str):
        self._flags, self._token = flags, token
        self._asked = None
        self._last = 0.0

    def steal(self) -> bool:
        import ray

        if self._asked is not None and ray.wait([self._asked], timeout=0)[0]:
            n, self._asked = ray.get(self._asked), None
            if n > 0:
                return ray.get(self._flags.steal.remote(self._token))
        if self._asked is None and time.monotonic() - self._last >= POLL:
            self._asked = self._flags.wanted.remote(self._token)
            self._last = time.monotonic()
        return False


_context = {"token": None}  # on a Ray worker: the search it is set up for


def _task(token: str, context: list, flags, fn, arg):
    """One call on a Ray worker, which first sets itself up for the search `token`."""
    import ray

    if _context["token"] != token:
        init, init_args, wall = ray.get(context[0])
        deadline = None if wall is None else time.monotonic() + (wall - time.time())
        set_blas_threads(1)  # one task per CPU (a Ray worker is not forked from the driver: no restart)
        init(deadline, _RemoteFlag(flags, token), *init_args)
        _wanted["want"] = _RemoteWant(flags, token)
        _context["token"] = token
    return fn(arg)
