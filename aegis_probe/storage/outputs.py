"""Writing an output file whole or not at all, without ever renaming over or unlinking anything
but a regular file of our own.

:func:`replacing` yields the path to write: for a regular file (or a new one) a temporary file
beside it, renamed over it once the block ends without an error; for a device or a FIFO named as
the output (``--out /dev/null``, a pipe) the output itself, written in place, since renaming a
file over it would replace the device with a regular file. A socket, or a temporary name taken by
something other than a regular file, is refused (``OSError`` naming it).
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def special(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` (through a symlink) is neither a regular file, a directory, nor absent: a
    character or block device, a FIFO, a socket."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


#: The errors of a failed ``write()``, which names no file: raised naming the output.
_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EIO, errno.EDQUOT, errno.EROFS, errno.EPIPE})


@contextmanager
def _naming(out: Path, tmp: Path) -> Iterator[None]:
    """An ``OSError`` of writing (one naming ``tmp``, or a failed ``write()``'s, which names no
    file) raised naming ``out``."""
    try:
        yield
    except OSError as exc:
        if exc.filename in (tmp, str(tmp)) or (exc.filename is None and exc.errno in _WRITE_ERRORS):
            raise OSError(exc.errno, exc.strerror, str(out)) from None  # (OSError picks the errno's subclass)
        raise


@contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """The path to write ``path``'s content to (its folder made): a temporary file beside it that
    replaces it (through a symlink: its target, keeping its permissions) when the block ends
    without an error and is removed otherwise; or, for a device or FIFO, ``path`` itself.
    A failed write is an ``OSError`` naming ``path``."""
    out = Path(path)
    if special(out):
        if stat.S_ISSOCK(os.stat(out).st_mode):
            raise OSError(errno.EINVAL, "a socket, not a file to write", str(out))
        with _naming(out, out):
            yield out
        return
    target = out.resolve() if out.is_symlink() else out
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")  # one fixed name: a killed run's leftover is replaced, not piled up
    if os.path.lexists(tmp) and not _regular(tmp):
        raise OSError(errno.EEXIST, "the temporary name beside the output is taken by something not a regular file", str(tmp))
    try:
        with _naming(out, tmp):
            tmp.unlink(missing_ok=True)
            yield tmp
            if target.exists():
                os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))
            os.replace(tmp, target)
    finally:
        if _regular(tmp):
            tmp.unlink()
