"""Remembered message renderings (relay.core.rendered_messages, design §21): with a memo,
cold or warm (from the same history or from others sharing its messages), history_digests
returns exactly what it returns without one and refuses exactly as it refuses without one;
a hit renders nothing; the key tells apart every two values that could render apart; the
memo is bounded by bytes; refusals, streamed messages and values marshal cannot write are
never remembered."""

from __future__ import annotations

import copy
import enum
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.core import history_digest
from relay.core.canonical import Budget, CanonicalRefused, render_sorted
from relay.core.history_digest import history_digests
from relay.core.limits import CHUNK_BYTES, CanonicalLimits
from relay.core.rendered_messages import (
    ENTRY_OVERHEAD,
    ENVELOPE_OVERHEAD,
    IDLE_CALLS,
    RenderedMessages,
    message_key,
)
from relay.core.scope import Scope
from tests.support.identity_cases import CALL, HISTORY, SCOPE, USER, make_scope, sdk_dump


class Text(str):
    pass


class Role(enum.StrEnum):
    ASSISTANT = "assistant"
    USER = "user"


# Values that JSON, or a careless key, would confuse: equal numbers of other types, signed
# zeros, a tuple and a list, key orders, the largest integers, a deep value (past the
# depth-limited scope below, within the default).
RENDERED: list[Any] = [
    1, 1.0, True, "1", 0, 0.0, -0.0, False, None, "", 2**64 - 1, -(2**63), "é", "x", "user",
    (1, "a"), [1, "a"], {"a": 1, "b": 2.5}, {"b": 2.5, "a": 1},
    [{"type": "text", "text": "hi"}], [[[["deep"]]]],
]  # fmt: skip
# Look-alikes each refused: JSON (or orjson) spells them like one above, or nearly.
REFUSED: list[Any] = [float("nan"), 2**64, -(2**63) - 1, "\ud800", Text("x"), Role.USER, b"x"]
# Pairs that render apart (or one refused) but that a careless key could confuse.
TWINS: list[tuple[Any, Any]] = [
    (None, float("nan")), ("x", Text("x")), ("user", Role.USER), (1, 1.0), (1, True),
    (0.0, -0.0), ([1, "a"], (1, "a")), ({"a": 1, "b": 2.5}, {"b": 2.5, "a": 1}),
    (2**64 - 1, 2**64), ("x", b"x"), ([], {}),
]  # fmt: skip
# Strings past what one chunk renders: plain, escaped (6 bytes a code point), non-ASCII.
LONG = ["a" * (CHUNK_BYTES + 1), "\x01" * (CHUNK_BYTES // 6 + 1), "é" * (CHUNK_BYTES // 2 + 1)]
SLOTS = [
    lambda value: {"role": "user", "content": [value]},
    lambda value: {"role": "tool", "tool_call_id": "call_1", "content": value},
    lambda value: {"role": "assistant", "content": "ok", "reasoning_content": value},
    lambda value: {"role": "assistant", "content": value},
    lambda value: {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}, "index": value}
    ]},
]  # fmt: skip
texts = st.text(max_size=6) | st.sampled_from(['"', "\\", ',"index":0,', "\n", "\U0001f600"])


def long_string(which: int) -> str:
    return LONG[which]


longs = st.sampled_from(range(len(LONG))).map(long_string)  # a short repr
scalars = st.sampled_from(RENDERED) | texts | longs
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=2).map(tuple)
        | st.dictionaries(st.sampled_from(["a", "b", "text", "type"]), inner, max_size=3)
    ),
    max_leaves=6,
)
strings = texts | longs


def shuffled(pairs: st.SearchStrategy[list[tuple[Any, Any]]]) -> st.SearchStrategy[dict[Any, Any]]:
    """Dicts of these members in every order (another order is another key: a miss)."""
    return pairs.flatmap(lambda members: st.permutations(members).map(dict))


def optional(key: str, value: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[str, Any] | None]:
    """The member, or none (left out of the dict)."""
    return st.none() | value.map(lambda v: (key, v))


def members(*fields: st.SearchStrategy[Any]) -> st.SearchStrategy[list[tuple[Any, Any]]]:
    return st.tuples(*fields).map(lambda found: [pair for pair in found if pair is not None])


