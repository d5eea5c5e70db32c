"""One-pass rendering of the common assistant envelope (pure): the framed canonical text
of ``normalize_assistant(message)`` in one orjson call, charged to a
:class:`~relay.core.canonical.Budget` exactly as :meth:`Budget.measure` would charge it,
for the shapes Cursor sends; ``None`` sends every other message down the general path
(:func:`relay.core.envelope.normalize_message`, then :meth:`Budget.render_text`).
"""

from __future__ import annotations

from typing import Any, Final

from relay.core.canonical import (
    ONLY_STR,
    U64,
    Budget,
    EncodeError,
    append_framed,
    canonical_bytes,
    fits_one_chunk,
    one_chunk_chars,
    render_sorted,
    render_unsorted,
)
from relay.core.envelope import NULLISH

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
_SMALL_CHARS: Final = one_chunk_chars(_ENVELOPE_FIXED + _CALL_FIXED + len(_FIRST_INDEX))


def render_assistant(
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
            return append_framed(out, _render_envelope(message, exclude_reasoning_content, budget))
        arguments, name, call_id, kind, indexed = call
        if len(content) + len(arguments) + len(name) + len(call_id) + len(kind) > _SMALL_CHARS:
            return append_framed(out, _render_envelope(message, exclude_reasoning_content, budget))
        try:
            text = render_sorted(message)
        except EncodeError:  # a lone surrogate or an inexact key: the general path refuses
            return None
        if not indexed:
            return append_framed(out, text if budget.admit(len(text), 10, 4) else None)
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
            return append_framed(out, _render_envelope(message, exclude_reasoning_content, budget))
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
    return append_framed(out, _render_envelope(message, exclude_reasoning_content, budget))


def _render_envelope(
    message: dict[str, Any], exclude_reasoning_content: bool, budget: Budget
) -> bytes | None:
    """:func:`render_assistant` by building the normalized envelope: straight-line code
    for text and at most one call, :func:`_render_assistant_general` for the rest."""
    keys = message.keys()
    if not _ASSISTANT_KEYS.issuperset(keys):
        stripped = _without_nullish(message)
        if stripped is None:
            return None
        message, keys = stripped, stripped.keys()
    if not exclude_reasoning_content and "reasoning_content" in keys:
        return _render_assistant_general(message, exclude_reasoning_content, budget)
    content, calls = _content_and_calls(message)
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


def _content_and_calls(message: dict[str, Any]) -> tuple[Any, Any]:
    """``content`` and ``tool_calls`` as normalization reads them: ``None`` is no text and
    no calls (the values are not type-checked here)."""
    content = message.get("content")
    calls = message.get("tool_calls")
    return ("" if content is None else content), (_NO_CALLS if calls is None else calls)


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
    """:func:`render_assistant` for any number of calls and a kept reasoning_content."""
    if not _ASSISTANT_KEYS.issuperset(message):
        return None
    content, calls = _content_and_calls(message)
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
