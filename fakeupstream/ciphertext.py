"""The fake model's ``encrypted_content``: minting, verifying, and the continuity probe.

A token looks like OpenAI's (a Fernet-shaped, url-safe base64 string starting ``gAAAAA``)
and is just as opaque to the relay::

    0x80 | issued_at (8 bytes) | nonce (16) | payload XOR keystream | HMAC-SHA256 tag (32)

The payload names a random *secret* and the items minted right after the reasoning item in
the same response (its *followers*). The tag binds the token to the API key, the model and
the reasoning item's id, so a token replayed under another key, model or id, or altered in
any byte, does not verify. This is a test fixture, not cryptography.

The continuity probe (:func:`probe`) looks at the reasoning items a request replays:
each one is ``invalid`` (does not verify), ``intact`` (verifies and is immediately followed
by its followers, in order) or ``misplaced`` (verifies but sits elsewhere). A follower
matches an input item by id, or, because relays usually drop output ids, a function call by
its ``call_id`` and an assistant message by its exact text.

:class:`Ledger` is the fake's memory of what it minted: which items require which reasoning
item, and what was stored (``store: true``) for later references by id.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

_VERSION = b"\x80"
_NONCE = 16
_TAG = 32
_HEADER = 1 + 8 + _NONCE


@dataclass(frozen=True)
class Follower:
    """An item minted after a reasoning item in the same response."""

    kind: str  # "message" | "function_call" | "reasoning" | other output item type
    item_id: str
    key: str  # call_id of a function call, text digest of a message, else ""


@dataclass(frozen=True)
class Sealed:
    """What a token carries once opened."""

    secret: str
    followers: tuple[Follower, ...]


def text_digest(text: str) -> str:
    """Short digest of a message's visible text, so the token does not carry the text."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Cipher:
    """Seals and opens tokens under one HMAC key (the fake's secret)."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("the ciphertext secret must be at least 16 bytes")
        self._key = key

    def seal(
        self,
        sealed: Sealed,
        *,
        api_key: str,
        model: str,
        item_id: str,
        nonce: bytes,
        issued_at: int,
    ) -> str:
        if len(nonce) != _NONCE:
            raise ValueError(f"nonce must be {_NONCE} bytes")
        payload = json.dumps(
            {"s": sealed.secret, "f": [[f.kind, f.item_id, f.key] for f in sealed.followers]},
            separators=(",", ":"),
        ).encode()
        header = _VERSION + issued_at.to_bytes(8, "big") + nonce
        body = header + _xor(payload, self._keystream(nonce, len(payload)))
        tag = self._tag(body, api_key=api_key, model=model, item_id=item_id)
        return base64.urlsafe_b64encode(body + tag).decode()

    def open(self, token: str, *, api_key: str, model: str, item_id: str) -> Sealed | None:
        """The token's contents, or None when it was not minted for exactly this binding."""
        try:
            raw = base64.urlsafe_b64decode(token.encode("ascii"))
        except (binascii.Error, UnicodeEncodeError, ValueError):
            return None
        if len(raw) < _HEADER + _TAG or raw[:1] != _VERSION:
            return None
        body, tag = raw[:-_TAG], raw[-_TAG:]
        expected = self._tag(body, api_key=api_key, model=model, item_id=item_id)
        if not hmac.compare_digest(tag, expected):
            return None
        nonce = body[9:_HEADER]
        ciphertext = body[_HEADER:]
        try:
            data = json.loads(_xor(ciphertext, self._keystream(nonce, len(ciphertext))))
            followers = tuple(Follower(str(k), str(i), str(d)) for k, i, d in data["f"])
            return Sealed(secret=str(data["s"]), followers=followers)
        except (ValueError, KeyError, TypeError):
            return None  # a valid tag over garbage cannot happen unless the key leaked

    def _tag(self, body: bytes, *, api_key: str, model: str, item_id: str) -> bytes:
        # The key is hashed so the binding never needs the key itself in memory twice.
        binding = "\0".join([hashlib.sha256(api_key.encode()).hexdigest(), model, item_id])
        return hmac.new(self._key, binding.encode() + b"\0" + body, hashlib.sha256).digest()

    def _keystream(self, nonce: bytes, length: int) -> bytes:
        blocks = []
        for counter in range((length + 31) // 32):
            block = b"stream" + nonce + counter.to_bytes(4, "big")
            blocks.append(hmac.new(self._key, block, hashlib.sha256).digest())
        return b"".join(blocks)[:length]


def _xor(data: bytes, stream: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, stream, strict=True))


