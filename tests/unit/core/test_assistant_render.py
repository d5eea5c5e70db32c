"""The one-pass renderers (relay.core.assistant_render, flat messages in
relay.core.canonical) against the reference encoding: the shapes that take them, and
limits and refusals exactly the ones Budget.measure decides.
"""

from __future__ import annotations

import enum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core import assistant_render
from relay.core.canonical import (
    Budget,
    CanonicalLimitExceeded,
    CanonicalRefused,
    EncodeError,
    NotCanonicalizable,
    render_sorted,
)
from relay.core.envelope import normalize_message
from relay.core.history_digest import history_digests
from relay.core.limits import CanonicalLimits
from tests.support.identity_cases import (
    CALL,
    SCOPE,
    USER,
    assert_reference_digests,
    left_the_one_pass_path,
    sdk_dump,
    small_scope,
)

# --- the one-pass renderers ----------------------------------------------------------------
# Cursor's commonest messages (flat user/tool/system messages; assistant text; assistant
# text and one call, with or without ``index``) and the SDK's model_dump() echoes are
# rendered as sent and edited in place (an appended ``tool_calls`` member, a cut
# ``index``, dropped null fields). Pinned: the bytes are the reference encoding of the
# normalized message, the shapes do take those paths, and limits and refusals are exactly
# the ones :meth:`Budget.measure` decides, before anything is hashed.


def text_message(content: str = "done") -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def call_message(
    content: str = "",
    *,
    arguments: str = '{"path":"a.py"}',
    name: str = "read",
    call_id: str = "call_1",
    kind: str = "function",
    index: Any = 0,
) -> dict[str, Any]:
    call: dict[str, Any] = {"type": kind, "id": call_id}
    if index is not None:
        call["index"] = index
    call["function"] = {"name": name, "arguments": arguments}
    return {"role": "assistant", "content": content, "tool_calls": [call]}


def tool_message(content: str = "result") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": "call_1", "name": "read", "content": content}


# Strings built from what could confuse an in-place edit: the cut member's own text, its
# neighbours' keys, quotes, backslashes, braces, escapes and non-ASCII code points.
tricky = st.lists(
    st.sampled_from(['"', "\\", ",", ":", "{", "}", "[", "]", "0", "index", "type", "id",
                     ',"index":0,', '"tool_calls":[]', "\n", "\x01", "\u00e9", "\U0001f600"]),
    max_size=12,
).map("".join)  # fmt: skip


@given(
    st.lists(
        st.builds(text_message, tricky)
        | st.builds(
            call_message,
            tricky,
            arguments=tricky,
            name=tricky,
            call_id=tricky,
            kind=tricky,
            index=st.sampled_from([0, None]),
        )
        | st.builds(tool_message, tricky),
        max_size=5,
    ),
    st.booleans(),
)
@settings(max_examples=200)
def test_edited_renderings_are_the_reference_encoding(history: list[Any], exclude: bool) -> None:
    assert_reference_digests(history, exclude)


ONE_PASS = [
    (
        "cursor's commonest shapes",
        [
            {"role": "system", "content": "rules"},
            {"role": "user", "content": "read a.py"},
            call_message("reading", index=0),
            tool_message('{"ok":true}'),
            call_message(index=None),
            tool_message(),
            text_message('the file says ",\\"index\\":0," and }'),
        ],
        True,
    ),
    (
        "the sdk's model_dump() echoes",
        [
            USER,
            sdk_dump("done", None),
            sdk_dump(None, [CALL]),
            sdk_dump("", [CALL, CALL]),
            {"role": "assistant", "content": "x", "refusal": None, "annotations": []},
        ],
        False,
    ),
]


@pytest.mark.parametrize(("name", "history", "edited"), ONE_PASS, ids=[n for n, *_ in ONE_PASS])
def test_the_commonest_shapes_take_the_one_pass_paths(
    monkeypatch: pytest.MonkeyPatch, name: str, history: list[Any], edited: bool
) -> None:
    """Nothing is measured for them and, for Cursor's shapes, no normalized envelope is
    built either (so the tests above exercise the in-place edits)."""
    if edited:
        monkeypatch.setattr(assistant_render, "_render_envelope", left_the_one_pass_path)
    monkeypatch.setattr(Budget, "measure", left_the_one_pass_path)
    digests = history_digests(SCOPE, history)
    monkeypatch.undo()
    assert_reference_digests(history)
    assert digests.boundaries == history_digests(SCOPE, history).boundaries


def test_a_kept_field_leaves_the_one_pass_paths_for_measuring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    general = assistant_render._render_assistant_general

    def spy(*args: Any) -> Any:
        calls.append("general")
        return general(*args)

    monkeypatch.setattr(assistant_render, "_render_assistant_general", spy)
    message = {**sdk_dump("done", None), "refusal": "no"}
    assert_reference_digests([USER, message])
    assert calls == []  # not even the general one-pass renderer: measured


