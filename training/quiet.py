"""Keep long jobs readable: the apps' third-party chatter (framework log lines, warnings, the
tracebacks they log for failed injected runs) goes to a log file, while progress bars stay on the
terminal."""

from __future__ import annotations

import os
import sys
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TextIO


@contextmanager
def stderr_to(log_path: str | Path) -> Iterator[TextIO]:
    """Send everything written to stderr (file descriptor 2 and ``sys.stderr``) to ``log_path``
    (appended) until the block ends; yields a stream on the real stderr for progress output."""
    path = Path(log_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved_fd, saved_stream = os.dup(2), sys.stderr
    real = os.fdopen(os.dup(saved_fd), "w", buffering=1, encoding="utf-8", errors="replace")
    with open(path, "a", buffering=1, encoding="utf-8", errors="replace") as log, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        os.dup2(log.fileno(), 2)
        sys.stderr = log
        try:
            yield real
        finally:
            sys.stderr.flush()
            sys.stderr = saved_stream
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            real.close()


@contextmanager
def polled_progress(count: Callable[[], int], total: int, desc: str, stream: TextIO, every: float = 0.5) -> Iterator[None]:
    """A tqdm bar on ``stream`` that follows ``count()`` (polled every ``every`` seconds) up to ``total``."""
    from tqdm import tqdm

    stop = threading.Event()
    bar = tqdm(total=total, desc=desc, unit="run", file=stream)

    def poll() -> None:
        while not stop.wait(every):
            bar.update(max(0, min(count(), total) - bar.n))

    thread = threading.Thread(target=poll, name="aegis-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        bar.update(max(0, min(count(), total) - bar.n))
        bar.close()
