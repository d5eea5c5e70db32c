"""A replay the upstream refuses, over real loopback servers with the official SDK: the
turn is answered by one resend without replay (JSON and SSE), the refused blocks never
replay again, and the cache API counts what happened. With the resend off the client gets
the upstream's 400 (ciphertext redacted) once, and its own retry succeeds."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

from tests.support.stack import Stack, running_stack

ADMIN = "admin-token-0123456789"
CACHE_ON = {"REASONING_CACHE_ENABLED": "1", "RELAY_ADMIN_TOKEN": ADMIN}
CONTINUITY = re.compile(r"continuity: replayed=(\d+) intact=(\d+) misplaced=(\d+)")


@pytest.fixture
def cached(tmp_path: Path) -> Iterator[Stack]:
    with running_stack(tmp_path / "data", CACHE_ON) as stack:
        yield stack


@pytest.fixture
def no_resend(tmp_path: Path) -> Iterator[Stack]:
    env = {**CACHE_ON, "RELAY_REPLAY_REJECTION_RESEND": "0"}
    with running_stack(tmp_path / "data", env) as stack:
        yield stack


def ask(stack: Stack, messages: list[dict[str, Any]], *, stream: bool) -> str:
    client = stack.openai()
    if stream:
        with client.chat.completions.create(
            model="gpt-5", messages=messages, stream=True
        ) as chunks:
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    answer = client.chat.completions.create(model="gpt-5", messages=messages)
    return answer.choices[0].message.content or ""


def continuity(text: str) -> tuple[int, int, int]:
    match = CONTINUITY.search(text)
    assert match, text
    replayed, intact, misplaced = (int(g) for g in match.groups())
    return replayed, intact, misplaced


def replay_stats(stack: Stack) -> dict[str, Any]:
    answer = requests.get(
        f"http://127.0.0.1:{stack.relay.port}/api/cache/reasoning",
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=10,
    )
    answer.raise_for_status()
    stats: dict[str, Any] = answer.json()["stats"]["replay"]
    return stats


def reasoning_items(body: dict[str, Any]) -> int:
    return sum(1 for item in body["input"] if item.get("type") == "reasoning")


def two_turns(stack: Stack, stream: bool) -> list[dict[str, Any]]:
    """A conversation whose next request replays two blocks."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "first"}]
    for question in ("second", "third"):
        messages += [
            {"role": "assistant", "content": ask(stack, messages, stream=stream)},
            {"role": "user", "content": question},
        ]
    return messages


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_refused_replay_is_resent_once_without_it(cached: Stack, stream: bool) -> None:
    messages = two_turns(cached, stream)
    assert continuity(messages[-2]["content"]) == (1, 1, 0)  # the second turn replayed
    cached.fake.rotate_key()
    before = len(cached.fake.requests)
    text = ask(cached, messages, stream=stream)
    assert continuity(text) == (0, 0, 0)  # the resend: answered, without replay
    refused, resent = cached.fake.requests[before:]
    assert refused.status == 400 and reasoning_items(refused.body) == 2
    assert resent.status == 200 and reasoning_items(resent.body) == 0
    assert resent.body["store"] is False
    assert "reasoning.encrypted_content" in resent.body["include"]
    stats = replay_stats(cached)
    assert stats["rejectedByReason"] == {"invalid_encrypted_content": 1}
    assert (stats["dispatched"], stats["accepted"], stats["rejected"], stats["resent"]) == (
        2,
        1,
        1,
        1,
    )
    assert stats["byScope"] == [
        {"kind": "chat", "model": "gpt-5", "dispatched": 2, "accepted": 1,
         "rejected": {"invalid_encrypted_content": 1}, "resent": 1},
    ]  # fmt: skip

    # The next turn replays the resend's block alone, across a restart too.
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "4th"}]
    cached.restart_relay()
    assert continuity(ask(cached, messages, stream=stream)) == (1, 1, 0)
    assert reasoning_items(cached.fake.requests[-1].body) == 1
    # A branch ending at a refused block's answer: that block is not offered again.
    branch = [*messages[:4], {"role": "user", "content": "another third"}]
    before = len(cached.fake.requests)
    assert continuity(ask(cached, branch, stream=stream)) == (0, 0, 0)
    assert len(cached.fake.requests) == before + 1  # no second refusal, no resend


def test_a_failing_resend_is_the_answer(cached: Stack) -> None:
    messages = two_turns(cached, stream=False)
    cached.fake.rotate_key()
    limited = {"status": 429, "type": "rate_limit_exceeded", "message": "Rate limit reached.",
               "code": "rate_limit_exceeded"}  # fmt: skip
    cached.script({}, {"http_error": limited})  # the refused call, then the resend
    before = len(cached.fake.requests)
    with pytest.raises(openai.RateLimitError):
        ask(cached, messages, stream=False)
    assert [r.status for r in cached.fake.requests[before:]] == [400, 429]
    stats = replay_stats(cached)
    assert (stats["rejected"], stats["resent"]) == (1, 1)


def test_with_the_resend_off_the_refusal_is_the_answer_once(no_resend: Stack) -> None:
    messages = two_turns(no_resend, stream=True)
    no_resend.fake.rotate_key()
    client = no_resend.openai()
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="gpt-5", messages=messages)
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["code"] == "invalid_encrypted_content"
    assert error["message"] == "The encrypted content <redacted> could not be verified."
    assert "gAAAA" not in str(refused.value.response.text)
    # The user's own retry: the blocks are retired, so it goes without replay and succeeds.
    before = len(no_resend.fake.requests)
    assert continuity(ask(no_resend, messages, stream=True)) == (0, 0, 0)
    assert len(no_resend.fake.requests) == before + 1
    stats = replay_stats(no_resend)
    assert (stats["dispatched"], stats["rejected"], stats["resent"]) == (2, 1, 0)


def test_an_ordinary_400_is_not_a_rejection(cached: Stack) -> None:
    messages = two_turns(cached, stream=False)
    unsupported = {
        "status": 400,
        "type": "invalid_request_error",
        "message": "Unsupported parameter: 'x'.",
        "code": "unsupported_parameter",
    }
    cached.script({"http_error": unsupported})  # fmt: skip
    before = len(cached.fake.requests)
    with pytest.raises(openai.BadRequestError):
        ask(cached, messages, stream=False)
    assert len(cached.fake.requests) == before + 1  # no resend
    assert replay_stats(cached)["rejected"] == 0
    # The blocks are not retired: the next request replays both again.
    assert continuity(ask(cached, messages, stream=False)) == (2, 2, 0)
