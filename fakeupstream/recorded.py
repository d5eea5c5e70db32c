"""What the fake keeps of each request it served: :class:`RecordedRequest`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RecordedRequest:
    """One request as the fake saw it, and what it sent back (updated while sending)."""

    method: str
    path: str
    headers: dict[str, str]
    received_at: float  # wall clock
    peer: str = ""  # the client's address and port: equal on one reused connection
    body: Any = None  # parsed JSON; None when it did not parse
    continuity: dict[str, Any] | None = None  # ContinuityReport / ChatContinuity .to_json()
    status: int | None = None
    stream: bool = False
    events: list[Any] = field(default_factory=list)  # SSE events fully sent, parsed
    response: Any = None  # the JSON body sent (Response or error envelope)
    sent_bytes: int = 0
    ended: str | None = None  # finish | close | reset | hang | client_gone | stopped

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
