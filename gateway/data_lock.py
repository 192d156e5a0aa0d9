"""One data dir, one owner: an exclusive ``flock`` on ``<data_dir>/gateway.lock``.

Two ``gateway serve`` processes on one SQLite data dir each adopted the other's pending
calls and both ran an approved DELETE (issue 12). The lock is held by an open file
description, so the kernel releases it when the process ends in any way (kill -9
included): a lock file left on disk is never stale, and nothing has to clean it up.
The holder writes its pid into the file, so the refused process can say whom it met.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from config.settings import ConfigError

LOCK_FILE = "gateway.lock"


class DataDirInUse(ConfigError):
    """Another live process holds the data dir: one line saying which, and what to do."""

    def __init__(self, data_dir: Path, pid: int | None, *, instead: str | None = None) -> None:
        """``instead``: what the refused command can do rather than take the data dir
        (``gateway chat``: talk to the running daemon)."""
        who = f"pid {pid}" if pid is not None else "a process that has not written its pid yet"
        fix = instead or (
            "stop that one, or set GATEWAY_DATA_DIR (or data_dir) to another directory"
        )
        super().__init__(f"data_dir {data_dir} is in use by another gateway ({who}): {fix}")
        self.data_dir = data_dir
        self.pid = pid


class DataDirLock:
    """The held lock; ``release()`` (or process death) lets the next owner in."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirLock:
        """Take the data dir, or raise DataDirInUse naming the holder's pid."""
        path = data_dir / LOCK_FILE
        # os.open's descriptors are not inherited (O_CLOEXEC): a child process (an SDK's
        # helper, a plugin's subprocess) must not keep the lock after we die.
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise DataDirInUse(data_dir, pid) from None
        except BaseException:
            os.close(fd)
            raise
        # Never unlink the file on release: a process that opened it just before would
        # lock the unlinked inode while a third locks a new file, and both would own.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Closing the descriptor drops the lock. Idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _read_pid(fd: int) -> int | None:
    raw = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(raw) if raw.isdigit() else None
