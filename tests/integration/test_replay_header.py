"""``X-Relay-Replay`` on every relayed answer, JSON and SSE, over real loopback servers:
the blocks a request replayed, or why none (relay.core.replay_header)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.stack import Stack, running_stack

CACHE_ON = {"REASONING_CACHE_ENABLED": "1"}


def post(stack: Stack, path: str, body: dict[str, Any], *, stream: bool) -> tuple[str, str]:
    """The header and the answer's text (the whole stream for SSE)."""
    answer = requests.post(
        f"{stack.base_url}{path}", json={**body, "stream": stream}, headers=stack.headers(),
        timeout=30, stream=stream,
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    text = answer.text
    if stream:
        assert answer.headers["Content-Type"].startswith("text/event-stream")
    return answer.headers["X-Relay-Replay"], text


def chat(
    stack: Stack, messages: list[dict[str, Any]], *, stream: bool, model: str = "gpt-5"
) -> tuple[str, str]:
    header, text = post(stack, "/chat/completions", {"model": model, "messages": messages},
                        stream=stream)  # fmt: skip
    return header, text


def content(text: str, stream: bool) -> str:
    import json

    if not stream:
        return str(json.loads(text)["choices"][0]["message"]["content"])
    parts = []
    for line in text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices", []):
                parts.append(choice["delta"].get("content") or "")
    return "".join(parts)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_conversation_says_what_each_turn_replayed(tmp_path: Path, stream: bool) -> None:
    with running_stack(tmp_path / "data", CACHE_ON) as stack:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "first"}]
        headers = []
        for question in ("second", "third"):
            header, text = chat(stack, messages, stream=stream)
            headers.append(header)
            messages += [{"role": "assistant", "content": content(text, stream)},
                         {"role": "user", "content": question}]  # fmt: skip
        header, _ = chat(stack, messages, stream=stream)
        headers.append(header)
        assert headers == ["none; reason=nothing_to_replay", "replayed=1", "replayed=2"]
        edited = [*messages[:1], {"role": "assistant", "content": "not what it said"},
                  {"role": "user", "content": "again"}]  # fmt: skip
        assert chat(stack, edited, stream=stream)[0] == "none; reason=unmatched"
        assert chat(stack, messages, stream=stream, model="gpt-4.1")[0] == (
            "none; reason=not_a_reasoning_model"
        )
        stack.fake.rotate_key()  # the next replay is refused, then resent without it
        assert chat(stack, messages, stream=stream)[0] == "none; reason=replay_rejected"
        header, _ = post(stack, "/responses", {"model": "gpt-5", "input": "hi"}, stream=stream)
        assert header == "none; reason=responses_passthrough"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_off_and_a_chat_provider(tmp_path: Path, stream: bool) -> None:
    with running_stack(tmp_path / "data", providers={"ds": {"kind": "chat"}}) as stack:
        messages = [{"role": "user", "content": "hi"}]
        assert chat(stack, messages, stream=stream)[0] == "off"
        assert chat(stack, messages, stream=stream, model="ds/deepseek-chat")[0] == (
            "none; reason=chat_provider"
        )


def test_no_session_to_spare_says_capacity_bypass(tmp_path: Path) -> None:
    env = {**CACHE_ON, "REASONING_CACHE_MAX_CONCURRENT": "0"}
    with running_stack(tmp_path / "data", env) as stack:
        header, _ = chat(stack, [{"role": "user", "content": "hi"}], stream=False)
        assert header == "none; reason=capacity_bypass"
