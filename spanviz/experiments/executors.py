"""Where the runs of a sweep train: one after another in this process, or as tasks on a Ray cluster.

:func:`spanviz.experiments.core.run_grid` replays what the results store already holds and hands every other
run to an executor, whose one method is::

    executor.map(fn, tasks, shared, gpu=False)  ->  (index into tasks, outcome), as each task finishes

``fn(task, shared)`` trains one run (and puts it into the store); ``shared`` (the token data and the store) is
sent to the workers once. ``outcome`` is what ``fn`` returned or, from a distributed executor, a
:class:`TaskError` when it raised — so one failing run does not lose the others.

* :class:`LocalExecutor` (``"local"``, the default): the tasks in order, in this process, with the torch
  threads as they are set; an exception propagates at once.
* :class:`RayExecutor` (``"ray"``, the optional extra ``pip install "spanviz[distributed]"``): each run is a
  Ray task — on a local cluster of ``workers`` processes started for the sweep (and shut down after it), or on
  an existing cluster (``address``, else ``$RAY_ADDRESS``). On a local cluster the cores are the torch threads
  of this process (``torch.get_num_threads()``: the cores, or ``OMP_NUM_THREADS``) and each task gets
  ``cores // workers`` of them (at least 1), so tasks do not oversubscribe the cores; where the
  cluster has GPUs and the runs may use one (device "auto" or "cuda"), each task holds one GPU (Ray sets
  ``CUDA_VISIBLE_DEVICES`` for it). Starting is bounded: an existing cluster's address must accept a connection
  within :data:`RAY_PROBE_TIMEOUT_S` seconds (:func:`check_address`), and ``ray.init`` must return within
  :data:`RAY_START_TIMEOUT_S` seconds; otherwise :class:`ExecutorStartError` says so and suggests the local
  executor (Ray itself retries an unreachable address for many minutes).

Why Ray rather than Dask distributed: one GPU per task is a resource Ray schedules and pins by itself (Dask's
resources only count, so pinning would be code of ours); Dask starts faster (about 1.6 s vs 7 s on 2 cores)
and installs smaller (about 70 vs 280 MB), which matters less than GPUs for sweeps that take minutes to hours.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import torch

from spanviz.contexts import torch_threads
from spanviz.validators import check_float, check_int

EXECUTORS = ("local", "ray")
"""The executor names :func:`make_executor` knows."""
INSTALL_HINT = 'pip install "spanviz[distributed]"'
"""How to install the distributed executor's engine (Ray)."""


class MissingExtraError(ImportError):
    """The engine of a distributed executor is not installed; the message says how to install it."""


class ExecutorStartError(RuntimeError):
    """A distributed executor could not start or reach its cluster in bounded time; the message says what to do
    (including the local executor)."""


RAY_PROBE_TIMEOUT_S = 5.0
"""Seconds to wait for an existing Ray cluster's address to accept a connection before calling it unreachable."""
RAY_START_TIMEOUT_S = 120.0
"""Seconds ``ray.init`` may take to start a local cluster or join an existing one (about 8 s on a quiet 2-core
machine) before the sweep gives up with :class:`ExecutorStartError`."""
LOCAL_HINT = "or run the sweep with --executor local (executor='local'), which needs no cluster"


def check_address(address: str, timeout: float = RAY_PROBE_TIMEOUT_S) -> None:
    """Whether something accepts connections at a Ray cluster ``address`` (``HOST:PORT`` or
    ``ray://HOST:PORT``), within ``timeout`` seconds — before ``ray.init`` would retry it for many minutes.

    Raises:
        ValueError: not ``HOST:PORT`` (port an integer in [1, 65535]).
        ExecutorStartError: nothing answers there in time (refused, unreachable, unknown host, timeout).
    """
    text = address.strip()
    rest = text.split("://", 1)[1] if "://" in text else text
    host, sep, port_text = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"address must be HOST:PORT or ray://HOST:PORT with a port in [1, 65535], got {address!r}")
    try:
        with socket.create_connection((host, int(port_text)), timeout=timeout):
            return
    except OSError as error:
        why = "timed out" if isinstance(error, TimeoutError) else (error.strerror or type(error).__name__)
        raise ExecutorStartError(f"no Ray cluster answers at {address} ({why} within {timeout:g} s): start one there "
                                 f"(ray start --head --port {port_text}), give the right address, {LOCAL_HINT}"
                                 ) from None


