"""Files only the node's user may read: created mode 0600 whatever the umask, their directory
entry made durable. What the store (and its WAL and shared-memory files) is built on."""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

__all__ = ["PRIVATE_MODE", "create_private", "fsync_directory", "restrict_side_files"]

#: Mode of every private file.
PRIVATE_MODE = 0o600


def create_private(file: Path) -> bool:
    """Create ``file`` empty with mode 0600 (whatever the umask); ``False`` if it exists.

    :raises OSError: it cannot be created or its mode cannot be set.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(file, flags, PRIVATE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, PRIVATE_MODE)
    finally:
        os.close(fd)
    return True


def fsync_directory(directory: Path) -> None:
    """Make a newly created file's directory entry durable (best effort, POSIX only)."""
    with suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def restrict_side_files(database: Path) -> None:
    """Set the ``-wal`` and ``-shm`` files sqlite keeps beside ``database`` to mode 0600 (those
    that exist).

    :raises OSError: a mode cannot be set (``filename`` is that side file).
    """
    for suffix in ("-wal", "-shm"):
        side = database.with_name(database.name + suffix)
        try:
            os.chmod(side, PRIVATE_MODE)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(side)) from None
