"""Properties of canonical JSON, normalization and prefix digests (hypothesis)."""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core import canonical
from relay.core.canonical import Budget, canonical_bytes
from relay.core.envelope import normalize_message
from relay.core.identity import history_digests
from relay.core.predict import reserialize_arguments
from tests.support.canonical_reference import identity_scope, reference, reference_digests

SCOPE = identity_scope()

# Any code point but lone surrogates, which json.loads never produces from a valid body.
text = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
long_text = st.text(st.sampled_from('ab\n"\\\t\x01\x7f\u00e9\u4e2d\U0001f600'), max_size=9000)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(text, inner, max_size=5),
    max_leaves=30,
)

text_part = st.builds(lambda t: {"type": "text", "text": t}, text)
content = st.none() | text | st.lists(text_part, max_size=3) | json_values
tool_call = st.fixed_dictionaries(
    {
        "id": text,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": text, "arguments": text}),
    },
    optional={"index": st.integers(0, 3) | json_values, "extra": json_values},
)
assistant = st.fixed_dictionaries(
    {"role": st.just("assistant")},
    optional={
        "content": content,
        "tool_calls": st.lists(tool_call, max_size=3) | json_values,
        "reasoning_content": text,
        "refusal": st.none() | text,
    },
)
other = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "tool", "system", "developer"]), "content": content},
    optional={"name": text, "tool_call_id": text},
)
messages = st.lists(assistant | other | json_values, max_size=8)


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's insertion order shuffled."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: shuffled(item, rng) for key, item in items}
    if isinstance(value, list):
        return [shuffled(item, rng) for item in value]
    return value


@given(json_values, st.randoms(use_true_random=False))
def test_canonical_output_ignores_insertion_order(value: Any, rng: random.Random) -> None:
    assert canonical_bytes(shuffled(value, rng)) == canonical_bytes(value)


@given(json_values | long_text | st.dictionaries(long_text, long_text, max_size=3))
@settings(max_examples=200)
def test_canonical_output_is_the_documented_encoding_and_measured_exactly(
    value: Any,
) -> None:
    out = canonical_bytes(value)
    assert out == reference(value)
    assert json.loads(out) == value
    assert Budget().measure(value) == len(out)
    assert b"".join(canonical._pieces(value)) == out  # the streaming path agrees


@given(assistant | other | json_values, st.booleans())
def test_normalization_is_idempotent_and_reparses(message: Any, exclude: bool) -> None:
    once = normalize_message(message, exclude_reasoning_content=exclude)
    assert normalize_message(once, exclude_reasoning_content=exclude) == once
    assert json.loads(canonical_bytes(once)) == once


@given(messages)
@settings(max_examples=60)
def test_prefix_digests_hold_for_random_histories(history: list[Any]) -> None:
    digests = history_digests(SCOPE, history)
    for k in range(len(history) + 1):
        assert history_digests(SCOPE, history[:k]).boundaries[-1] == digests.boundaries[k]
    for block in digests.assistant_blocks:
        assert history_digests(SCOPE, history[: block.position + 1]).assistant_blocks[-1] == block


# Up to 150,000 code points: past what renders in one pass, and past one chunk (streamed).
huge_text = st.builds(
    lambda piece, times: piece * times,
    st.text(st.sampled_from('ab\n"\\\x01\x7f\u00e9\U0001f600'), min_size=1, max_size=50),
    st.integers(1, 3000),
)
huge = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": huge_text})


@given(st.lists(assistant | other | json_values | huge, max_size=6), st.booleans())
@settings(max_examples=100)
def test_digests_are_the_documented_framing_of_the_reference_encoding(
    history: list[Any], exclude: bool
) -> None:
    """Whichever renderer a message takes (flat, one-pass assistant, measured, streamed),
    its bytes are the reference encoding of its normalized form, framed as documented."""
    digests = history_digests(SCOPE, history, exclude_reasoning_content=exclude)
    boundaries, sizes, fingerprints = reference_digests(SCOPE, history, exclude)
    assert list(digests.boundaries) == boundaries
    assert list(digests.message_sizes) == sizes
    assert [block.envelope_fingerprint for block in digests.assistant_blocks] == fingerprints


@given(messages, assistant)
@settings(max_examples=60)
def test_extending_a_state_equals_hashing_the_longer_history(
    history: list[Any], envelope: dict[str, Any]
) -> None:
    key, state = history_digests(SCOPE, history).final_state.extend(envelope)
    longer = history_digests(SCOPE, [*history, envelope])
    assert key == longer.assistant_blocks[-1]
    assert state.digest == longer.boundaries[-1]


@given(json_values)
def test_reserialized_arguments_are_a_fixed_point(value: Any) -> None:
    arguments = json.dumps(value, ensure_ascii=False)
    once = reserialize_arguments(arguments)
    if once is not None:
        assert json.loads(once) == json.loads(arguments)
        assert reserialize_arguments(once) == once