calls = shuffled(
    members(
        st.just(("id", "call_1")) | st.just(("id", 7)),
        st.just(("type", "function")),
        optional("index", st.sampled_from([0, 0.0, False, 1])),
        st.tuples(
            st.just("function"),
            shuffled(members(st.just(("name", "read")), strings.map(lambda s: ("arguments", s)))),
        ),
    )
)
assistants = shuffled(
    members(
        st.just(("role", "assistant")),
        optional("content", strings | st.none() | values),
        optional("tool_calls", st.none() | st.lists(calls, max_size=2)),
        optional("reasoning_content", strings | values),
        optional("refusal", st.sampled_from([None, "", "no"])),
    )
)
flat = shuffled(
    members(
        st.sampled_from([("role", "user"), ("role", "tool"), ("role", "system")]),
        optional("content", strings | values),
        optional("tool_call_id", st.sampled_from(["call_1", "call_2"])),
        optional("name", texts),
    )
)
# Whole messages: the SDK's echoes, the shared history, a list, deep ones (refused by the
# depth-limited scope only) and a reasoning_content (dropped by the flag only).
FIXED: list[Any] = [
    sdk_dump("done", None), sdk_dump(None, [CALL]), *HISTORY, ["user", "hi"],
    {"role": "user", "content": [[[["deep"]]]]},
    {"role": "assistant", "content": "ok", "reasoning_content": "why"},
    {"role": "assistant", "content": "ok", "reasoning_content": [[[["deep"]]]]},
]  # fmt: skip
messages = (
    assistants
    | flat
    | st.sampled_from(FIXED)
    | st.tuples(st.sampled_from(SLOTS), st.sampled_from(REFUSED)).map(lambda s: s[0](s[1]))
    | st.sampled_from(["hi", OrderedDict(role="user", content="hi")])
)
# Both twins in one slot: the pool holds both, histories draw either, or both.
twins = st.tuples(st.sampled_from(SLOTS), st.sampled_from(TWINS)).map(
    lambda s: [s[0](s[1][0]), s[0](s[1][1])]
)
pools = st.tuples(st.lists(messages, max_size=5), st.lists(twins, max_size=2)).map(
    lambda found: [*found[0], *(message for pair in found[1] for message in pair)]
)


def _limits_for(scope: Scope, **extra: int) -> CanonicalLimits:
    return CanonicalLimits(
        **{
            "max_bytes": scope.canonical_size + extra.get("bytes", 10**6),
            "max_nodes": scope.nodes + extra.get("nodes", 10**6),
            "max_depth": extra.get("depth", 64),
        }
    )


# Limits some histories break (bytes, nodes, depth) and the defaults; the scope frames its
# limits, so each is built with them.
SCOPES = [
    SCOPE,
    make_scope(limits=_limits_for(SCOPE, bytes=400)),
    make_scope(limits=_limits_for(SCOPE, nodes=30)),
    make_scope(limits=_limits_for(SCOPE, depth=5)),  # the scope needs 5
]


def outcome(scope: Scope, history: list[Any], exclude: bool, memo: RenderedMessages | None) -> Any:
    """Everything history_digests gives (the final state's hash state too, through the
    block its next answer would get), or its refusal."""
    try:
        digests = history_digests(scope, history, exclude_reasoning_content=exclude, memo=memo)
    except CanonicalRefused as refused:
        return type(refused), refused.reason
    final = digests.final_state
    try:
        following: Any = final.extend({"role": "assistant", "content": "next"})
    except CanonicalRefused as refused:
        following = refused.reason
    return (
        digests, dict(digests.first_answers), final.position, final.digest, final.bytes_used,
        final.nodes_used, final.limits, final.exclude_reasoning_content, following,
    )  # fmt: skip


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                   HealthCheck.too_slow])  # fmt: skip
@given(
    pools.filter(bool),
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 8), min_size=1, max_size=8),
            st.booleans(),
            st.sampled_from(range(len(SCOPES))),
        ),
        min_size=2,
        max_size=5,
    ),
    st.sampled_from([4096, 64 * 1024, 16 * 1024 * 1024]),
    st.sampled_from([0, 1, IDLE_CALLS]),
)
def test_digests_with_the_memo_are_the_digests_without(
    hashed: list[bool],
    pool: list[Any],
    requests: list[tuple[list[int], bool, int]],
    capacity: int,
    idle_calls: int,
) -> None:
    """Histories drawn from one pool share messages: each request, twice (cold, then warm
    from itself), against a memo warm from the requests before (evicting at the smaller
    bounds, rebinding when the flag or the limits change), its messages fresh copies (as a
    new request parses them)."""
    memo = RenderedMessages(capacity, idle_calls)
    for picks, exclude, which in requests:
        scope = SCOPES[which]
        history = [pool[pick % len(pool)] for pick in picks]
        expected = outcome(scope, history, exclude, None)
        for _ in range(2):
            hashed.clear()
            assert outcome(scope, copy.deepcopy(history), exclude, memo) == expected
            assert hashed == ([] if isinstance(expected[0], type) else [True])
            assert memo.bytes <= capacity


