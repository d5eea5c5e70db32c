"""fakeupstream.prompt_cache: cached_tokens as OpenAI counts them, on the fake's clock."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakeupstream.__main__ import parse_args
from fakeupstream.fake import FakeUpstream
from fakeupstream.prompt_cache import (
    BLOCK_TOKENS,
    CHARS_PER_TOKEN,
    DEFAULT_TTL_S,
    EXTENDED_TTL_S,
    MIN_CACHED_TOKENS,
    Partition,
    PromptCache,
    continuation,
    prompt_text,
    retention_s,
    seen_item,
    tokens,
)
from fakeupstream.scripts import parse_script
from relay.clock import ManualClock

KEY = "sk-test"
HERE = Partition.of({"model": "gpt-5"}, KEY)


def text_of(count: int, fill: str = "a") -> str:
    """A prompt of exactly ``count`` approximate tokens."""
    return fill * (count * CHARS_PER_TOKEN)


def full_blocks(count: int) -> int:
    """What an exact repeat of a ``count``-token prompt has cached."""
    if count < MIN_CACHED_TOKENS:
        return 0
    return MIN_CACHED_TOKENS + (count - MIN_CACHED_TOKENS) // BLOCK_TOKENS * BLOCK_TOKENS


@pytest.mark.parametrize(
    ("written", "asked", "cached"),
    [
        (1023, 1023, 0),  # nothing below 1,024 tokens
        (1024, 1024, 1024),
        (1024, 5000, 1024),  # the longer prompt shares the first 1,024
        (1151, 1151, 1024),  # a partial block is not cached
        (1152, 1152, 1152),
        (1152, 1151, 1024),  # the asked prompt is shorter than the second block
        (4000, 4000, full_blocks(4000)),
        (4000, 2000, full_blocks(2000)),
        (2000, 4000, full_blocks(2000)),
    ],
)
def test_cached_tokens_are_the_longest_shared_prefix_in_blocks(
    written: int, asked: int, cached: int
) -> None:
    cache = PromptCache()
    cache.write(HERE, text_of(written), 0.0, DEFAULT_TTL_S)
    assert cache.lookup(HERE, text_of(asked), 1.0) == cached


@pytest.mark.parametrize(
    ("differs_at_token", "cached"),
    [
        (0, 0),
        (1023, 0),  # inside the first 1,024 tokens: nothing
        (1024, 1024),
        (1151, 1024),
        (1152, 1152),
        (2999, full_blocks(2999)),
    ],
)
def test_a_difference_ends_the_cached_prefix_at_the_block_before_it(
    differs_at_token: int, cached: int
) -> None:
    cache = PromptCache()
    original = text_of(3000)
    at = differs_at_token * CHARS_PER_TOKEN
    changed = original[:at] + "b" + original[at + 1 :]
    cache.write(HERE, original, 0.0, DEFAULT_TTL_S)
    assert cache.lookup(HERE, changed, 1.0) == cached


@pytest.mark.parametrize(
    ("other", "cached"),
    [
        (Partition.of({"model": "gpt-5"}, KEY), full_blocks(2000)),
        (Partition.of({"model": "gpt-5", "prompt_cache_key": "k"}, KEY), 0),
        (Partition.of({"model": "gpt-5.1"}, KEY), 0),
        (Partition.of({"model": "gpt-5"}, "sk-another-org"), 0),
    ],
)
def test_the_key_the_model_and_the_organization_partition_the_cache(
    other: Partition, cached: int
) -> None:
    cache = PromptCache()
    cache.write(HERE, text_of(2000), 0.0, DEFAULT_TTL_S)
    assert cache.lookup(other, text_of(2000), 1.0) == cached


def test_prefixes_expire_after_the_ttl_of_inactivity_and_use_refreshes_them() -> None:
    cache = PromptCache(ttl_s=300)
    cache.write(HERE, text_of(2000), 0.0, 300)
    assert cache.lookup(HERE, text_of(2000), 299.0) == full_blocks(2000)
    cache.write(HERE, text_of(2000), 299.0, 300)  # the request that hit wrote it again
    assert cache.lookup(HERE, text_of(2000), 598.0) == full_blocks(2000)
    assert cache.lookup(HERE, text_of(2000), 599.0) == 0
    assert len(cache) < len(list(range(1024, 2001, 128)))  # the expired ones were dropped


@pytest.mark.parametrize(
    ("body", "ttl"),
    [
        ({}, DEFAULT_TTL_S),
        ({"prompt_cache_retention": "in_memory"}, DEFAULT_TTL_S),
        ({"prompt_cache_retention": "24h"}, EXTENDED_TTL_S),
    ],
)
def test_retention_24h_extends_the_ttl(body: dict[str, Any], ttl: float) -> None:
    assert retention_s(body, DEFAULT_TTL_S) == ttl


def test_a_zero_ttl_caches_nothing() -> None:
    cache = PromptCache(ttl_s=0)
    cache.write(HERE, text_of(2000), 0.0, 0)
    assert cache.lookup(HERE, text_of(2000), 0.0) == 0


def test_memory_is_bounded_per_partition_and_in_partitions() -> None:
    cache = PromptCache(max_prefixes=10, max_partitions=2)
    cache.write(HERE, text_of(1024 + 128 * 20, "x"), 0.0, DEFAULT_TTL_S)  # 21 prefixes
    assert len(cache) == 10
    # The newest (longest) prefixes stayed: an exact repeat still hits in full.
    assert cache.lookup(HERE, text_of(1024 + 128 * 20, "x"), 1.0) == 1024 + 128 * 20
    others = [Partition.of({"model": f"m{n}"}, KEY) for n in range(2)]
    for other in others:
        cache.write(other, text_of(1024), 0.0, DEFAULT_TTL_S)
    assert cache.lookup(HERE, text_of(1024 + 128 * 20, "x"), 1.0) == 0  # evicted, oldest
    assert [cache.lookup(o, text_of(1024), 1.0) for o in others] == [1024, 1024]


@pytest.mark.parametrize(
    ("sent", "seen"),
    [
        (
            {"role": "user", "content": "hi"},
            {"type": "message", "role": "user", "content": "hi"},
        ),
        (
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "message", "role": "user", "content": "hi"},
        ),
        (
            {
                "id": "msg_1",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "phase": "final_answer",
                "content": [{"type": "output_text", "annotations": [], "text": "a"}],
            },
            {"type": "message", "role": "assistant", "content": "a"},
        ),
        (
            {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAA"},
            {"type": "reasoning", "encrypted_content": "gAAA"},
        ),
        (
            {"id": "rs_1", "type": "reasoning", "summary": []},  # stored, named by id
            {"type": "reasoning", "id": "rs_1", "summary": []},
        ),
        (
            {
                "id": "fc_1",
                "type": "function_call",
                "status": "completed",
                "call_id": "c",
                "name": "f",
                "arguments": "{}",
            },
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": "x"},
            {"type": "function_call_output", "call_id": "c", "output": "x"},
        ),
    ],
)
def test_items_are_keyed_as_the_model_reads_them(sent: dict[str, Any], seen: Any) -> None:
    assert seen_item(sent) == seen


def test_the_prompt_is_instructions_tools_then_items_and_appending_extends_it() -> None:
    body = {"instructions": "be brief", "tools": [{"type": "function", "name": "f"}]}
    items: list[Any] = [{"role": "user", "content": "one"}]
    first = prompt_text(body, items)
    assert [json.loads(line) for line in first.splitlines()] == [
        {"instructions": "be brief"},
        {"tool": {"type": "function", "name": "f"}},
        {"type": "message", "role": "user", "content": "one"},
    ]
    output = [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]
    later = items + output + [{"type": "function_call_output", "call_id": "c", "output": "x"}]
    assert prompt_text(body, later).startswith(first + continuation(output))


def test_dropping_the_reasoning_item_loses_what_the_previous_answer_cached() -> None:
    body = {"instructions": "s" * 4500, "model": "gpt-5"}
    prompt: list[Any] = [{"role": "user", "content": "u" * 1000}]
    reasoning = {"type": "reasoning", "encrypted_content": "g" * 2000}
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "a" * 1000}
    result = {"type": "function_call_output", "call_id": "c", "output": "r" * 2000}
    cache = PromptCache()
    first = prompt_text(body, prompt)
    cache.write(HERE, first + continuation([reasoning, call]), 0.0, DEFAULT_TTL_S)
    replayed = prompt_text(body, [*prompt, reasoning, call, result])
    dropped = prompt_text(body, [*prompt, call, result])
    with_replay = cache.lookup(HERE, replayed, 1.0)
    without = cache.lookup(HERE, dropped, 1.0)
    assert without == full_blocks(tokens(first))  # only the previous prompt
    assert with_replay == full_blocks(tokens(first + continuation([reasoning, call])))
    assert with_replay > without


@st.composite
def sessions(draw: st.DrawFn) -> list[tuple[str, float]]:
    """Prompts built from a few shared pieces (so prefixes repeat), each after a pause."""
    pieces = [text_of(n, c) for n, c in ((700, "a"), (300, "b"), (129, "c"), (40, "d"))]
    steps = draw(
        st.lists(
            st.tuples(
                st.lists(st.sampled_from(range(len(pieces))), min_size=1, max_size=8),
                st.floats(min_value=0, max_value=2 * DEFAULT_TTL_S),
            ),
            min_size=1,
            max_size=8,
        )
    )
    return [("".join(pieces[i] for i in chosen), pause) for chosen, pause in steps]


@settings(max_examples=60, deadline=None)
@given(sessions())
def test_cached_is_blocks_of_the_input_an_exact_repeat_hits_and_the_ttl_ends_it(
    steps: list[tuple[str, float]],
) -> None:
    cache = PromptCache()
    now = 0.0
    for text, pause in steps:
        now += pause
        input_tokens = tokens(text)
        cached = cache.lookup(HERE, text, now)
        assert cached <= input_tokens
        assert cached == 0 or (
            cached >= MIN_CACHED_TOKENS and (cached - MIN_CACHED_TOKENS) % BLOCK_TOKENS == 0
        )
        cache.write(HERE, text, now, DEFAULT_TTL_S)
        # Just written, so the longest prefix answers: this lookup drops nothing.
        assert cache.lookup(HERE, text, now + DEFAULT_TTL_S - 1) == full_blocks(input_tokens)
    for text, _ in steps:  # the newest write was at ``now``: all of it is gone a TTL later
        assert cache.lookup(HERE, text, now + DEFAULT_TTL_S) == 0
    assert len(cache) == 0  # each expired prefix met was dropped


BODY = {
    "model": "gpt-5",
    "instructions": "You are a coding agent. " * 300,
    "input": [{"role": "user", "content": "Fix the failing test."}],
    "include": ["reasoning.encrypted_content"],
    "store": False,
}


def usage_of(fake: FakeUpstream, body: dict[str, Any], **script: Any) -> dict[str, Any]:
    answer, _ = fake.answer(body, KEY, parse_script(script))
    usage: dict[str, Any] = json.loads(answer.frames[0])["usage"]
    return usage


def test_the_fake_reports_the_prompt_it_saw_and_what_of_it_was_cached() -> None:
    clock = ManualClock()
    fake = FakeUpstream(clock=clock, seed=1)
    items = BODY["input"]
    assert isinstance(items, list)
    expected = tokens(prompt_text(BODY, items))
    first = usage_of(fake, BODY)
    assert first["input_tokens"] == expected > MIN_CACHED_TOKENS
    assert first["input_tokens_details"]["cached_tokens"] == 0
    clock.advance(DEFAULT_TTL_S - 1)
    again = usage_of(fake, BODY)
    assert again["input_tokens_details"]["cached_tokens"] == full_blocks(expected)
    assert again["total_tokens"] == expected + again["output_tokens"]
    clock.advance(DEFAULT_TTL_S)
    assert usage_of(fake, BODY)["input_tokens_details"]["cached_tokens"] == 0
    fake.reset()
    assert usage_of(fake, BODY)["input_tokens_details"]["cached_tokens"] == 0


@pytest.mark.parametrize(
    ("usage", "input_tokens", "cached"),
    [
        ({"cached_tokens": 7}, None, 7),
        ({"input_tokens": 100}, 100, 100),  # the measured hit never exceeds the input
        ({"input_tokens": 5000, "cached_tokens": 0}, 5000, 0),
    ],
)
def test_scripted_usage_wins_over_the_measured_counts(
    usage: dict[str, int], input_tokens: int | None, cached: int
) -> None:
    fake = FakeUpstream(clock=ManualClock(), seed=1)
    usage_of(fake, BODY)
    got = usage_of(fake, BODY, usage=usage)
    if input_tokens is not None:
        assert got["input_tokens"] == input_tokens
    assert got["input_tokens_details"]["cached_tokens"] == cached


@pytest.mark.parametrize(
    ("argv", "ttl"),
    [
        ([], DEFAULT_TTL_S),
        (["--prompt-cache-ttl", "600"], 600.0),
        (["--prompt-cache-ttl", "0"], 0.0),
    ],
)
def test_the_cli_sets_the_ttl(argv: list[str], ttl: float) -> None:
    assert parse_args(["--port", "0", *argv]).prompt_cache_ttl == ttl


def test_the_cli_refuses_a_negative_ttl(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--port", "0", "--prompt-cache-ttl", "-1"])
    assert "--prompt-cache-ttl must be 0 or more" in capsys.readouterr().err
