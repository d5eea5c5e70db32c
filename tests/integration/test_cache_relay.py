"""The replay cache over real loopback servers: the official SDK as the client, the fake
upstream's continuity probe as the judge of where replayed reasoning landed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

from relay.errors import StoreError
from tests.support.cache_stack import ask, continuity, writes_fail
from tests.support.stack import Stack, running_stack


def last_input(stack: Stack) -> list[dict[str, Any]]:
    body: dict[str, Any] = stack.fake.requests[-1].body
    items: list[dict[str, Any]] = body["input"]
    return items


@pytest.mark.parametrize("modes", [(True, True, True), (False, False, False), (True, False, True)])
def test_each_turn_replays_every_earlier_block_in_place(
    cached: Stack, modes: tuple[bool, ...]
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
    for turn, stream in enumerate(modes):
        text = ask(cached, messages, stream=stream)
        assert continuity(text) == (turn, turn, 0)
        messages += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": f"q{turn}"},
        ]
    body = cached.fake.requests[-1].body
    assert body["store"] is False
    assert "reasoning.encrypted_content" in body["include"]
    kinds = [item.get("type", "message") for item in body["input"]]
    assert kinds[:4] == ["message", "reasoning", "message", "message"]


def test_tool_call_blocks_replay_with_results_untouched(cached: Stack) -> None:
    client = cached.openai()
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "CALL_TOOL read it"}]
    first = client.chat.completions.create(model="gpt-5", messages=messages, tools=tools)
    calls = first.choices[0].message.tool_calls
    assert calls
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": calls[0].id, "content": "file body"})
    second = client.chat.completions.create(model="gpt-5", messages=messages, tools=tools)
    assert continuity(second.choices[0].message.content or "") == (1, 1, 0)
    items = last_input(cached)
    assert [i.get("type") for i in items[1:]] == [
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert items[3] == {
        "type": "function_call_output",
        "call_id": calls[0].id,
        "output": "file body",
    }


def test_identical_regeneration_is_a_conflict(cached: Stack) -> None:
    first = ask(cached, [{"role": "user", "content": "hi"}], stream=True)
    again = ask(cached, [{"role": "user", "content": "hi"}], stream=False)
    assert first == again  # same visible text; the fake minted different ciphertext
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": first},
        {"role": "user", "content": "next"},
    ]
    assert continuity(ask(cached, history, stream=True)) == (0, 0, 0)


def test_an_edit_stops_replay_at_and_after_it(cached: Stack) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "one"}]
    for turn in range(2):
        text = ask(cached, messages, stream=True)
        messages += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": f"q{turn}"},
        ]
    edited = [dict(m) for m in messages]
    edited[2]["content"] = "q0 (edited)"  # after the first answer, before the second
    assert continuity(ask(cached, edited, stream=True)) == (1, 1, 0)


@pytest.mark.parametrize(
    "echo",
    [
        pytest.param(lambda text: text, id="string"),
        pytest.param(lambda text: [{"type": "text", "text": text}], id="one-part"),
        pytest.param(
            lambda text: [{"type": "text", "text": text[:5]}, {"type": "text", "text": text[5:]}],
            id="split-parts",
        ),
    ],
)
def test_equivalent_envelope_forms_replay(cached: Stack, echo: Any) -> None:
    text = ask(cached, [{"role": "user", "content": "hi"}], stream=True)
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": echo(text)},
        {"role": "user", "content": "next"},
    ]
    assert continuity(ask(cached, history, stream=False)) == (1, 1, 0)


def test_a_different_caller_or_model_never_sees_the_blocks(cached: Stack) -> None:
    text = ask(cached, [{"role": "user", "content": "hi"}], stream=True, user="alice")
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": text},
        {"role": "user", "content": "next"},
    ]
    assert continuity(ask(cached, history, stream=True, user="bob")) == (0, 0, 0)
    assert continuity(ask(cached, history, stream=True)) == (0, 0, 0)
    assert continuity(ask(cached, history, stream=True, user="alice")) == (1, 1, 0)


def test_replay_survives_a_relay_restart(cached: Stack) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    text = ask(cached, messages, stream=True)
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "next"}]
    cached.restart_relay()  # same data dir, same upstream
    assert continuity(ask(cached, messages, stream=True)) == (1, 1, 0)


def test_disabled_cache_creates_nothing_and_forwards_store_untouched(tmp_path: Path) -> None:
    with running_stack(tmp_path / "data") as stack:
        ask(stack, [{"role": "user", "content": "hi"}], stream=True, store=True)
        body = stack.fake.requests[-1].body
    assert body.get("store") is True
    assert "include" not in body
    assert not list((tmp_path / "data").glob("reasoning-cache*"))


def test_cache_file_is_private(cached: Stack) -> None:
    ask(cached, [{"role": "user", "content": "hi"}], stream=True)
    path = cached.config.cache_path
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o077 == 0


def test_a_failing_store_refuses_with_503_instead_of_forwarding_unsafely(cached: Stack) -> None:
    filler = "x" * 20_000
    with writes_fail(cached):
        resp = requests.post(
            f"{cached.base_url}/chat/completions",
            json={"model": "gpt-5", "messages": [{"role": "user", "content": filler}]},
            headers=cached.headers(),
            timeout=10,
        )
    assert resp.status_code == 503, resp.text
    assert resp.json()["error"]["code"] == "cache_unavailable"
    assert filler[:100] not in resp.text
    assert cached.fake.requests == []  # never forwarded
    # The intent failed, was retried once (no reserve left to free) and failed again: the
    # cache latched (design §6). It stays stopped once space is back, and no relay reuses
    # the store until the operator deletes its .guard.
    path = cached.relay.config.cache_path
    assert path.with_name(path.name + ".guard").exists()
    again = requests.post(
        f"{cached.base_url}/chat/completions",
        json={"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]},
        headers=cached.headers(),
        timeout=10,
    )
    assert again.status_code == 503, again.text
    assert again.json()["error"]["code"] == "cache_unavailable"
    assert cached.fake.requests == []


def test_a_dispatch_that_could_not_record_its_intent_poisons_nothing(
    cached: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing was sent, so nothing may be poisoned: the store is writable again when
    the request closes, and the turn is then served and cached as if it never failed."""
    assert cached.relay.runtime is not None
    store = cached.relay.runtime.cache.store
    assert store is not None
    text = ask(cached, [{"role": "user", "content": "hi"}], stream=True)  # the scope exists
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": text},
               {"role": "user", "content": "next"}]  # fmt: skip
    real = store.create_intent

    def fails_once(*args: Any, **kwargs: Any) -> None:
        monkeypatch.setattr(store, "create_intent", real)
        raise StoreError("the disk is full (test)", sqlite_error="SQLITE_FULL")

    monkeypatch.setattr(store, "create_intent", fails_once)
    with pytest.raises(openai.InternalServerError):
        ask(cached, history, stream=True)
    assert len(cached.fake.requests) == 1  # the failed turn was never forwarded

    async def markers() -> int:  # on the loop thread, which owns the connection
        return store.stats()["markers"]

    assert cached.loop.run(markers()) == 0
    assert continuity(ask(cached, history, stream=True)) == (1, 1, 0)


def test_sdk_error_type_for_503(cached: Stack) -> None:
    with writes_fail(cached), pytest.raises(openai.InternalServerError) as err:
        ask(cached, [{"role": "user", "content": "y" * 20_000}], stream=False)
    assert err.value.status_code == 503


@pytest.mark.parametrize("stream", [True, False])
def test_an_uncommittable_observation_fails_the_answer(cached: Stack, stream: bool) -> None:
    """The observation is committed before the terminal frame; when it cannot be, the
    client gets an error instead of a success the cache never recorded."""
    # Each event is delayed: time to break the store after dispatch, before completion.
    cached.script({"deltas": 1, "toxics": {"latency_ms": 100}})
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(ask, cached, [{"role": "user", "content": "hi"}], stream=stream)
        cached.loop.run(cached.fake.wait_for_requests(1, ended=False))
        with writes_fail(cached), pytest.raises(openai.APIError) as err:
            answer.result(timeout=20)
    assert "cache" in str(err.value).lower()
    if not stream:
        assert isinstance(err.value, openai.InternalServerError)
