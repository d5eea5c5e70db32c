"""A size-limited tmpfs for tests that need a real full disk (real ``ENOSPC``; root only,
skipped with the reason elsewhere). It lives in its own scenario temp dir, so a sweep after
a killed run finds it (scenarios.faults.disk)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from scenarios.faults.disk import DiskFaultUnavailable, TmpfsMount, temp_prefix, tmpfs_missing


@contextmanager
def size_limited_tmpfs(size_bytes: int) -> Iterator[TmpfsMount]:
    """A fresh, empty tmpfs of ``size_bytes`` (mode 0700) mounted at ``<temp>/data``."""
    if (reason := tmpfs_missing()) is not None:
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix=temp_prefix()))
    mount = TmpfsMount(root / "data", size_bytes)
    try:
        try:
            mount.mount()
        except DiskFaultUnavailable as exc:
            pytest.skip(str(exc))
        yield mount
    finally:
        mount.unmount()
        shutil.rmtree(root, ignore_errors=True)
