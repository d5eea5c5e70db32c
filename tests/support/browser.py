"""Headless Chromium for tests, with no Python dependency: the ``chromium`` binary (Debian's
package, installed by ``nox``'s system packages) run once per page.

``dump_dom`` is the DOM after the page has loaded (what a person's browser would build
from it, not the bytes the server sent); ``screenshot`` keeps a PNG under
``test-artifacts/`` (gitignored) for a person to look at.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
ARTIFACTS: Final = ROOT / "test-artifacts"
CANDIDATES: Final = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT_S: Final = 60


def find_chromium() -> str | None:
    """The browser's path (``RELAY_TEST_CHROMIUM`` first), or ``None``."""
    explicit = os.environ.get("RELAY_TEST_CHROMIUM")
    if explicit:
        return shutil.which(explicit)
    for name in CANDIDATES:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


def _run(binary: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    # A profile of its own per run: no state shared with a person's browser or another test.
    with tempfile.TemporaryDirectory(prefix="relay-chromium-") as profile:
        command = [
            binary,
            "--headless=new",
            "--no-sandbox",  # containers and CI users cannot set up the setuid sandbox
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",  # nothing leaves the machine but the page load
            "--disable-component-update",
            "--disable-sync",
            "--metrics-recording-only",
            f"--user-data-dir={profile}",
            *args,
        ]
        done = subprocess.run(command, capture_output=True, timeout=TIMEOUT_S, check=False)
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace")[-2000:]
        raise RuntimeError(f"chromium exited {done.returncode}: {tail}")
    return done


def dump_dom(binary: str, url: str) -> str:
    """The serialized DOM of ``url`` once loaded."""
    return _run(binary, "--dump-dom", url).stdout.decode("utf-8")


def screenshot(binary: str, url: str, name: str, *, size: str = "1280,2000") -> Path:
    """A PNG of ``url`` at ``test-artifacts/<name>``; its path."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    path.unlink(missing_ok=True)
    _run(binary, f"--screenshot={path}", f"--window-size={size}", "--hide-scrollbars", url)
    if not path.is_file() or path.stat().st_size == 0:
        raise RuntimeError(f"chromium wrote no screenshot at {path}")
    return path