@pytest.mark.parametrize(
    "message",
    [
        call_message(index=1),  # not its position: kept, hashed
        call_message(index=False),  # equal to 0, but not an int: kept, hashed
        call_message(index=0.0),
        {**call_message(), "tool_calls": []},
        {"role": "assistant", "content": None, "tool_calls": call_message()["tool_calls"]},
        {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
        {**text_message(), "refusal": None},
        {**text_message(), "reasoning_content": "thought"},
    ],
)
def test_neighbouring_shapes_hash_their_normalized_form(message: dict[str, Any]) -> None:
    assert_reference_digests([message, message])
    assert_reference_digests([message], exclude=True)


class Text(str):
    pass


class Role(enum.StrEnum):  # orjson renders enum members by value: must still be refused
    ASSISTANT = "assistant"
    TOOL = "tool"


class Index(enum.IntEnum):
    ZERO = 0


def inexact_key(message: dict[str, Any]) -> dict[str, Any]:
    return {Text(key) if key == "content" else key: value for key, value in message.items()}


INEXACT: list[tuple[str, dict[str, Any], str]] = [
    ("text: key subclass", inexact_key(text_message()), "key"),
    ("text: enum role", {"role": Role.ASSISTANT, "content": "x"}, "type"),
    ("text: content subclass", text_message(Text("x")), "type"),
    ("call: key subclass", inexact_key(call_message()), "key"),
    ("call: enum role", {**call_message(), "role": Role.ASSISTANT}, "type"),
    ("call: arguments subclass", call_message(arguments=Text("{}")), "type"),
    ("call: enum type", call_message(kind=Role.TOOL), "type"),
    ("call: enum index", call_message(index=Index.ZERO), "type"),
    ("call: lone surrogate", call_message(call_id="\ud800"), "string"),
    ("unindexed call: key subclass", inexact_key(call_message(index=None)), "key"),
    ("flat: key subclass", inexact_key(tool_message()), "key"),
    ("flat: enum value", {**tool_message(), "role": Role.TOOL}, "type"),
    ("flat: value subclass", tool_message(Text("x")), "type"),
    ("nullish: key subclass", {**text_message("x"), Text("refusal"): None}, "key"),
]


@pytest.mark.parametrize(("name", "message", "reason"), INEXACT, ids=[n for n, _, _ in INEXACT])
def test_inexact_values_are_refused_as_measure_refuses_them(
    hashed: list[bool], name: str, message: dict[str, Any], reason: str
) -> None:
    with pytest.raises(NotCanonicalizable) as measured:
        Budget().measure(normalize_message(message))
    assert measured.value.reason == reason
    with pytest.raises(NotCanonicalizable) as refused:
        history_digests(SCOPE, [tool_message(), message, text_message()])
    assert refused.value.reason == reason
    assert hashed == []


def test_render_sorted_refuses_inexact_keys_only() -> None:
    for key in (Text("a"), Role.TOOL):
        with pytest.raises(EncodeError):
            render_sorted({key: "x"})
    # values are the caller's to check: an enum member renders as its value
    assert render_sorted({"b": Role.TOOL, "a": 1}) == b'{"a":1,"b":"tool"}'


def charges(message: dict[str, Any]) -> tuple[int, int]:
    """Bytes and nodes measure() charges for a message (its normalized form)."""
    budget = Budget()
    size = budget.measure(normalize_message(message))
    return size, budget.nodes


LIMITED = [
    ("flat", tool_message("x" * 50)),
    ("text", text_message("y" * 50)),
    ("indexed call", call_message("z" * 50)),
    ("unindexed call", call_message("z" * 50, index=None)),
]


@pytest.mark.parametrize(("name", "message"), LIMITED, ids=[n for n, _ in LIMITED])
@pytest.mark.parametrize(("limit", "placeholder"), [("max_bytes", 999), ("max_nodes", 99)])
def test_limits_are_exact_on_the_one_pass_paths(
    hashed: list[bool], name: str, message: dict[str, Any], limit: str, placeholder: int
) -> None:
    history = [tool_message(), message]
    size, nodes = charges(message)
    # The limits are framed into the scope: equal-width values keep its size.
    scope = small_scope(**{limit: placeholder})
    used = history_digests(scope, history)
    assert used.message_sizes[-1] == size
    assert used.bytes_used == scope.canonical_size + sum(used.message_sizes)
    assert used.nodes_used == history_digests(SCOPE, history[:1]).nodes_used + nodes
    exact = used.bytes_used if limit == "max_bytes" else used.nodes_used
    assert len(str(exact - 1)) == len(str(placeholder))
    history_digests(small_scope(**{limit: exact}), history)  # exactly at the limit: fits
    hashed.clear()
    with pytest.raises(CanonicalLimitExceeded) as refused:
        history_digests(small_scope(**{limit: exact - 1}), history)
    assert refused.value.reason == limit.removeprefix("max_")
    assert hashed == []


def test_a_flat_message_is_charged_its_depth() -> None:
    budget = Budget(CanonicalLimits(max_depth=0))
    assert budget.render_flat(tool_message()) is None
    assert (budget.bytes, budget.nodes) == (0, 0)
    with pytest.raises(CanonicalRefused) as refused:
        budget.measure(tool_message())
    assert refused.value.reason == "depth"
