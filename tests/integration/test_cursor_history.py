"""Today's Cursor (Responses-shaped bodies on /chat/completions) keeps replaying when its
histories carry screenshots, and a history the relay still cannot derive says so."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from relay.ops.metrics import relay_metrics
from relay.ops.status import status_document
from relay.ops.status_view import render
from scenarios.cursor_steps import screenshot_part, user_item
from tests.support.cursor_client import post
from tests.support.cursor_shape import Conversation, continuity
from tests.support.stack import Stack, running_stack

CACHE_ON = {"REASONING_CACHE_ENABLED": "1"}


@pytest.fixture
def cached(tmp_path: Path) -> Iterator[Stack]:
    with running_stack(tmp_path / "data", CACHE_ON) as stack:
        yield stack


def fences(stack: Stack) -> dict[str, float]:
    return metric(stack, "relay_fences_total", "reason")


def status_table(stack: Stack) -> str:
    runtime, ops = stack.relay.runtime, stack.relay.ops
    assert runtime is not None and ops is not None

    async def build() -> str:
        doc = status_document(runtime, ops.sampler, ops.snapshots, offline_fake=False)
        return render(doc, colour=False)

    return stack.loop.run(build())


@pytest.mark.parametrize("stream", [True, False])
def test_a_screenshot_in_one_chat_leaves_replay_on_in_every_chat(
    cached: Stack, stream: bool
) -> None:
    """The measured bug: a screenshot made its chat underivable, which fenced the
    credential, so a second chat's third turn replayed 0 blocks instead of 2."""
    second = Conversation()
    assert continuity(second.turn(cached, user_item("list the files"), stream=stream)) == (0, 0, 0)
    assert continuity(second.turn(cached, user_item("open the first"), stream=stream)) == (1, 1, 0)
    shot = Conversation()
    look = user_item("what is wrong on this screen?", screenshot_part())
    assert continuity(shot.turn(cached, look, stream=stream)) == (0, 0, 0)
    assert continuity(second.turn(cached, user_item("and the next"), stream=stream)) == (2, 2, 0)
    # The chat with the screenshot replays too, turn after turn.
    again = user_item("and now?", screenshot_part(detail="high"))
    assert continuity(shot.turn(cached, again, stream=stream)) == (1, 1, 0)
    assert continuity(shot.turn(cached, user_item("thanks"), stream=stream)) == (2, 2, 0)
    assert fences(cached) == {}
    assert "fenced" not in status_table(cached)
    sent = cached.fake.requests[-1].body
    kinds = [item.get("type", "message") for item in sent["input"]]
    assert kinds.count("reasoning") == 2
    assert "stream_options" not in sent  # consumed: the Responses API rejects include_usage
    if stream:  # ... and yet the client gets the usage chunk it asked for
        shot.items.append(user_item("one more"))
        with post(cached, shot.body(stream=True)) as raw:
            chunks = [json.loads(line[6:]) for line in raw.iter_lines()
                      if line.startswith(b"data: {")]  # fmt: skip
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


def test_an_underivable_history_fences_and_says_why(
    cached: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    chat = Conversation()
    chat.turn(cached, user_item("hi"))
    # A built-in tool's call: what the model read from it is not in the request.
    search = {"type": "web_search_call", "id": "ws_1", "status": "completed",
              "action": {"type": "search", "query": "relay"}}  # fmt: skip
    chat.items.insert(1, search)
    with caplog.at_level(logging.INFO, logger="relay"):
        answer = chat.turn(cached, user_item("go on"))
    assert continuity(answer) == (0, 0, 0)
    fenced = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cache_fenced")]
    assert len(fenced) == 1
    assert "reason=item_type_web_search_call" in fenced[0] and "where=input[1]" in fenced[0]
    assert fences(cached) == {"item_type_web_search_call": 1.0}
    line = next(row for row in status_table(cached).splitlines() if row.startswith("fenced"))
    assert line.split(None, 1)[1].startswith("replay fenced once in the last ") and line.endswith(
        ": input item type 'web_search_call'"
    )


def metric(stack: Stack, name: str, label: str) -> dict[str, float]:
    assert stack.relay.runtime is not None
    text = relay_metrics(stack.relay.runtime).render().decode()
    return {
        sample.labels[label]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def test_previous_response_id_is_refused_with_advice_and_counted(cached: Stack) -> None:
    chat = Conversation()
    chat.items.append(user_item("hi"))
    answer = post(cached, {**chat.body(stream=True), "previous_response_id": "resp_123"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "previous_response_id"
    assert "send the whole conversation in 'input'" in error["message"]
    assert not cached.fake.requests  # refused before anything went upstream
    # a Chat parameter the relay refuses, and one a client made up: bounded labels
    for extra in ({"seed": 7}, {"made_up_param_x": 1}):
        chat_body: dict[str, Any] = {
            "model": "gpt-5", "messages": [{"role": "user", "content": "hi"}], **extra
        }  # fmt: skip
        refused = requests.post(f"{cached.base_url}/chat/completions", json=chat_body,
                                headers=cached.headers(), timeout=10)  # fmt: skip
        assert refused.status_code == 400
    assert metric(cached, "relay_refused_params_total", "param") == {
        "previous_response_id": 1.0, "seed": 1.0, "other": 1.0,
    }  # fmt: skip
