"""A real, small filesystem for tests of what a node does when its disk fills up: a tmpfs
mounted on a fresh directory (root only; elsewhere the test is skipped and says why)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(parent: Path, kib: int) -> Iterator[Path]:
    """Mount a tmpfs of ``kib`` KiB on a new directory under ``parent``, yield the
    directory and unmount it on exit (whatever the test left on it is gone).

    Skips the test when this process may not mount (not root, no ``mount``, or a sandbox
    without the capability)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = parent / f"disk-{kib}k"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={kib}k,mode=0700", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=False)
