"""The fake model's ``encrypted_content``: minting, verifying, and the continuity probe.

A token looks like OpenAI's (a Fernet-shaped, url-safe base64 string starting ``gAAAAA``)
and is just as opaque to the relay::

    0x80 | issued_at (8 bytes) | nonce (16) | payload XOR keystream | HMAC-SHA256 tag (32)

The payload names a random *secret*, the items minted right after the reasoning item in
the same response (its *followers*) and a digest of the *history* it was generated after.
The tag binds the token to the API key, the model and the reasoning item's id, so a token
replayed under another key, model or id, or altered in any byte, does not verify. This is
a test fixture, not cryptography.

The history digest (:class:`History`) covers what the model saw before it reasoned: the
request's ``instructions`` (and ``previous_response_id``, if any), the request's input
items and whatever the same response showed before the reasoning item, all in their
*visible* form, so one conversation digests equally whether its earlier turns are sent as
plain visible items or as replayed original items: reasoning items are skipped; a user,
system or developer message is its role and text (string or text parts, images by their
url); a run of consecutive assistant-side items (assistant messages, function and custom
tool calls) is one assistant turn: the messages' text joined, and each call's ``call_id``,
``name`` and ``arguments`` (JSON re-serialized with sorted keys when it parses) or, tagged
as custom, its raw ``input``; a ``function_call_output`` (a ``custom_tool_call_output``,
tagged) is its ``call_id`` and output. Ids, ``status``, ``phase`` and
content-part decorations do not count.

The continuity probe (:func:`probe`) looks at the reasoning items a request replays:
each one is ``invalid`` (does not verify), ``intact`` (verifies, is immediately followed
by its followers, in order, and comes after the same visible history it was generated
after) or ``misplaced`` (verifies but sits elsewhere: ``reason`` ``"followers"`` when its
followers are not right after it, ``"history"`` when what precedes it differs -- an edited
or dropped earlier message, a different tool result, other instructions). Real models
silently ignore reasoning replayed into a conversation it was not generated for. A
follower matches an input item by id, or, because relays usually drop output ids, a
function (custom tool) call by a function (custom tool) call's ``call_id`` and an
assistant message by its exact text. Tool results
that answer a block's calls come after the block, so they belong to the next generation's
history, not to the block's.

:class:`Ledger` is the fake's memory of what it minted: which items require which reasoning
item, and what was stored (``store: true``) for later references by id.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

_VERSION = b"\x80"
_NONCE = 16
_TAG = 32
_HEADER = 1 + 8 + _NONCE
# Tokens opened, remembered per Cipher (so per key): a client replays the same tokens every
# turn, and a token's contents are a pure function of its bytes and binding.
_OPENED_MEMO = 4096


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
    # History.digest() before the item was generated; None: not sealed, so not checked.
    history: str | None = None


def text_digest(text: str) -> str:
    """Short digest of a message's visible text, so the token does not carry the text."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Cipher:
    """Seals and opens tokens under one HMAC key (the fake's secret)."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("the ciphertext secret must be at least 16 bytes")
        self._key = key
        self._opened: OrderedDict[tuple[str, str, str, str], Sealed | None] = OrderedDict()

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
        contents: dict[str, Any] = {
            "s": sealed.secret,
            "f": [[f.kind, f.item_id, f.key] for f in sealed.followers],
        }
        if sealed.history is not None:
            contents["h"] = sealed.history
        payload = json.dumps(contents, separators=(",", ":")).encode()
        header = _VERSION + issued_at.to_bytes(8, "big") + nonce
        body = header + _xor(payload, self._keystream(nonce, len(payload)))
        tag = self._tag(body, api_key=api_key, model=model, item_id=item_id)
        return base64.urlsafe_b64encode(body + tag).decode()

    def open(self, token: str, *, api_key: str, model: str, item_id: str) -> Sealed | None:
        """The token's contents, or None when it was not minted for exactly this binding."""
        key = (token, api_key, model, item_id)
        if key in self._opened:
            self._opened.move_to_end(key)
            return self._opened[key]
        sealed = self._open(token, api_key=api_key, model=model, item_id=item_id)
        self._opened[key] = sealed
        if len(self._opened) > _OPENED_MEMO:
            self._opened.popitem(last=False)
        return sealed

    def _open(self, token: str, *, api_key: str, model: str, item_id: str) -> Sealed | None:
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
            history = data.get("h")
            return Sealed(
                secret=str(data["s"]),
                followers=followers,
                history=history if isinstance(history, str) else None,
            )
        except (ValueError, KeyError, TypeError):
            return None  # a valid tag over garbage cannot happen unless the key leaked

    # hmac.digest: the one-shot form (C), the same bytes as hmac.new(...).digest().
    def _tag(self, body: bytes, *, api_key: str, model: str, item_id: str) -> bytes:
        # The key is hashed so the binding never needs the key itself in memory twice.
        binding = "\0".join([hashlib.sha256(api_key.encode()).hexdigest(), model, item_id])
        return hmac.digest(self._key, binding.encode() + b"\0" + body, "sha256")

    def _keystream(self, nonce: bytes, length: int) -> bytes:
        prefix = b"stream" + nonce
        blocks = [
            hmac.digest(self._key, prefix + counter.to_bytes(4, "big"), "sha256")
            for counter in range((length + 31) // 32)
        ]
        return b"".join(blocks)[:length]


def _xor(data: bytes, stream: bytes) -> bytes:
    if len(data) != len(stream):
        raise ValueError("the keystream must be as long as the data")
    # As integers: one C operation instead of a Python loop over the bytes.
    mixed = int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")
    return mixed.to_bytes(len(data), "big")


# --- the visible history ---------------------------------------------------------------


class History:
    """A running digest of a conversation's visible form (see the module docstring).

    Feed it the context once and the items in order with :meth:`add`; :meth:`digest` is
    the digest of everything so far and may be taken at any point (the probe takes one per
    replayed reasoning item in a single pass). :meth:`fork` copies the state.
    """

    def __init__(self, *, instructions: Any = None, previous_response_id: Any = None) -> None:
        self._hash = hashlib.sha256()
        self._text: list[str] = []  # the open assistant turn, if any
        self._calls: list[list[Any]] = []
        self._in_turn = False
        context = None if instructions is None else _as_text(instructions)
        previous = previous_response_id if isinstance(previous_response_id, str) else None
        self._feed(["context", context, previous])

    def add(self, item: Any) -> None:
        if not isinstance(item, Mapping):
            self._close()
            self._feed(["other", _canonical(item)])
            return
        kind = item.get("type", "message")
        if kind == "reasoning":
            return  # invisible
        if kind == "message" and item.get("role") == "assistant":
            self._in_turn = True
            self._text.append(message_text(item))
            return
        if kind == "function_call":
            self._in_turn = True
            call = [item.get("call_id"), item.get("name"), _arguments(item.get("arguments"))]
            self._calls.append(call)
            return
        if kind == "custom_tool_call":
            # Tagged (four members, a function call has three): another input to the model.
            self._in_turn = True
            self._calls.append(["custom", item.get("call_id"), item.get("name"), item.get("input")])
            return
        self._close()
        if kind == "message":
            self._feed(["message", item.get("role"), _input_text(item.get("content"))])
        elif kind == "function_call_output":
            self._feed(["tool", item.get("call_id"), _as_text(item.get("output"))])
        elif kind == "custom_tool_call_output":
            self._feed(["custom_tool", item.get("call_id"), _as_text(item.get("output"))])
        else:
            # A reference is its id; any other item is itself, minus what a relay may drop.
            keep = {k: v for k, v in item.items() if k != "status"}
            if kind != "item_reference":
                keep.pop("id", None)
            self._feed(["other", _canonical(keep)])

    def digest(self) -> str:
        hasher = self._hash.copy()
        if self._in_turn:
            hasher.update(self._turn())
        return hasher.hexdigest()[:32]

    def fork(self) -> History:
        twin = History.__new__(History)
        twin._hash = self._hash.copy()
        twin._text = list(self._text)
        twin._calls = list(self._calls)
        twin._in_turn = self._in_turn
        return twin

    def _close(self) -> None:
        if self._in_turn:
            self._hash.update(self._turn())
            self._text.clear()
            self._calls.clear()
            self._in_turn = False

    def _turn(self) -> bytes:
        return _segment(["assistant", "".join(self._text), self._calls])

    def _feed(self, segment: list[Any]) -> None:
        self._hash.update(_segment(segment))


def history_digest(
    items: Iterable[Any], *, instructions: Any = None, previous_response_id: Any = None
) -> str:
    """:meth:`History.digest` over ``items`` in one go."""
    history = History(instructions=instructions, previous_response_id=previous_response_id)
    for item in items:
        history.add(item)
    return history.digest()


def _segment(segment: list[Any]) -> bytes:
    # JSON escapes newlines, so one segment a line is unambiguous.
    return json.dumps(segment, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else _canonical(value)


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        try:
            return json.dumps(json.loads(value), sort_keys=True)
        except (ValueError, RecursionError):
            return value
    return _canonical(value)


def _input_text(content: Any) -> str:
    """A user/system/developer message's text, images as ``\\0image:<url>`` markers."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return _canonical(content)
    parts = []
    for part in content:
        if not isinstance(part, Mapping):
            parts.append("\0" + _canonical(part))
        elif part.get("type") in ("input_image", "image_url"):
            url = part.get("image_url")
            if isinstance(url, Mapping):  # the Chat shape, {"url": ..., "detail": ...}
                url = url.get("url")
            if url is None:
                url = part.get("file_id")
            parts.append("\0image:" + _as_text(url))
        elif isinstance(part.get("text"), str):
            parts.append(part["text"])
        else:
            parts.append("\0" + _canonical(part))
    return "".join(parts)


# --- continuity probe ----------------------------------------------------------------

Placement = Literal["intact", "misplaced", "invalid"]
Reason = Literal["followers", "history"]


@dataclass(frozen=True)
class ReplayedReasoning:
    index: int  # position in the request's input
    item_id: str
    placement: Placement
    secret: str | None
    reason: Reason | None = None  # why it is misplaced


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
                {
                    "index": i.index,
                    "id": i.item_id,
                    "placement": i.placement,
                    "secret": i.secret,
                    "reason": i.reason,
                }
                for i in self.items
            ],
        }


Opener = Callable[[str, str], Sealed | None]  # (item_id, token) -> contents


def probe(
    items: Sequence[Any],
    open_token: Opener,
    *,
    instructions: Any = None,
    previous_response_id: Any = None,
    history: History | None = None,
) -> ContinuityReport:
    """Classify every reasoning item in ``items`` that carries ``encrypted_content``.

    ``instructions`` and ``previous_response_id`` are the request's: with the items before
    a replayed reasoning item they make up the history its token must have been sealed for.
    ``history``, when given, is that starting point instead (made from the same request
    context); every item is added to it, so afterwards it digests the whole request.
    """
    if history is None:
        history = History(instructions=instructions, previous_response_id=previous_response_id)
    found = []
    for index, item in enumerate(items):
        if _is_replayed_reasoning(item):
            found.append(_classify(items, index, open_token, history))
        history.add(item)
    return ContinuityReport(tuple(found))


def _classify(
    items: Sequence[Any], index: int, open_token: Opener, history: History
) -> ReplayedReasoning:
    item = items[index]
    item_id = item.get("id")
    item_id = item_id if isinstance(item_id, str) else ""
    sealed = open_token(item_id, item["encrypted_content"])
    if sealed is None:
        return ReplayedReasoning(index, item_id, "invalid", None)
    reason: Reason | None = None
    if not _followed_by(items, index + 1, sealed.followers):
        reason = "followers"
    elif sealed.history is not None and sealed.history != history.digest():
        reason = "history"
    placement: Placement = "intact" if reason is None else "misplaced"
    return ReplayedReasoning(index, item_id, placement, sealed.secret, reason)


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
    if follower.kind in ("function_call", "custom_tool_call") and kind == follower.kind:
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
