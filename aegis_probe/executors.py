"""Where independent runs execute: threads of this process, or tasks on a Ray cluster.

Campaigns and blame scans hand an :class:`Executor` zero-argument calls (a run, a replay) and
consume their results on the driver, which alone writes ``runs.jsonl`` and the trace stores.

- :class:`ThreadExecutor`: ``concurrency`` threads of this process (the default).
- :class:`RayExecutor`: one Ray task per call. The call is pickled to the worker: a campaign or an
  :class:`~aegis_probe.apps.AppSpec` travels as its app reference and is loaded again there, and
  :meth:`Executor.ship` puts the app's own code on the workers through the job's ``runtime_env``
  (the folder of a ``file.py`` app as ``working_dir``, a module that is not installed as
  ``py_modules``; Ray accepts local paths only when it is initialised, so ship before entering).
  A task whose worker dies or that raises is retried ``max_retries`` times, then reported as a
  :class:`Failure`, like a call that raised in a thread; a :class:`NotRetried` error (a run over
  its time limit) is reported at once, never retried.

``aegis_probe`` itself and the app's framework must be installed on every node (see docs/scale.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import queue
import socket
import sysconfig
import threading
import traceback
from abc import ABC, abstractmethod
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar

from .apps import AppSpec, split_ref
from .redact import redact_secrets, redacted_log_records

T = TypeVar("T")

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Failure:
    """A call that raised (after any retries): ``"Type: message"`` and the traceback text."""

    error: str
    traceback: str

    @classmethod
    def of(cls, exc: BaseException) -> "Failure":
        """``exc`` with secrets (an API key in an app's exception) redacted from message and traceback."""
        cause = getattr(exc, "cause", None)  # a Ray task error wraps the task's own exception
        if isinstance(cause, TaskError):
            return cls(*cause.args)
        shown = cause if isinstance(cause, BaseException) else exc
        remote = getattr(exc, "traceback_str", None)
        return cls(redact_secrets(f"{type(shown).__name__}: {shown}"),
                   redact_secrets(remote or "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))))


class NotRetried(Exception):
    """Base of the errors that running the call again would not mend (a run that outlasted its
    time limit, left hanging where it ran): a Ray task reports them as its :class:`Failure` at
    once instead of being retried."""


class TaskError(Exception):
    """What a Ray task raises for its call's exception: ``(error, traceback)`` of a :class:`Failure`,
    already redacted, so neither Ray's retry messages nor the driver see a secret it held."""

    def __str__(self) -> str:
        return f"{self.args[0]}\n{self.args[1]}"


def outcome(future: "Future[T]") -> "T | Failure":
    """A finished call's result, or its :class:`Failure`."""
    exc = future.exception()
    return Failure.of(exc) if exc is not None else future.result()


class Executor(ABC):
    """Runs calls, at most ``concurrency`` at a time; use as a context manager."""

    concurrency: int

    def ship(self, app: AppSpec) -> None:
        """Make ``app``'s code importable where calls run (nothing to do in this process)."""

    @abstractmethod
    def submit(self, call: Callable[[], T]) -> "Future[T]":
        """Start ``call``; its future holds the result or the exception."""

    def cancel(self, future: Future) -> None:
        """Stop a call whose result is no longer needed (best effort)."""
        future.cancel()

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run_all(self, calls: Sequence[Callable[[], T]]) -> Iterator[tuple[int, "T | Failure"]]:
        """Run ``calls`` with at most ``concurrency`` in flight; yield ``(index, result or
        Failure)`` in completion order."""
        pending: dict[Future, int] = {}
        queue = iter(enumerate(calls))
        for i, call in queue:
            pending[self.submit(call)] = i
            if len(pending) >= self.concurrency:
                break
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield pending.pop(fut), outcome(fut)
                nxt = next(queue, None)
                if nxt is not None:
                    pending[self.submit(nxt[1])] = nxt[0]


class ThreadExecutor(Executor):
    """``concurrency`` daemon threads of this process. Leaving the ``with`` block normally waits for
    the calls; leaving it on an exception (Ctrl-C) cancels the queued ones and does not wait for
    those running, so a hung run does not keep the process alive."""

    def __init__(self, concurrency: int = 1) -> None:
        self.concurrency = max(1, concurrency)
        self._queue: queue.SimpleQueue[tuple[Future, Callable[[], Any]] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def submit(self, call: Callable[[], T]) -> "Future[T]":
        future: Future[T] = Future()
        self._queue.put((future, call))
        if len(self._threads) < self.concurrency:
            thread = threading.Thread(target=self._work, args=(self._queue,), name=f"aegis-run-{len(self._threads)}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)
        return future

    @staticmethod
    def _work(calls: "queue.SimpleQueue[tuple[Future, Callable[[], Any]] | None]") -> None:
        while (item := calls.get()) is not None:
            future, call = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as exc:  # noqa: BLE001 - the call's outcome, taken by its caller
                    future.set_exception(exc)

    def __exit__(self, exc_type: object = None, *exc: object) -> None:
        if exc_type is not None:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in self._threads:
            self._queue.put(None)
        if exc_type is None:
            for thread in self._threads:
                thread.join()
        self._queue, self._threads = queue.SimpleQueue(), []  # threads still running end on their queue's None


def _invoke(call: Callable[[], T]) -> "T | Failure":
    """The Ray task: run the call that was shipped; its exception leaves as a :class:`TaskError`
    (which Ray retries), a :class:`NotRetried` one as the returned :class:`Failure` (which it does not)."""
    try:
        with redacted_log_records():  # the worker's log lines reach the driver's terminal
            return call()
    except NotRetried as exc:
        return Failure.of(exc)
    except Exception as exc:  # noqa: BLE001 - every other exception is the run's failure (and is retried)
        failure = Failure.of(exc)
        raise TaskError(failure.error, failure.traceback) from None


class RayExecutor(Executor):
    """One Ray task per call on the cluster at ``address`` (default: ``$RAY_ADDRESS``, else a new
    local Ray instance); an already initialised Ray is used as it is, and must then have been
    started with the app's code in its ``runtime_env`` (:func:`app_runtime_env`).

    ``concurrency``: calls in flight (default: the cluster's CPUs divided by ``num_cpus``, the
    CPUs each task reserves). ``runtime_env`` is merged with what :meth:`ship` adds; ``init``:
    more ``ray.init`` arguments (e.g. ``num_cpus`` of a new local instance).
    """

    def __init__(self, address: str | None = None, concurrency: int | None = None, *, num_cpus: float = 1.0,
                 max_retries: int = 2, runtime_env: dict[str, Any] | None = None,
                 init: dict[str, Any] | None = None) -> None:
        self.address, self.num_cpus, self.max_retries = address, num_cpus, max_retries
        self.runtime_env = dict(runtime_env or {})
        self.init = dict(init or {})
        self.concurrency = max(1, concurrency or 1)
        self._requested = concurrency
        self._started = False
        self._depth = 0  # nested `with` blocks: the outermost one starts and stops Ray
        self._task: Any = None
        self._refs: dict[Future, Any] = {}

    def __enter__(self) -> "RayExecutor":
        import ray

        self._depth += 1
        if self._depth == 1 and not ray.is_initialized():
            _check_reachable(self.address or os.environ.get("RAY_ADDRESS") or "")
            options: dict[str, Any] = {"address": self.address, "runtime_env": self.runtime_env or None}
            if self.address is None and not os.environ.get("RAY_ADDRESS"):  # a new local instance
                options["include_dashboard"] = False
            ray.init(**{**options, **self.init})
            self._started = True
        if self._requested is None:
            self.concurrency = max(1, int(ray.cluster_resources().get("CPU", 1) // self.num_cpus))
        return self

    def __exit__(self, *exc: object) -> None:
        import ray

        self._depth -= 1
        if self._depth:
            return
        for ref in list(self._refs.values()):
            ray.cancel(ref)
        self._refs.clear()
        if self._started:
            ray.shutdown()
            self._started = False
            self._task = None

    def ship(self, app: AppSpec) -> None:
        import ray

        if app.ref is None:
            raise ValueError("the Ray executor needs an app reference (AppSpec.load('module:factory' or "
                             "'file.py:factory')): workers load the app from it")
        env = app_runtime_env(app.ref)
        if ray.is_initialized():
            missing = [k for k in env if k not in ray.get_runtime_context().runtime_env]
            if missing:
                fix = ("ship the app before entering the executor" if self._started else
                       f"start Ray with ray.init(runtime_env=app_runtime_env({app.ref!r}))")
                raise ValueError(f"Ray was initialised without {' and '.join(missing)} in its runtime_env, so workers "
                                 f"cannot import {app.ref}: {fix}")
            return
        if "py_modules" in env:
            env["py_modules"] = list(dict.fromkeys([*self.runtime_env.get("py_modules", ()), *env["py_modules"]]))
        if "working_dir" in self.runtime_env:
            env.pop("working_dir", None)
        self.runtime_env = {**self.runtime_env, **env}

    def submit(self, call: Callable[[], T]) -> "Future[T]":
        import ray

        if self._task is None:
            self._task = ray.remote(_invoke).options(num_cpus=self.num_cpus, max_retries=self.max_retries,
                                                     retry_exceptions=True)
        ref = self._task.remote(call)
        future = ref.future()
        self._refs[future] = ref
        future.add_done_callback(lambda f: self._refs.pop(f, None))
        return future

    def cancel(self, future: Future) -> None:
        import ray

        ref = self._refs.pop(future, None)
        if ref is not None:
            ray.cancel(ref)


def _check_reachable(address: str) -> None:
    """``ValueError`` when nothing listens at a ``host:port`` (or ``ray://host:port``) Ray address:
    ``ray.init`` would retry for many minutes. ``auto`` and ``local`` are Ray's to resolve."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        raise ValueError(f"no Ray cluster answers at {address} ({exc.strerror or exc}): start one there "
                         "(`ray start --head`) or give its address with --ray-address or $RAY_ADDRESS") from None


def _installed(path: str) -> bool:
    """Whether ``path`` lies in this interpreter's installed packages or standard library."""
    roots = {Path(p).resolve() for k, p in sysconfig.get_paths().items() if k in ("purelib", "platlib", "stdlib", "platstdlib")}
    return any(Path(path).resolve().is_relative_to(root) for root in roots)


def app_runtime_env(ref: str) -> dict[str, Any]:
    """The Ray ``runtime_env`` that ships an app's code to workers: a ``file.py`` app's folder as
    ``working_dir`` (its sibling modules come along); a module that is not installed (found
    through ``sys.path``, e.g. the current directory) as ``py_modules``; nothing for installed
    modules and aegis_probe itself, which every node must have installed."""
    target, _ = split_ref(ref)
    if target.endswith(".py"):
        return {"working_dir": str(Path(target).resolve().parent)}
    top = target.partition(".")[0]
    spec = importlib.util.find_spec(top)
    if top == "aegis_probe" or spec is None:
        return {}
    location = spec.submodule_search_locations[0] if spec.submodule_search_locations else spec.origin
    if location is None or _installed(location):
        return {}
    return {"py_modules": [location]}


def add_executor_arguments(parser: argparse.ArgumentParser) -> None:
    """``--executor`` and ``--ray-address`` of the commands that run many independent runs."""
    parser.add_argument("--executor", choices=EXECUTORS, default="local",
                        help="local: threads of this process (default); ray: one Ray task per run (see docs/scale.md)")
    parser.add_argument("--ray-address", metavar="ADDR",
                        help="Ray cluster to use with --executor ray (default: $RAY_ADDRESS, a running local cluster, or a new local one)")


def executor_from_args(args: argparse.Namespace) -> Executor:
    """The executor the command line asks for (``--concurrency`` unset: 1 thread, or the Ray cluster's CPUs)."""
    concurrency = getattr(args, "concurrency", None)
    if args.executor == "ray":
        try:
            import ray  # noqa: F401
        except ImportError as exc:
            raise ValueError("--executor ray needs Ray: pip install 'aegis-probe[scale]'") from exc
        return RayExecutor(args.ray_address, concurrency)
    if args.ray_address:
        raise ValueError("--ray-address needs --executor ray")
    return ThreadExecutor(concurrency or 1)