class _RayStarter:
    """``ray.init`` in a thread of its own, given up after a timeout with :class:`ExecutorStartError`.

    The thread lives until :meth:`release` (after ``ray.shutdown``): Ray starts its cluster processes with
    ``PR_SET_PDEATHSIG``, which kills them when the *thread* that started them ends, so the starting thread must
    outlive the cluster.
    """

    def __init__(self, ray: Any) -> None:
        self.ray = ray
        self._started, self._release = threading.Event(), threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float, what: str, **kwargs: Any) -> None:
        """``ray.init(**kwargs)`` within ``timeout`` seconds. Raises :class:`ExecutorStartError` (one line)."""

        def run() -> None:
            try:
                self.ray.init(**kwargs)
            except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
                self._error = error
            finally:
                self._started.set()
            self._release.wait()

        self._thread = threading.Thread(target=run, name="spanviz-ray-init", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise ExecutorStartError(f"Ray did not {what} within {timeout:g} s (a busy machine, or not a Ray "
                                     f"cluster); try again when the machine is quieter, {LOCAL_HINT}")
        if self._error is not None:
            error, self._error = self._error, None
            self.release()
            if isinstance(error, KeyboardInterrupt):
                raise error
            first = (str(error).strip().splitlines() or [""])[0][:300]
            raise ExecutorStartError(f"Ray could not {what}: {type(error).__name__}: {first}; {LOCAL_HINT}") from None

    def release(self) -> None:
        """Let the starting thread end (call after ``ray.shutdown``)."""
        self._release.set()


class TaskError(Exception):
    """A task that raised on a worker. ``str(error)`` is "Type: message"; ``traceback`` the worker's frames."""

    def __init__(self, message: str, traceback: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback


class Executor(Protocol):
    """What :func:`~spanviz.experiments.core.run_grid` needs of an executor (see the module docstring)."""

    def map(self, fn: Callable[[Any, Any], Any], tasks: Sequence[Any], shared: Any, *, gpu: bool = False
            ) -> Iterator[tuple[int, Any]]: ...


class LocalExecutor:
    """The tasks one after another in this process, in order (spanviz's behaviour before executors existed)."""

    def __repr__(self) -> str:
        return "LocalExecutor()"

    def map(self, fn: Callable[[Any, Any], Any], tasks: Sequence[Any], shared: Any, *, gpu: bool = False
            ) -> Iterator[tuple[int, Any]]:
        for i, task in enumerate(tasks):
            yield i, fn(task, shared)


def require_ray() -> None:
    """Raises :class:`MissingExtraError` (with the install command) when Ray is not installed; imports nothing."""
    if importlib.util.find_spec("ray") is None:
        raise MissingExtraError(f"the ray executor needs Ray, an optional extra: {INSTALL_HINT}")


LOCAL_CLUSTER_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
"""Set (unless already set) before a local cluster starts: it listens on the loopback interface only, as Ray's
local clusters do on macOS and Windows, rather than on the machine's network address; and it sends no usage
statistics."""


class RayExecutor:
    """Each task a Ray task: on a local cluster started for the sweep, or on an existing cluster.

    Args:
        workers: local cluster: its size, the tasks that run at a time (default: one per GPU when the runs use
            GPUs, else one per core, i.e. per torch thread of this process); existing cluster: the most tasks in
            flight at once (default: as many as the cluster schedules).
        address: an existing cluster, e.g. ``"10.0.0.5:6379"`` or ``"ray://10.0.0.5:10001"``; None: the
            ``RAY_ADDRESS`` environment variable, else a local cluster. When this process already called
            ``ray.init``, that cluster is used (and not shut down).
        threads_per_task: torch threads (and Ray CPUs) per task; default: ``torch.get_num_threads() //
            workers`` (at least 1) on a local cluster, else 1.
        start_timeout: seconds ``ray.init`` may take to start or join the cluster (> 0; default
            :data:`RAY_START_TIMEOUT_S`); an address is first
            probed for :data:`RAY_PROBE_TIMEOUT_S` seconds. Past either, :meth:`map` raises
            :class:`ExecutorStartError` (suggesting the local executor) instead of waiting.
    Raises:
        ValueError: workers / threads_per_task not None or an integer >= 1, address not None or a non-empty
            string, start_timeout not a number > 0. MissingExtraError: Ray is not installed.
    """

    def __init__(self, workers: int | None = None, address: str | None = None,
                 threads_per_task: int | None = None, start_timeout: float | None = None) -> None:
        self.start_timeout = None if start_timeout is None else check_float("start_timeout", start_timeout, 0.0,
                                                                            low_open=True)
        self.workers = None if workers is None else check_int("workers", workers, 1)
        self.threads_per_task = None if threads_per_task is None else check_int("threads_per_task", threads_per_task, 1)
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise ValueError(f"address must be None or a Ray cluster address like '10.0.0.5:6379', got {address!r}")
        self.address = address
        require_ray()

    def __repr__(self) -> str:
        return f"RayExecutor(workers={self.workers}, address={self.address!r})"

    def map(self, fn: Callable[[Any, Any], Any], tasks: Sequence[Any], shared: Any, *, gpu: bool = False
            ) -> Iterator[tuple[int, Any]]:
        tasks = list(tasks)
        if not tasks:
            return
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        started, cap, threads = False, self.workers, self.threads_per_task or 1
        quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        starter = None
        if address is None:
            with _environment(LOCAL_CLUSTER_ENV):  # read by `import ray` and by the processes ray.init starts
                import ray  # lazily: Ray is an optional extra (spanviz[distributed])

                if not ray.is_initialized():  # a local cluster of `cap` slots, `threads` cores each
                    cores = torch.get_num_threads()  # what a local sweep would use: the cores, or OMP_NUM_THREADS
                    cap = self.workers or (torch.cuda.device_count() if gpu else 0) or cores
                    threads = self.threads_per_task or max(1, cores // cap)
                    starter = _RayStarter(ray)
                    starter.start(self.start_timeout or RAY_START_TIMEOUT_S, "start a local cluster",
                                  address="local", num_cpus=cap * threads, **quiet)
                    started = True
        else:
            import ray  # lazily: Ray is an optional extra (spanviz[distributed])

            if not ray.is_initialized():
                check_address(address)
                starter = _RayStarter(ray)
                starter.start(self.start_timeout or RAY_START_TIMEOUT_S, f"connect to the cluster at {address}",
                              address=address, **quiet)
                started = True
        in_flight: dict[Any, int] = {}
        try:
            per_task = dict(num_cpus=threads, num_gpus=1 if gpu and ray.cluster_resources().get("GPU", 0) >= 1 else 0)
            remote = ray.remote(_call).options(**per_task)
            shared_ref = ray.put(shared)
            queue = list(enumerate(tasks))[::-1]
            while queue or in_flight:
                while queue and (cap is None or len(in_flight) < cap):
                    i, task = queue.pop()
                    in_flight[remote.remote(fn, task, shared_ref, threads)] = i
                [ref], _ = ray.wait(list(in_flight), num_returns=1)
                i = in_flight.pop(ref)
                try:
                    outcome = ray.get(ref)
                except ray.exceptions.RayTaskError as error:  # the task raised: its own exception and traceback
                    cause = getattr(error, "cause", None) or error
                    outcome = TaskError(f"{type(cause).__name__}: {cause}".split("\n")[0],
                                        re.sub(r"\x1b\[[0-9;]*m", "", str(error)))  # Ray colours it
                except ray.exceptions.RayError as error:  # the worker died, the task could not be scheduled, ...
                    outcome = TaskError(f"{type(error).__name__}: {error}".split("\n")[0])
                yield i, outcome
        finally:
            for ref in in_flight:
                with contextlib.suppress(Exception):  # e.g. Ctrl-C also stopped the cluster's processes
                    ray.cancel(ref, force=True)
            if started:
                ray.shutdown()
            if starter is not None:
                starter.release()


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """Within the block, set the variables of ``values`` that are not set; afterwards remove them again."""
    added = {key: value for key, value in values.items() if key not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def _call(fn: Callable[[Any, Any], Any], task: Any, shared: Any, threads: int) -> Any:
    """On a worker: ``fn(task, shared)`` with ``threads`` torch threads."""
    with torch_threads(threads):
        return fn(task, shared)


def make_executor(name: str | Executor = "local", *, workers: int | None = None, address: str | None = None
                  ) -> Executor:
    """An executor by name: ``"local"`` or ``"ray"`` (``workers``, ``address``: see :class:`RayExecutor`).

    An object with a ``map`` method is returned as it is.

    Raises:
        ValueError: an unknown name, bad workers / address, or workers / address with ``"local"``.
        MissingExtraError: ``"ray"`` without Ray installed (the message gives the install command).
    """
    if hasattr(name, "map"):
        return name  # type: ignore[return-value]
    if name not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS} or an object with a map method, got {name!r}")
    if name == "local":
        if workers is not None or address is not None:
            raise ValueError(f"workers and address apply to the ray executor, got workers={workers!r}, "
                             f"address={address!r} with executor 'local'")
        return LocalExecutor()
    return RayExecutor(workers=workers, address=address)


__all__ = ["EXECUTORS", "INSTALL_HINT", "RAY_PROBE_TIMEOUT_S", "RAY_START_TIMEOUT_S", "Executor", "ExecutorStartError",
           "LocalExecutor", "MissingExtraError", "RayExecutor", "TaskError", "check_address", "make_executor",
           "require_ray"]
