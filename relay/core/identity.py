"""Scope and prefix digests of the visible history (design §2), pure.

Framing (every length a u64 big-endian count of canonical UTF-8 bytes):

- ``Scope.digest``   = SHA-256(``rrr/scope/v1\\0``  || len || scope)
- history state      = SHA-256(``rrr/history/v1\\0`` || len || scope || len || m0 || len || m1 ...)
  (tag ``rrr/history-without-reasoning-content/v1\\0`` when ``reasoning_content`` is
  excluded, so the two keyings never share a digest)
- ``boundaries[k]``  = the history state's digest after ``k`` messages (``[0]``: scope only)
- envelope fingerprint = SHA-256(``rrr/envelope/v1\\0`` || len || normalized envelope),
  independent of position and scope (tag ``rrr/envelope-without-reasoning-content/v1\\0``
  when excluded)

Messages are hashed in their normalized form (see ``envelope``). All limits are decided by
measuring the whole scope and history before any message is emitted; a refusal raises
:class:`~relay.core.canonical.CanonicalRefused` and means: skip caching, no intent,
no marker.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, Protocol

from relay.core.canonical import (
    MAX_ESCAPE,
    ONLY_STR,
    U64,
    Budget,
    CanonicalLimitExceeded,
    EncodeError,
    canonical_bytes,
    fits_one_chunk,
    frame,
    render_sorted,
    render_unsorted,
)
from relay.core.envelope import (
    NULLISH,
    is_assistant,
    normalize_assistant,
    normalize_message,
)
from relay.core.limits import (
    CANONICAL_LIMITS,
    CHUNK_BYTES,
    IDENTITY_FORMAT_VERSION,
    CanonicalLimits,
)

SCOPE_TAG: Final = b"rrr/scope/v1\0"
HISTORY_TAGS: Final = (b"rrr/history/v1\0", b"rrr/history-without-reasoning-content/v1\0")
ENVELOPE_TAGS: Final = (b"rrr/envelope/v1\0", b"rrr/envelope-without-reasoning-content/v1\0")

ENCRYPTED_REASONING_INCLUDE: Final = "reasoning.encrypted_content"

# Keys of the translated Responses body that are not scope configuration, and why:
# input          the visible history, hashed message by message instead
# instructions   derived from the leading system/developer messages (Chat) or mapped to
#                the first history message (Responses-shaped bodies): history, not scope
# stream, stream_options, background   transport only; must not split histories
# user           stands in the scope as the caller fingerprint, never raw
# model          stands in the scope on its own (also a targeting value)
# store, include replaced by their effective values (store false, merged include)
# prompt_cache_key, prompt_cache_retention   where and how long the upstream keeps its
#                prompt cache: routing and retention of a cache whose hits give the same
#                output as misses, never the model's context. A client may send a new key
#                per request; in the scope it would stop every replay for nothing.
# Everything else stays in: tools, reasoning (effort, summary, context), text (verbosity,
# format), truncation, max_output_tokens, ... each changes what the model reads or writes.
SCOPE_EXCLUDED_KEYS: Final = frozenset(
    {"input", "instructions", "stream", "stream_options", "background", "user", "model",
     "store", "include", "prompt_cache_key", "prompt_cache_retention"}
)  # fmt: skip


class _Hasher(Protocol):
    def update(self, data: bytes | memoryview, /) -> None: ...
    def copy(self) -> _Hasher: ...
    def hexdigest(self) -> str: ...


def fingerprint(secret: bytes, label: str, value: str) -> str:
    """HMAC-SHA256 of a labelled value under the cache-local secret (hex)."""
    message = label.encode("ascii") + b"\0" + value.encode("utf-8", "surrogatepass")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def merged_include(include: Sequence[str] | None) -> list[str]:
    """The effective ``include`` of a cached request: the caller's values plus encrypted
    reasoning, deduplicated and sorted (a set, so order must not split scopes)."""
    return sorted({*(include or ()), ENCRYPTED_REASONING_INCLUDE})


def scope_config(upstream_body: Mapping[str, Any]) -> dict[str, Any]:
    """The translated configuration that scopes a history: the Responses body without the
    excluded keys, ``null`` values left out, plus effective ``store``/``include``."""
    config = {
        key: value
        for key, value in upstream_body.items()
        if key not in SCOPE_EXCLUDED_KEYS and value is not None
    }
    config["store"] = False
    config["include"] = merged_include(upstream_body.get("include"))
    return config


@dataclass(frozen=True)
class ScopeTargeting:
    """What fencing matches on: credential/model/caller (fingerprints, never raw values)."""

    credential: str
    model: str
    caller: str | None


def scope_targeting(
    secret: bytes, *, credential: str, model: str, caller: str | None
) -> ScopeTargeting:
    """The fencing targets of a generation (also framed into its scope)."""
    return ScopeTargeting(
        credential=fingerprint(secret, "openai-credential", credential),
        model=model,
        caller=None if caller is None else fingerprint(secret, "caller", caller),
    )


@dataclass(frozen=True)
class Scope:
    """A framed, measured scope; build with :func:`build_scope`."""

    digest: str
    targeting: ScopeTargeting
    limits: CanonicalLimits
    canonical_size: int  # bytes of the canonical scope, charged to the shared budget
    nodes: int
    # The framed scope object (fingerprints only, no raw secrets). It shares nested values
    # (tools, schemas) with the translated body: read-only, like that body.
    value: dict[str, Any] = field(repr=False, compare=False)
    # History hash states after the tag and framed scope (index: exclude_reasoning_content).
    _starts: tuple[_Hasher, _Hasher] = field(repr=False, compare=False)

    def history_start(self, *, exclude_reasoning_content: bool = False) -> _Hasher:
        """A fresh copy of the history hash state before the first message."""
        return self._starts[exclude_reasoning_content].copy()


def build_scope(
    *,
    secret: bytes,
    upstream_origin: str,
    endpoint: str,
    credential: str,
    relay_token: str,
    caller: str | None,
    upstream_body: Mapping[str, Any],
    openai_beta: str | None,
    body_shape: str = "chat",
    limits: CanonicalLimits = CANONICAL_LIMITS,
) -> Scope:
    """Build the scope of one translated request.

    ``upstream_body`` is the translated Responses body; ``caller`` the client's ``user``
    value (``TranslatedRequest.caller``); ``body_shape`` ``"chat"`` or ``"responses"``
    (the two map histories differently, so they never share a scope); ``openai_beta`` the
    effective header or ``None``. Raises ``CanonicalRefused`` when the scope alone breaks
    a limit.
    """
    if len(secret) < 16:
        raise ValueError("the cache secret must be at least 16 bytes")
    model = upstream_body.get("model")
    if not isinstance(model, str):
        raise TypeError("the translated body must carry the resolved model as a string")
    targeting = scope_targeting(secret, credential=credential, model=model, caller=caller)
    value: dict[str, Any] = {
        "format": IDENTITY_FORMAT_VERSION,
        "limits": limits.as_json(),
        "upstream": {"origin": upstream_origin, "endpoint": endpoint},
        "credential": targeting.credential,
        "relay_token": fingerprint(secret, "relay-token", relay_token),
        "caller": targeting.caller,
        "body_shape": body_shape,
        "model": model,
        "config": scope_config(upstream_body),
        "openai_beta": openai_beta,
    }
    budget = Budget(limits)
    size = budget.measure(value)
    scope_hash = hashlib.sha256(SCOPE_TAG)
    starts = (hashlib.sha256(HISTORY_TAGS[0]), hashlib.sha256(HISTORY_TAGS[1]))
    frame(_Fanout((scope_hash, *starts)), value, size)
    return Scope(scope_hash.hexdigest(), targeting, limits, size, budget.nodes, value, starts)


class _Fanout:
    """Feeds one emission to several hashes (each document is emitted once)."""

    __slots__ = ("sinks",)

    def __init__(self, sinks: tuple[_Hasher, ...]) -> None:
        self.sinks = sinks

    def update(self, data: bytes, /) -> None:
        for sink in self.sinks:
            sink.update(data)


class AssistantBlockKey(NamedTuple):
    """Where an assistant envelope sits: matching uses ``end_digest``, then verifies the
    start boundary and the envelope fingerprint. (A named tuple: a history makes one per
    assistant message, and a frozen dataclass costs several times as much to build.)"""

    position: int  # index of the assistant message in the history
    start_digest: str  # boundary before it
    end_digest: str  # boundary after it
    envelope_fingerprint: str


# AssistantBlockKey(...) without the Python-level __new__ a named tuple's call goes through.
_new_block: Final = tuple.__new__


@dataclass(frozen=True)
class HistoryState:
    """The hash state after ``position`` messages; capture extends it with the predicted
    envelope of the response it is collecting."""

    position: int
    digest: str
    bytes_used: int
    nodes_used: int
    limits: CanonicalLimits
    exclude_reasoning_content: bool
    _hasher: _Hasher = field(repr=False, compare=False)

    def extend(self, envelope: Mapping[str, Any]) -> tuple[AssistantBlockKey, HistoryState]:
        """Append one assistant envelope (normalized here): its block key and the new state.

        Raises ``CanonicalRefused`` when the longer history would break a limit (then no
        later request can carry it within the limits either).
        """
        if not is_assistant(envelope):
            raise ValueError("only an assistant envelope can extend a history")
        if self.position + 1 > self.limits.max_messages:
            raise CanonicalLimitExceeded("messages")
        flag = self.exclude_reasoning_content
        normalized = normalize_assistant(envelope, exclude_reasoning_content=flag)
        budget = Budget(self.limits, bytes_used=self.bytes_used, nodes_used=self.nodes_used)
        size = budget.measure(normalized)
        hasher = self._hasher.copy()
        envelope_hash = hashlib.sha256(ENVELOPE_TAGS[flag])
        frame(_Fanout((hasher, envelope_hash)), normalized, size)
        digest = hasher.hexdigest()
        key = AssistantBlockKey(self.position, self.digest, digest, envelope_hash.hexdigest())
        state = HistoryState(
            self.position + 1, digest, budget.bytes, budget.nodes, self.limits, flag, hasher
        )
        return key, state


@dataclass(frozen=True)
class HistoryDigests:
    """Prefix digests of one scoped visible history."""

    scope_digest: str
    boundaries: tuple[str, ...]  # len(history) + 1 hex digests; [k] = after k messages
    message_sizes: tuple[int, ...]  # canonical bytes of each normalized message
    assistant_blocks: tuple[AssistantBlockKey, ...]  # in history order
    bytes_used: int  # canonical bytes of scope + history
    nodes_used: int
    final_state: HistoryState = field(repr=False, compare=False)
    # tool_call_id -> position of the first tool message answering it (for the planner's
    # call pairing: gathered here because this is the one pass over every message)
    first_answers: Mapping[str, int] = field(default_factory=dict, repr=False)


def history_digests(
    scope: Scope, messages: Sequence[Any], *, exclude_reasoning_content: bool = False
) -> HistoryDigests:
    """Digest every prefix of a visible history (Chat messages, as the client sent them).

    Everything is measured before anything is emitted: over a limit (or not canonical),
    this raises ``CanonicalRefused`` having hashed nothing. Measuring renders each
    document that fits one chunk (the one-pass renderers, :meth:`Budget.render_text`)
    into one buffer of framed texts, so emitting is hashing slices of it.
    """
    limits = scope.limits
    if len(messages) > limits.max_messages:
        raise CanonicalLimitExceeded("messages")
    flag = exclude_reasoning_content
    budget = Budget(limits, bytes_used=scope.canonical_size, nodes_used=scope.nodes)
    sizes: list[int] = []
    # The framed renderings, back to back: one buffer, not one object per message.
    rendered_history = bytearray()
    ends: list[int] = []  # end offset of each message's framing in rendered_history
    streamed: dict[int, object] = {}  # position -> normalized value too long to render
    assistants: list[bool] = []
    first_answers: dict[str, int] = {}
    for position, message in enumerate(messages):
        role = message.get("role") if type(message) is dict else None
        assistant = role == "assistant"  # is_assistant
        if role == "tool" and isinstance(call_id := message.get("tool_call_id"), str):
            first_answers.setdefault(call_id, position)
        size: int | None
        if assistant:
            size = _render_assistant(message, flag, budget, rendered_history)
        elif type(message) is dict:
            size = _append(rendered_history, budget.render_flat(message))
        else:
            size = None
        if size is None:  # outside the one-pass shapes: measured, then rendered or streamed
            value = normalize_message(message, exclude_reasoning_content=flag)
            size, text = budget.render_text(value)
            if text is None:
                streamed[position] = value
            else:
                _append(rendered_history, text)
        sizes.append(size)
        ends.append(len(rendered_history))  # unchanged: streamed (a framing is >= 8 bytes)
        assistants.append(assistant)

    hasher = scope.history_start(exclude_reasoning_content=flag)
    digest = hasher.hexdigest()
    boundaries = [digest]
    blocks: list[AssistantBlockKey] = []
    envelope_start = hashlib.sha256(ENVELOPE_TAGS[flag])
    view = memoryview(rendered_history)
    start = 0
    for position, (end, assistant) in enumerate(zip(ends, assistants, strict=True)):
        previous = digest
        envelope_hash = envelope_start.copy() if assistant else None
        if end != start:  # rendered: its framing, emitted once into both
            piece = view[start:end]
            hasher.update(piece)
            if envelope_hash is not None:
                envelope_hash.update(piece)
            start = end
        elif envelope_hash is not None:  # streamed: emitted once, into both
            frame(_Fanout((hasher, envelope_hash)), streamed[position], sizes[position])
        else:
            frame(hasher, streamed[position], sizes[position])
        digest = hasher.hexdigest()
        boundaries.append(digest)
        if envelope_hash is not None:
            key = (position, previous, digest, envelope_hash.hexdigest())
            blocks.append(_new_block(AssistantBlockKey, key))
    view.release()
    final = HistoryState(
        len(sizes), boundaries[-1], budget.bytes, budget.nodes, limits, flag, hasher.copy()
    )
    return HistoryDigests(
        scope.digest, tuple(boundaries), tuple(sizes), tuple(blocks), budget.bytes,
        budget.nodes, final, first_answers,
    )  # fmt: skip


# --- one-pass rendering of the common assistant envelope ---------------------------------
# Cursor's assistant messages: text content (or none) and plain function tool calls, each
# with an index equal to its position. Their normalized form is rendered by one orjson
# call and charged with the node count and depth measure() would find: exactly the
# canonical bytes of normalize_assistant(message). Anything else returns None and takes
# the general path.
#
# The two commonest shapes render the message itself (no normalized copy is built; its
# keys need no check, render_sorted refuses an inexact one):
#   {content, role}              + ',"tool_calls":[]' before the closing brace
#   {content, role, tool_calls}  one call, less its ',"index":0' when it has one
# In canonical text a '"' inside a string is always escaped, so ',"index":0,' can only be
# the call's own member ("id" < "index" < "type": it sits between two members), and
# "tool_calls" sorts after "content" and "role". Other shapes build the normalized
# envelope, members inserted in sorted order (content, reasoning_content, role,
# tool_calls; function, id, type; arguments, name), and render it without sorting; the
# members normalization drops (a null or empty refusal, annotations, audio, function_call,
# null tool_calls: an SDK's model_dump() of the answer) are left out of it first.

_ASSISTANT_KEYS: Final = frozenset({"role", "content", "tool_calls", "reasoning_content"})
_TEXT_KEYS: Final = frozenset({"role", "content"})
_ONE_CALL_KEYS: Final = frozenset({"role", "content", "tool_calls"})
_CALL_KEYS: Final = frozenset({"id", "type", "function"})
_INDEXED_CALL_KEYS: Final = frozenset({"id", "type", "function", "index"})
_FUNCTION_KEYS: Final = frozenset({"name", "arguments"})
_NO_CALLS: Final[list[Any]] = []
_NO_CALLS_MEMBER: Final = b',"tool_calls":[]}'
_FIRST_INDEX: Final = b',"index":0,'
_INDEX_BYTES: Final = len(_FIRST_INDEX) - 1  # the bytes cut: all but one comma


def _literal_size(value: object) -> int:
    return len(canonical_bytes(value))


# Literal bytes besides the strings' encoded code points (their quotes counted here).
_ENVELOPE_FIXED: Final = _literal_size({"content": "", "role": "assistant", "tool_calls": []})
_REASONING_FIXED: Final = len(',"reasoning_content":""')
_CALL: Final = {"function": {"arguments": "", "name": ""}, "id": "", "type": ""}
_CALL_FIXED: Final = _literal_size(_CALL) + 1  # and a comma
# Strings of at most this many code points in all make an envelope of at most one call
# that fits one chunk, whatever they hold, with the call's index too (the message as sent).
_SMALL_CHARS: Final = (
    CHUNK_BYTES - _ENVELOPE_FIXED - _CALL_FIXED - len(_FIRST_INDEX)
) // MAX_ESCAPE


def _render_assistant(
    message: dict[str, Any], exclude_reasoning_content: bool, budget: Budget, out: bytearray
) -> int | None:
    """Append the framed canonical text of ``normalize_assistant(message)`` to ``out``
    and return its size, for the common shape when it provably fits one chunk, charged to
    ``budget`` as :meth:`Budget.measure` would charge it; ``None``, appending and charging
    nothing, otherwise (or when it breaks a limit).

    Renders the two commonest messages as sent (see above), edited in ``out`` (no copy);
    :func:`_render_envelope` for the rest of the shape."""
    keys = message.keys()
    if keys == _ONE_CALL_KEYS:
        content, calls, role = message["content"], message["tool_calls"], message["role"]
        plain = type(content) is str and type(role) is str and type(calls) is list
        call = _only_call(calls) if plain else None
        if call is None:
            return _append(out, _render_envelope(message, exclude_reasoning_content, budget))
        arguments, name, call_id, kind, indexed = call
        if len(content) + len(arguments) + len(name) + len(call_id) + len(kind) > _SMALL_CHARS:
            return _append(out, _render_envelope(message, exclude_reasoning_content, budget))
        try:
            text = render_sorted(message)
        except EncodeError:  # a lone surrogate or an inexact key: the general path refuses
            return None
        if not indexed:
            return _append(out, text if budget.admit(len(text), 10, 4) else None)
        size = len(text) - _INDEX_BYTES
        if not budget.admit(size, 10, 4):  # 4 values and 6 of the call
            return None
        out += U64.pack(size)
        # The index is the last member but one: found from the end, cut out in place.
        cut = len(out) + text.rfind(_FIRST_INDEX) + 1  # after its leading comma
        out += text
        del out[cut : cut + _INDEX_BYTES]
        return size
    if keys == _TEXT_KEYS:
        content, role = message["content"], message["role"]
        if type(content) is not str or type(role) is not str or len(content) > _SMALL_CHARS:
            return _append(out, _render_envelope(message, exclude_reasoning_content, budget))
        try:
            text = render_sorted(message)
        except EncodeError:  # a lone surrogate or an inexact key: the general path refuses
            return None
        size = len(text) - 1 + len(_NO_CALLS_MEMBER)
        if not budget.admit(size, 4, 2):  # the envelope and 3 values
            return None
        out += U64.pack(size)
        out += text
        out[-1:] = _NO_CALLS_MEMBER  # in place of the closing brace
        return size
    return _append(out, _render_envelope(message, exclude_reasoning_content, budget))


def _append(out: bytearray, text: bytes | None) -> int | None:
    """Append a rendered text to ``out``, framed; its size (``None``: nothing rendered)."""
    if text is None:
        return None
    out += U64.pack(len(text))
    out += text
    return len(text)


def _render_envelope(
    message: dict[str, Any], exclude_reasoning_content: bool, budget: Budget
) -> bytes | None:
    """:func:`_render_assistant` by building the normalized envelope: straight-line code
    for text and at most one call, :func:`_render_assistant_general` for the rest."""
    keys = message.keys()
    if not _ASSISTANT_KEYS.issuperset(keys):
        stripped = _without_nullish(message)
        if stripped is None:
            return None
        message, keys = stripped, stripped.keys()
    if not exclude_reasoning_content and "reasoning_content" in keys:
        return _render_assistant_general(message, exclude_reasoning_content, budget)
    content = message.get("content")
    if content is None:
        content = ""
    calls = message.get("tool_calls")
    if calls is None:
        calls = _NO_CALLS
    # role: is_assistant made it equal to "assistant"; a str subclass (or key) is not canonical.
    if (
        type(content) is not str
        or type(calls) is not list
        or type(message["role"]) is not str
        or not ONLY_STR.issuperset(map(type, keys))
    ):
        return None
    if not calls:
        if len(content) > _SMALL_CHARS:
            return _render_assistant_general(message, exclude_reasoning_content, budget)
        envelope = {"content": content, "role": "assistant", "tool_calls": _NO_CALLS}
        return _render(envelope, 4, 2, budget)
    if len(calls) != 1:
        return _render_assistant_general(message, exclude_reasoning_content, budget)
    call = _only_call(calls)
    if call is None or not ONLY_STR.issuperset(map(type, (*calls[0], *calls[0]["function"]))):
        return None
    arguments, name, call_id, kind, _ = call
    if len(content) + len(arguments) + len(name) + len(call_id) + len(kind) > _SMALL_CHARS:
        return _render_assistant_general(message, exclude_reasoning_content, budget)
    normalized_call = {
        "function": {"arguments": arguments, "name": name}, "id": call_id, "type": kind
    }  # fmt: skip
    envelope = {"content": content, "role": "assistant", "tool_calls": [normalized_call]}
    return _render(envelope, 10, 4, budget)  # 4 values of the envelope and 6 of the call


def _without_nullish(message: dict[str, Any]) -> dict[str, Any] | None:
    """``message`` less its members that normalization drops (a null or empty field of
    ``NULLISH``, e.g. ``refusal: null``), when every member outside the fast shape's keys
    is one of those; else ``None`` (the general path). Only an exact str key is dropped,
    as normalization drops it; the kept keys (the message's own objects) are type-checked
    by the caller."""
    for key in message.keys() - _ASSISTANT_KEYS:
        value = message[key]
        if type(key) is not str or not (
            (value is None and key in NULLISH)  # the SDK's nulls: no call
            or ((empty := NULLISH.get(key)) is not None and empty(value))
        ):
            return None
    return {key: value for key, value in message.items() if key in _ASSISTANT_KEYS}


def _only_call(calls: list[Any]) -> tuple[str, str, str, str, bool] | None:
    """``(arguments, name, id, type, indexed)`` of the call of a one-call list when it is
    plain: exactly the call's keys (plus an ``index`` of 0, its position, which
    normalization drops), a function of exactly name and arguments, those four values
    exactly a str; else None. (Keys equal to those but of a str subclass pass: callers
    refuse them, see render_sorted.)"""
    if len(calls) != 1:
        return None
    call = calls[0]
    if type(call) is not dict:
        return None
    call_keys = call.keys()
    if call_keys == _CALL_KEYS:
        indexed = False
    elif call_keys == _INDEXED_CALL_KEYS:
        index = call["index"]
        if type(index) is not int or index != 0:
            return None
        indexed = True
    else:
        return None
    function = call["function"]
    if type(function) is not dict or function.keys() != _FUNCTION_KEYS:
        return None
    arguments, name, call_id, kind = (
        function["arguments"], function["name"], call["id"], call["type"]
    )  # fmt: skip
    if (
        type(arguments) is not str
        or type(name) is not str
        or type(call_id) is not str
        or type(kind) is not str
    ):
        return None
    return arguments, name, call_id, kind, indexed


def _render_assistant_general(
    message: dict[str, Any], exclude_reasoning_content: bool, budget: Budget
) -> bytes | None:
    """:func:`_render_assistant` for any number of calls and a kept reasoning_content."""
    if not _ASSISTANT_KEYS.issuperset(message):
        return None
    content = message.get("content")
    if content is None:
        content = ""
    calls = message.get("tool_calls")
    if calls is None:
        calls = _NO_CALLS
    if type(calls) is not list:
        return None
    reasoning = not exclude_reasoning_content and "reasoning_content" in message
    # Every key of the message, its calls and their functions, then every string value
    # (role too: is_assistant made it equal to "assistant", but a str subclass is not
    # canonical), must be exactly a str.
    typed: list[Any] = [*message, message["role"], content]
    texts: list[Any] = [content, message["reasoning_content"]] if reasoning else [content]
    normalized_calls = []
    for position, call in enumerate(calls):
        if type(call) is not dict:
            return None
        keys = call.keys()
        if keys != _CALL_KEYS:
            if keys != _INDEXED_CALL_KEYS:
                return None
            index = call["index"]  # dropped when it is its position, else general path
            if type(index) is not int or index != position:
                return None
        function = call["function"]
        if type(function) is not dict or function.keys() != _FUNCTION_KEYS:
            return None
        typed += call
        typed += function
        arguments, name, call_id, kind = (
            function["arguments"], function["name"], call["id"], call["type"]
        )  # fmt: skip
        texts += (arguments, name, call_id, kind)
        normalized_calls.append(
            {"function": {"arguments": arguments, "name": name}, "id": call_id, "type": kind}
        )
    if not ONLY_STR.issuperset(map(type, typed)) or not ONLY_STR.issuperset(map(type, texts)):
        return None
    fixed = _ENVELOPE_FIXED + _CALL_FIXED * len(calls) + (_REASONING_FIXED if reasoning else 0)
    if not fits_one_chunk(sum(map(len, texts)), fixed):
        return None
    envelope: dict[str, Any] = {"content": content}
    if reasoning:
        envelope["reasoning_content"] = message["reasoning_content"]
    envelope["role"] = "assistant"
    envelope["tool_calls"] = normalized_calls
    nodes = 4 + reasoning + 6 * len(calls)  # the envelope, 3 or 4 members, 6 per call
    depth = 4 if calls else 2  # tool_calls nests 2 levels deep, calls 3, functions 4
    return _render(envelope, nodes, depth, budget)


def _render(envelope: dict[str, Any], nodes: int, depth: int, budget: Budget) -> bytes | None:
    """Render an envelope built in sorted member order (so no sorting is asked for) and
    charge it to ``budget``; ``None``, charging nothing, when that breaks a limit."""
    try:
        text = render_unsorted(envelope)
    except EncodeError:  # a lone surrogate: the general path refuses it with its reason
        return None
    return text if budget.admit(len(text), nodes, depth) else None
