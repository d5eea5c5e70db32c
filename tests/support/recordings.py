"""The recorded real traffic the tests replay: ``tests/fixtures/cursor-recordings/``.

The one place that names the folder. Each recording is a folder holding the body Cursor
sent (``cursor_request.json``) and the stream the Responses API answered
(``upstream_response.sse``); see the folder's README for where they come from.

Every lister raises :class:`RecordingsMissing` when it finds no recording, or a recording
without both files: a test looping over the recordings must fail then, not pass having
checked nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

RECORDINGS: Final = Path(__file__).resolve().parents[1] / "fixtures" / "cursor-recordings"
REQUEST: Final = "cursor_request.json"
STREAM: Final = "upstream_response.sse"


class RecordingsMissing(FileNotFoundError):
    """The recordings folder is missing, empty or incomplete."""


def folders(root: Path = RECORDINGS) -> list[Path]:
    """Every recording's folder, sorted by name; each holds both files."""
    found = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if not found:
        raise RecordingsMissing(
            f"no recordings under {root}: the folder is part of the repository "
            "(git checkout -- tests/fixtures restores it)"
        )
    for folder in found:
        missing = [name for name in (REQUEST, STREAM) if not (folder / name).is_file()]
        if missing:
            raise RecordingsMissing(f"recording {folder} lacks {', '.join(missing)}")
    return found


def names(root: Path = RECORDINGS) -> list[str]:
    return [folder.name for folder in folders(root)]


def stream_paths(root: Path = RECORDINGS) -> list[Path]:
    """Every recorded upstream SSE stream."""
    return [folder / STREAM for folder in folders(root)]


def request_paths(root: Path = RECORDINGS) -> list[Path]:
    """Every recorded Cursor request body."""
    return [folder / REQUEST for folder in folders(root)]


def folder(name: str, root: Path = RECORDINGS) -> Path:
    """One recording's folder, by name."""
    path = root / name
    if path not in folders(root):
        raise RecordingsMissing(f"no recording named {name!r} under {root}")
    return path


def stream_path(name: str) -> Path:
    return folder(name) / STREAM


def request_path(name: str) -> Path:
    return folder(name) / REQUEST


def load_request(path: Path) -> dict[str, Any]:
    """A recorded request body (``path``: a recording's folder or its request file)."""
    if path.is_dir():
        path = path / REQUEST
    body: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return body