# --- hits render nothing, and the totals are still checked ----------------------------


def never(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("rendered again")


def test_a_warm_history_renders_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    memo = RenderedMessages()
    history = [*HISTORY, sdk_dump("done", [CALL]), {"role": "tool", "content": [1, 1.0, True]}]
    cold = history_digests(SCOPE, history, memo=memo)
    assert len(memo) == len(history)
    for renderer in ("render_assistant", "append_framed", "normalize_message"):
        monkeypatch.setattr(history_digest, renderer, never)
    monkeypatch.setattr(Budget, "render_flat", never)
    monkeypatch.setattr(Budget, "render_text", never)
    warm = history_digests(SCOPE, copy.deepcopy(history), memo=memo)
    assert warm == cold and warm.final_state.digest == cold.final_state.digest


def test_a_hit_takes_the_envelope_fingerprint_remembered_with_the_text() -> None:
    """An assistant entry keeps its envelope fingerprint (the hash of its framed text under
    the flag's tag), and a hit uses it instead of hashing the text twice; so a memo that
    lied would show in the digests, which the property above compares."""
    memo = RenderedMessages()
    history = [USER, sdk_dump("done", [CALL])]
    cold = history_digests(SCOPE, history, memo=memo)
    assert cold == history_digests(SCOPE, history)
    user_key, assistant_key = (message_key(m) for m in history)
    assert user_key is not None and assistant_key is not None
    assert (memo.recall(user_key) or [])[3] is None
    entry = memo.recall(assistant_key)
    assert entry is not None and entry[3] == cold.assistant_blocks[0].envelope_fingerprint
    user_text = (memo.recall(user_key) or [b""])[0]
    assert memo.bytes == (
        len(user_key) + len(user_text) + ENTRY_OVERHEAD  # no fingerprint to count
        + len(assistant_key) + len(entry[0]) + ENTRY_OVERHEAD + ENVELOPE_OVERHEAD
    )  # fmt: skip
    entry[3] = "0" * 64
    warm = history_digests(SCOPE, copy.deepcopy(history), memo=memo)
    assert warm.assistant_blocks[0].envelope_fingerprint == "0" * 64
    assert warm.boundaries == cold.boundaries  # the chain hashes the text itself


@pytest.mark.parametrize("limit", ["bytes", "nodes"])
def test_a_hit_over_the_totals_gets_the_exact_refusal(hashed: list[bool], limit: str) -> None:
    """Remembered from a shorter history, a message the longer one cannot fit is rendered
    again, which refuses it as it always did, before anything is hashed."""
    message = {"role": "user", "content": "x" * 40, "parts": [1, 2, 3]}
    one = history_digests(SCOPE, [message])
    size, nodes = one.message_sizes[0], one.nodes_used - SCOPE.nodes
    room = {"bytes": 3 * size, "nodes": 3 * nodes}[limit]
    scope = make_scope(limits=_limits_for(SCOPE, **{limit: room}))
    memo = RenderedMessages()
    history_digests(scope, [message] * 3, memo=memo)  # fits, within a message of the limit
    assert len(memo) == 1
    hashed.clear()
    with pytest.raises(CanonicalRefused) as refused:
        history_digests(scope, [message] * 4, memo=memo)
    assert refused.value.reason == limit and hashed == []


def test_a_change_of_flag_or_limits_forgets_everything() -> None:
    memo = RenderedMessages()
    message = {"role": "assistant", "content": "x", "reasoning_content": "why"}
    history_digests(SCOPE, [USER, message], memo=memo)
    assert len(memo) == 2
    history_digests(SCOPE, [USER], exclude_reasoning_content=True, memo=memo)
    assert len(memo) == 1  # rebound to the other flag: only what it rendered since
    history_digests(SCOPES[1], [message], exclude_reasoning_content=True, memo=memo)
    assert len(memo) == 1


# --- what is never remembered ----------------------------------------------------------

NOT_REMEMBERED: list[tuple[str, Any, str | None]] = [
    ("streamed: too long for one chunk", {"role": "user", "content": LONG[0]}, None),
    ("streamed: escapes past one chunk", {"role": "assistant", "content": LONG[1]}, None),
    ("streamed: non-ascii past one chunk", {"role": "tool", "content": [LONG[2]]}, None),
    ("an integer beyond 64 bits", {"role": "user", "content": [2**64]}, "number"),
    ("nan", {"role": "user", "content": [float("nan")]}, "number"),
    ("a lone surrogate", {"role": "user", "content": "\ud800"}, "string"),
    ("a str subclass value", {"role": "user", "content": Text("x")}, "type"),
    ("a str subclass key", {"role": "user", Text("content"): "x"}, "key"),
    ("an enum role", {"role": Role.ASSISTANT, "content": "x"}, "type"),
    ("bytes", {"role": "user", "content": b"x"}, "type"),
    ("a dict subclass", OrderedDict(role="user", content="x"), "type"),
    ("not a dict", ["user", "x"], None),
    ("too deep", {"role": "user", "content": [[[[[[[[[["x"]]]]]]]]]]}, "depth"),
]


@pytest.mark.parametrize(
    ("name", "message", "reason"), NOT_REMEMBERED, ids=[n for n, _, _ in NOT_REMEMBERED]
)
def test_shapes_that_are_never_remembered(name: str, message: Any, reason: str | None) -> None:
    scope = SCOPES[3]  # depth 5
    memo = RenderedMessages()
    expected = outcome(scope, [USER, message], False, None)
    assert outcome(scope, [USER, message], False, memo) == expected
    assert list(memo._entries) == [message_key(USER)]  # the user message before it only
    assert (expected[1] if isinstance(expected[0], type) else None) == reason


# --- the key ----------------------------------------------------------------------------

APART = [
    (1, 1.0), (1, True), (1, "1"), (0, False), (0.0, -0.0), (None, float("nan")),
    ([1, 2], (1, 2)), ({"a": 1, "b": 2}, {"b": 2, "a": 1}), (2**64, float(2**64)),
    ("é", "e\u0301"), ([], {}), ("", None),
]  # fmt: skip


@pytest.mark.parametrize(("one", "other"), APART, ids=[repr(pair) for pair in APART])
def test_the_key_tells_apart_values_that_render_apart(one: Any, other: Any) -> None:
    assert message_key({"role": "user", "content": one}) != message_key(
        {"role": "user", "content": other}
    )


def test_the_key_is_the_same_for_equal_values_whatever_they_share() -> None:
    text = "".join(["shared ", "text"])  # one object, twice
    shared = {"role": "user", "content": [text, text], "name": text}
    fresh = {"role": "user", "content": ["shared text", "shared text"], "name": "shared text"}
    assert message_key(shared) == message_key(fresh) == message_key(copy.deepcopy(shared))


@pytest.mark.parametrize(
    "message",
    [{"role": Text("user")}, {"role": Role.USER}, OrderedDict(role="user"),
     {"role": "user", "content": object()}],
)  # fmt: skip
def test_no_key_for_what_marshal_cannot_write_exactly(message: Any) -> None:
    assert message_key(message) is None


def test_no_key_past_marshal_nesting() -> None:
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    assert message_key({"role": "user", "content": deep}) is None


# --- the bound ---------------------------------------------------------------------------


def cost(key: bytes, framed: bytes) -> int:
    return len(key) + len(framed) + ENTRY_OVERHEAD


def next_calls(memo: RenderedMessages, count: int = 1) -> None:
    for _ in range(count):
        memo.entries(SCOPE.limits, False)


def test_the_least_recently_used_idle_entries_go_first() -> None:
    keys = [b"k%d" % n for n in range(6)]
    framed = b"\0" * 8 + b"{}"
    memo = RenderedMessages(3 * cost(keys[0], framed))
    next_calls(memo)
    for key in keys[:3]:
        memo.remember(key, framed, 1)
    memo.remember(keys[3], framed, 1)  # all in use by this call: not kept
    assert [key in memo._entries for key in keys] == [True, True, True, False, False, False]
    next_calls(memo, IDLE_CALLS - 1)
    assert memo.recall(keys[0]) == [framed, 1, memo.calls, None]  # in use again
    memo.remember(keys[3], framed, 1)  # the others are not idle yet: not kept
    next_calls(memo)
    memo.remember(keys[3], framed, 1)  # keys[1] is idle now, and the least recently used
    memo.remember(keys[4], framed, 1)  # then keys[2]
    memo.remember(keys[5], framed, 1)  # keys[0] is not idle: not kept
    assert [key in memo._entries for key in keys] == [True, False, False, True, True, False]
    assert memo.bytes == 3 * cost(keys[0], framed) and len(memo) == 3
    memo.remember(keys[0], framed, 1)  # already there: counted once
    assert memo.bytes == 3 * cost(keys[0], framed)


@pytest.mark.parametrize(
    ("entries", "capacity", "idle", "kept"),
    [
        ([10, 10, 10], 3 * (10 + ENTRY_OVERHEAD), False, [0, 1, 2]),
        ([10, 10, 10], 3 * (10 + ENTRY_OVERHEAD) - 1, False, [0, 1]),
        ([10, 10, 10], 3 * (10 + ENTRY_OVERHEAD) - 1, True, [1, 2]),
        ([10, 50, 10], 2 * (10 + ENTRY_OVERHEAD) + 50, False, [0, 1]),
        ([10, 50, 10], 2 * (10 + ENTRY_OVERHEAD) + 50, True, [1, 2]),
        ([50, 10, 10], 2 * (10 + ENTRY_OVERHEAD) + 50, True, [1, 2]),  # one makes room for two
        ([10, 3000, 10], 2000, True, [0, 2]),  # larger than the whole bound: not kept
        ([5000], 4096, True, []),
    ],
)
def test_the_bound_is_bytes(entries: list[int], capacity: int, idle: bool, kept: list[int]) -> None:
    """Remembered in one call (each in use) or each after the others went idle."""
    memo = RenderedMessages(capacity)
    keys = [b"%d" % n for n in range(len(entries))]  # one byte each
    for key, size in zip(keys, entries, strict=True):
        next_calls(memo, IDLE_CALLS if idle else 0)
        memo.remember(key, b"x" * (size - 1), 1)
    assert [n for n, key in enumerate(keys) if key in memo._entries] == kept
    assert memo.bytes == sum(entries[n] + ENTRY_OVERHEAD for n in kept) <= capacity


@pytest.mark.parametrize(
    ("idle_calls", "renders", "keys"), [(IDLE_CALLS, [0, 5], [10, 6]), (0, [10, 10], [10, 10])]
)
def test_histories_outgrowing_the_bound_keep_what_is_in_use(
    monkeypatch: pytest.MonkeyPatch, idle_calls: int, renders: list[int], keys: list[int]
) -> None:
    """Two sessions taking turns, their histories together half again the bound: each keeps
    what it had when the bound was reached, and past its first message with no room a
    history goes on without the memo (no key either). Plain LRU (idle_calls 0) would
    evict, on each turn, what that turn is about to look up: nothing is ever found."""
    one, other = (
        [{"role": "user", "content": f"{name} {n:04}"} for n in range(10)] for name in "ab"
    )
    entry = len(message_key(one[0]) or b"") + 8 + len(render_sorted(one[0])) + ENTRY_OVERHEAD
    memo = RenderedMessages(15 * entry, idle_calls)
    rendered: list[int] = []
    keyed: list[int] = []
    flat = Budget.render_flat

    def counting(budget: Budget, value: dict[Any, Any]) -> bytes | None:
        rendered[-1] += 1
        return flat(budget, value)

    def key(message: dict[str, Any]) -> bytes | None:
        keyed[-1] += 1
        return message_key(message)

    monkeypatch.setattr(Budget, "render_flat", counting)
    monkeypatch.setattr(history_digest, "message_key", key)
    for history in (one, other, one, other, one, other):
        rendered.append(0)
        keyed.append(0)
        history_digests(SCOPE, copy.deepcopy(history), memo=memo)
    assert rendered[:2] == [10, 10] and rendered[2:] == renders * 2
    assert keyed[2:] == keys * 2


def test_the_renderer_paths_are_all_remembered() -> None:
    """The one-pass assistant shapes, flat messages and the general path alike."""
    history = [USER, sdk_dump("done", None), *HISTORY, {"role": "tool", "content": [1.5]}]
    memo = RenderedMessages()
    history_digests(SCOPE, history, memo=memo)
    assert len(memo) == len({message_key(message) for message in history})