# --- continuity probe ----------------------------------------------------------------

Placement = Literal["intact", "misplaced", "invalid"]


@dataclass(frozen=True)
class ReplayedReasoning:
    index: int  # position in the request's input
    item_id: str
    placement: Placement
    secret: str | None


@dataclass(frozen=True)
class ContinuityReport:
    items: tuple[ReplayedReasoning, ...] = ()

    def count(self, placement: Placement) -> int:
        return sum(1 for item in self.items if item.placement == placement)

    @property
    def secrets(self) -> list[str]:
        return [item.secret for item in self.items if item.secret is not None]

    def summary(self) -> str:
        return (
            f"continuity: replayed={len(self.items)} intact={self.count('intact')} "
            f"misplaced={self.count('misplaced')}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "replayed": len(self.items),
            "intact": self.count("intact"),
            "misplaced": self.count("misplaced"),
            "invalid": self.count("invalid"),
            "secrets": self.secrets,
            "items": [
                {"index": i.index, "id": i.item_id, "placement": i.placement, "secret": i.secret}
                for i in self.items
            ],
        }


Opener = Callable[[str, str], Sealed | None]  # (item_id, token) -> contents


def probe(items: Sequence[Any], open_token: Opener) -> ContinuityReport:
    """Classify every reasoning item in ``items`` that carries ``encrypted_content``."""
    found = []
    for index, item in enumerate(items):
        if not _is_replayed_reasoning(item):
            continue
        item_id = item.get("id")
        item_id = item_id if isinstance(item_id, str) else ""
        sealed = open_token(item_id, item["encrypted_content"])
        if sealed is None:
            found.append(ReplayedReasoning(index, item_id, "invalid", None))
            continue
        in_place = _followed_by(items, index + 1, sealed.followers)
        placement: Placement = "intact" if in_place else "misplaced"
        found.append(ReplayedReasoning(index, item_id, placement, sealed.secret))
    return ContinuityReport(tuple(found))


def _is_replayed_reasoning(item: Any) -> bool:
    return (
        isinstance(item, Mapping)
        and item.get("type") == "reasoning"
        and isinstance(item.get("encrypted_content"), str)
    )


def _followed_by(items: Sequence[Any], start: int, followers: Iterable[Follower]) -> bool:
    position = start
    for follower in followers:
        if position >= len(items) or not _matches(items[position], follower):
            return False
        position += 1
    return True


def _matches(item: Any, follower: Follower) -> bool:
    if not isinstance(item, Mapping):
        return False
    if item.get("id") == follower.item_id:
        return True
    kind = item.get("type", "message")
    if follower.kind == "function_call" and kind == "function_call":
        return bool(follower.key) and item.get("call_id") == follower.key
    if follower.kind == "message" and kind == "message" and item.get("role") == "assistant":
        return text_digest(message_text(item)) == follower.key
    return False


def message_text(item: Mapping[str, Any]) -> str:
    """The visible text of a message item, whatever content form it uses."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    parts = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, Mapping):
            value = part.get("text", part.get("refusal"))
            if isinstance(value, str):
                parts.append(value)
    return "".join(parts)


# --- what the fake minted ------------------------------------------------------------


@dataclass
class Ledger:
    """Ids the fake minted: which reasoning item each output item needs, what was stored."""

    requires: dict[str, str] = field(default_factory=dict)  # item id -> reasoning item id
    stored_items: dict[str, dict[str, Any]] = field(default_factory=dict)
    stored_responses: dict[str, None] = field(default_factory=dict)  # ordered set
    limit: int = 100_000  # per table; the oldest entries go first (a long-running fake)

    def record(self, response_id: str, output: Sequence[Mapping[str, Any]], *, store: bool) -> None:
        reasoning_id: str | None = None
        for item in output:
            item_id = str(item["id"])
            if item["type"] == "reasoning":
                reasoning_id = item_id
            elif reasoning_id is not None:
                self.requires[item_id] = reasoning_id
            if store:
                self.stored_items[item_id] = dict(item)
        if store:
            self.stored_responses[response_id] = None
        for table in (self.requires, self.stored_items, self.stored_responses):
            while len(table) > self.limit:
                del table[next(iter(table))]

    def clear(self) -> None:
        self.requires.clear()
        self.stored_items.clear()
        self.stored_responses.clear()
