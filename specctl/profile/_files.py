"""Reading the files a user names (profiles, extends targets, manifests, inventories, workloads).

A path in a profile can point anywhere: at a directory, a FIFO that never gets a writer, /dev/zero,
a symlink loop or a file of gigabytes. Each of those must be a clear input error, so a file is read
only when it is a regular file under a size limit, judged by stat before it is opened and again on
the open descriptor (opened non-blocking, so a FIFO swapped in between cannot hang the read).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from specctl.errors import DocumentError, DocumentProblem

MAX_DOCUMENT_BYTES = 1 << 20  # a profile, manifest or inventory; the largest shipped one is about 2 KiB
MAX_WORKLOAD_BYTES = 16 << 20  # a JSONL prompt set, copied into every release directory


@dataclass(frozen=True)
class Refusal:
    """Why a path cannot be read as an input file, said so that it reads after the path's name."""

    message: str
    fix: str
    missing: bool = False  # nothing is there (as opposed to something unreadable)


def refusal(path: Path | str, limit: int) -> Refusal | None:
    """Why `path` cannot be read as an input file of at most `limit` bytes, judged by stat alone; None if it can."""
    try:
        return _judge(os.stat(path), limit)
    except (OSError, ValueError) as exc:
        return _os_refusal(exc)


def read_bounded(path: Path | str, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; anything else is a DocumentError naming the file."""
    found = refusal(path, limit)
    if found is not None:
        raise _error(path, found)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError) as exc:
        raise _error(path, _os_refusal(exc)) from None
    try:
        found = _judge(os.fstat(fd), limit)  # the path may have been swapped since the stat above
        if found is not None:
            raise _error(path, found)
        chunks = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _error(path, _os_refusal(exc)) from None
    finally:
        os.close(fd)
    if size > limit:  # it grew while being read
        raise _error(path, _too_large(size, limit))
    return b"".join(chunks)


def _judge(st: os.stat_result, limit: int) -> Refusal | None:
    if stat.S_ISDIR(st.st_mode):
        return Refusal("is a directory, not a file", "point at a file inside it")
    if not stat.S_ISREG(st.st_mode):
        return Refusal(
            f"is a {_file_type(st.st_mode)}, not a regular file",
            "point at a regular file (specctl does not read devices, FIFOs or sockets)",
        )
    if st.st_size > limit:
        return _too_large(st.st_size, limit)
    return None


def _too_large(size: int, limit: int) -> Refusal:
    return Refusal(
        f"is {size} bytes, over the limit of {limit} bytes for this kind of file",
        "point at the intended file; real ones are far smaller",
    )


def _file_type(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "special file"


def _os_refusal(exc: OSError | ValueError) -> Refusal:
    if isinstance(exc, ValueError):  # os functions refuse a NUL in a path this way
        return Refusal("is not a usable path: it contains a NUL character", "remove the NUL character from the path")
    if exc.errno == errno.ENOENT:
        return Refusal("file not found", "check the path", missing=True)
    if exc.errno == errno.ELOOP:
        return Refusal("cannot be resolved: a loop of symbolic links", "fix the symbolic link to point at a file")
    if exc.errno == errno.EISDIR:
        return Refusal("is a directory, not a file", "point at a file inside it")
    if exc.errno == errno.ENOTDIR:
        return Refusal("file not found (a part of the path is not a directory)", "check the path", missing=True)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return Refusal("cannot be read: permission denied", "make the file readable for this user")
    if exc.errno == errno.ENAMETOOLONG:
        return Refusal("is not a usable path: the name is too long", "shorten the path")
    return Refusal(f"cannot be read: {exc.strerror or exc}", "check the path and the file")


def _error(path: Path | str, found: Refusal) -> DocumentError:
    return DocumentError([DocumentProblem(str(path), None, None, "", found.message, found.fix)])
