"""Small file helpers shared by the token cache, run records, checkpoints and the results store.

* :func:`atomic_write` / :func:`atomic_open` — readers see the old file or the new one, never a partial one; a
  device, FIFO or folder in the path's place is refused, never replaced;
* :func:`check_writable_folder` — fail before any work when a folder cannot be written (a file in the way,
  read-only, a full disk);
* :func:`folder_lock` — one writer per output folder (a ``filelock`` lock the operating system releases when
  the process dies, even by ``kill -9``);
* :func:`read_bounded` / :func:`open_bounded` — every file that comes from elsewhere (a config, a run record, an
  archive, a store entry) is read bounded in bytes and time: its kind and size are checked with ``stat`` before
  any byte is read, so a device (``/dev/zero``), a FIFO, a folder or a file over the limit is refused at once;
* :func:`expand_user` — ``~`` and ``~user`` expanded, with a one-line error for a user that does not exist.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import filelock

LOCK_NAME = ".spanviz.lock"
"""The lock file :func:`folder_lock` keeps in a folder."""


def _umask() -> int:
    """The process's file-creation mask (read from /proc where it can be, so it is never changed, even briefly)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_open(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary handle whose bytes replace ``path`` when the ``with`` block ends without an error.

    Written into a temporary file in the same folder, flushed to disk, then ``os.replace``-d: readers see the old
    file or the new one, never a partial one; on any error the temporary file is removed and the old file is left
    as it was. Creates the parent folder. For output written a piece at a time (an archive, one run after another);
    :func:`atomic_write` writes bytes already in memory.

    Permissions as a plain ``open(path, "w")`` gives them: a file that exists keeps its mode, a new one gets
    ``0o666`` less the umask (``0o644`` under the usual umask 022, group-readable) — not the ``0o600`` of the
    temporary file.

    A path that exists and is not a regular file (a device such as ``/dev/full`` or ``/dev/null``, a FIFO, a
    socket, a folder; followed through symbolic links) is refused before anything is written, and again just
    before the replace: it is never replaced by a file.

    Raises:
        NotAFileError (a ValueError): ``path`` is a device, FIFO, socket or folder.
        OSError: the folder or the file cannot be written.
    """
    path = Path(path)
    mode = _writable_file_mode(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(handle, mode)
        with os.fdopen(handle, "wb") as temp:
            yield temp
            temp.flush()
            os.fsync(temp.fileno())
        _writable_file_mode(path)  # swapped in meanwhile?
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


class NotAFileError(ValueError):
    """A path to write a file to names something else (a device, a FIFO, a socket, a folder)."""


def check_file_target(path: str | os.PathLike[str], what: str | None = None) -> None:
    """Fail unless a file may be written at ``path``: it is missing or a regular file (symbolic links followed).

    Raises:
        NotAFileError (a ValueError): ``path`` is a device, FIFO, socket or folder, naming ``what`` (default: the
            path).
    """
    _writable_file_mode(Path(path), what)


def _writable_file_mode(path: Path, what: str | None = None) -> int:
    """The mode a file written at ``path`` gets (see :func:`atomic_open`); refuses a path that is not a file."""
    try:
        st = os.stat(path)
    except OSError:  # missing (or unreachable: the write says why)
        return 0o666 & ~_umask()
    if not stat.S_ISREG(st.st_mode):
        raise NotAFileError(f"{what or path}: is {_kind(st.st_mode)}, not a regular file: give the path of a file "
                            "to write")
    return stat.S_IMODE(st.st_mode)


def atomic_write(path: str | os.PathLike[str], payload: bytes) -> Path:
    """Write ``payload`` to ``path`` atomically, with the permissions a plain write gives (see :func:`atomic_open`).

    Readers see the old file or the new one, never a partial one; on any error the temporary file is removed
    and the old file is left as it was. Creates the parent folder. Returns the path.

    Raises:
        NotAFileError (a ValueError): ``path`` is a device, FIFO, socket or folder. OSError: it cannot be written.
    """
    with atomic_open(path) as handle:
        handle.write(payload)
    return Path(path)


def _why(error: OSError) -> str:
    reasons = {errno.EACCES: "permission denied", errno.EPERM: "permission denied", errno.EROFS: "read-only",
               errno.ENOSPC: "the disk is full", errno.ENOTDIR: "a file is in the way",
               errno.EEXIST: "a file is in the way", errno.EDQUOT: "over the disk quota"}
    return reasons.get(error.errno, error.strerror or type(error).__name__)


def check_writable_folder(path: str | os.PathLike[str], what: str, *, need_bytes: int = 0) -> Path:
    """Make sure ``path`` is a folder this process can write, creating it (and its parents) if needed.

    Writes and removes a small probe file, and, with ``need_bytes``, checks that the disk has that much free
    space (plus 1 MiB).

    Args:
        path: the folder. what: how to name it in messages, e.g. ``"--out runs/demo"`` or
            ``"SPANVIZ_HOME=/data/sv"``. need_bytes: free space required [bytes], >= 0.
    Returns:
        The folder as a ``Path``.
    Raises:
        ValueError: one sentence naming ``what``, the folder and the reason (a file in the way, permission
            denied, read-only, the disk is full).
    """
    folder = expand_user(path, what)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{what}: {folder} is a file, not a folder; choose a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".spanviz-write-test.")
        try:
            os.write(handle, b"spanviz")
        finally:
            os.close(handle)
            Path(probe).unlink(missing_ok=True)
    except OSError as error:
        raise ValueError(f"{what}: cannot write to {folder} ({_why(error)}); choose a folder you can write") from None
    if need_bytes > 0:
        free = shutil.disk_usage(folder).free
        if free < need_bytes + 2**20:
            raise ValueError(f"{what}: {folder} has {free / 2**20:.1f} MiB free but about "
                             f"{need_bytes / 2**20:.1f} MiB are needed; free some space or choose another folder")
    return folder


class FolderInUseError(ValueError):
    """Another process holds the lock of an output folder (see :func:`folder_lock`)."""


@contextmanager
def folder_lock(folder: str | os.PathLike[str], what: str) -> Iterator[Path]:
    """Hold an exclusive lock on ``folder`` (its file :data:`LOCK_NAME`) for the block; never waits.

    The lock is an OS file lock (``filelock``): it is released when the block ends, and by the operating
    system when the process dies in any way (Ctrl-C, ``kill -9``), so a crashed run never leaves a stale lock.

    Raises:
        FolderInUseError: another process (or another lock in this process) holds the folder.
    """
    folder = Path(folder)
    lock = filelock.FileLock(folder / LOCK_NAME, timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise FolderInUseError(f"{what}: {folder} is in use by another spanviz process (it holds "
                               f"{folder / LOCK_NAME}); wait for it to finish or choose another folder") from None
    try:
        yield folder
    finally:
        lock.release()


class UnreadableFileError(ValueError):
    """A file that cannot be read within the limits: missing, not a regular file, too large, or unreadable."""


def expand_user(path: str | os.PathLike[str], what: str) -> Path:
    """``Path(path).expanduser()``, with a one-line error naming ``what`` instead of ``RuntimeError``.

    Raises:
        ValueError: ``path`` starts with ``~user`` and there is no such user (or no home folder is known).
    """
    try:
        return Path(path).expanduser()
    except RuntimeError:
        user = str(path).split("/", 1)[0]
        raise ValueError(f"{what}: {user} names no user with a home folder on this machine; give an absolute "
                         "path") from None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _checked_stat(st: os.stat_result, what: str, max_bytes: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableFileError(f"{what}: is {_kind(st.st_mode)}, not a regular file")
    if st.st_size > max_bytes:
        raise UnreadableFileError(f"{what}: {st.st_size:,} bytes, more than the {max_bytes:,} allowed")


@contextmanager
def open_bounded(path: str | os.PathLike[str], max_bytes: int, what: str | None = None) -> Iterator[BinaryIO]:
    """Open a regular file of at most ``max_bytes`` for reading, checked with ``stat`` before it is opened.

    Opened without blocking (a FIFO swapped in after the check cannot hang it) and checked again on the open
    handle. The handle never gives more than ``max_bytes`` + 1 bytes without the caller noticing: callers
    read at most that much.

    Args:
        path: the file. max_bytes: the largest size allowed [bytes]. what: how to name it in messages
            (default: the path).
    Raises:
        UnreadableFileError (a ValueError): missing, a folder, a device, a FIFO or socket, larger than
            ``max_bytes``, or unreadable — one line naming ``what``.
    """
    what = what or str(path)
    try:
        _checked_stat(os.stat(path), what, max_bytes)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UnreadableFileError(f"{what}: no such file") from None
    except OSError as error:
        raise UnreadableFileError(f"{what}: cannot be read ({_why(error)})") from None
    try:
        _checked_stat(os.fstat(fd), what, max_bytes)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_bounded(path: str | os.PathLike[str], max_bytes: int, what: str | None = None) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; see :func:`open_bounded` (same errors)."""
    what = what or str(path)
    with open_bounded(path, max_bytes, what) as handle:
        try:
            payload = handle.read(max_bytes + 1)
        except OSError as error:
            raise UnreadableFileError(f"{what}: cannot be read ({_why(error)})") from None
    if len(payload) > max_bytes:  # it grew after the check
        raise UnreadableFileError(f"{what}: more than the {max_bytes:,} bytes allowed")
    return payload


__all__ = ["LOCK_NAME", "FolderInUseError", "NotAFileError", "UnreadableFileError", "atomic_open", "atomic_write",
           "check_file_target", "check_writable_folder", "expand_user", "folder_lock", "open_bounded", "read_bounded"]
