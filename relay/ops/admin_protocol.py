"""The admin socket's protocol: one JSON request line, then JSON lines back.

A request is ``{"command": "status" | "metrics" | "snapshot"}`` and nothing else: there is
no argument a caller could use to run SQL or pick a destination. The answer is one line
``{"ok": true, ...}`` or ``{"ok": false, "error": {"code", "message"}}``; a snapshot sends
``{"progress": {"copiedPages", "totalPages"}}`` lines before it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from relay.errors import SnapshotRefused, StoreError
from relay.ops.metrics import relay_metrics
from relay.ops.snapshot import Snapshotter
from relay.ops.status import status_document
from relay.ops.store_sample import StoreSampler

if TYPE_CHECKING:
    from relay.app.runtime import Runtime

COMMANDS: Final = ("status", "metrics", "snapshot")
MAX_REQUEST_BYTES: Final = 1024

Emit = Callable[[dict[str, Any]], None]


def refusal(code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message}}


def encode(answer: dict[str, Any]) -> bytes:
    return json.dumps(answer, separators=(",", ":"), sort_keys=True).encode() + b"\n"


class AdminService:
    def __init__(
        self,
        runtime: Runtime,
        sampler: StoreSampler,
        snapshots: Snapshotter,
        *,
        offline_fake: bool,
    ) -> None:
        self.runtime = runtime
        self.sampler = sampler
        self.snapshots = snapshots
        self.offline_fake = offline_fake
        self.metrics_url: str | None = None  # set once /metrics listens (relay.ops.services)

    def parse(self, line: bytes) -> str | dict[str, Any]:
        """The command of a request line, or the refusal to send back."""
        try:
            request = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the stack
            return refusal("bad_request", 'send one JSON line: {"command": "status"}')
        if not isinstance(request, dict) or set(request) != {"command"}:
            return refusal("bad_request", 'a request is {"command": ...} and nothing else')
        command = request["command"]
        if command not in COMMANDS:
            return refusal("unknown_command", f"commands: {', '.join(COMMANDS)}")
        return str(command)

    def begin_snapshot(self, emit: Emit) -> Any:
        """Start a snapshot, reporting progress through ``emit``: the running task, or
        the refusal (synchronous, so two requests in one loop turn cannot both start)."""
        try:
            return self.snapshots.start(lambda p: emit({"progress": p.to_json()}))
        except SnapshotRefused as err:
            return refusal(err.code, str(err))
        except StoreError as err:
            return refusal("store_error", str(err))

    async def handle(self, line: bytes, emit: Emit) -> dict[str, Any]:
        command = self.parse(line)
        if isinstance(command, dict):
            return command
        if command == "status":
            return status_document(
                self.runtime,
                self.sampler,
                self.snapshots,
                offline_fake=self.offline_fake,
                metrics_url=self.metrics_url,
            )
        if command == "metrics":
            return {"ok": True, "text": relay_metrics(self.runtime).render().decode()}
        started = self.begin_snapshot(emit)
        if isinstance(started, dict):
            return started
        try:
            result = await started
        except SnapshotRefused as err:
            return refusal(err.code, str(err))
        except (StoreError, OSError) as err:
            return refusal("copy_failed", f"the copy failed: {type(err).__name__}")
        return {"ok": True, "snapshot": result.to_json()}
