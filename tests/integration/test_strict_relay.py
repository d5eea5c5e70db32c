"""Strict thinking-mode Chat providers through the relay (issue 6, §8 evidence).

Real loopback servers: the relay and the fake's strict ``/v1/chat/completions`` (its
signed ``reasoning_content`` and continuity probe judge what was restored), driven by the
official ``openai`` SDK with strict response validation. The client behaves like Cursor:
it keeps content and tool calls and drops ``reasoning_content`` from its history.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import openai
import pytest
import requests

from relay.app.server import RelayServer
from relay.clock import ManualClock
from relay.strict.strict_cache import StrictCache
from tests.support.stack import PROVIDER_KEY, Stack, running_stack
from tests.support.strict_stack import PROVIDERS, turn

T = TypeVar("T")
DEEPSEEK = "The reasoning_content in the thinking mode must be passed back to the API."
GREP = {"output": [{"type": "reasoning", "text": "Now grep."},
                   {"type": "function_call", "name": "grep", "arguments": '{"q": "x"}'}]}  # fmt: skip
CONTINUITY = re.compile(r"continuity: restored=(\d+) exact=(\d+) wrong=(\d+) missing=(\d+)")
ON = {"REASONING_CACHE_ENABLED": "1"}
OFF = {"REASONING_CACHE_ENABLED": "0"}


@contextmanager
def stack_for(tmp_path: Path, env: dict[str, str], rule: str = "tool_turns",
              **kw: Any) -> Iterator[Stack]:  # fmt: skip
    with running_stack(tmp_path / "data", env, providers=PROVIDERS, fake_strict=rule, **kw) as s:
        yield s


def entry(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k != "_reasoning"}


def result(answer: dict[str, Any], content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"], "content": content}


def continuity(text: str) -> tuple[int, ...]:
    match = CONTINUITY.search(text)
    assert match, text
    return tuple(int(g) for g in match.groups())


def tool_chain(stack: Stack, *, stream: bool, model: str = "deepseek/deepseek-chat") -> list[Any]:
    """Two tool calls and their results, ready for the third turn."""
    user = {"role": "user", "content": "CALL_TOOL read a.txt"}
    first = turn(stack, model, [user], stream=stream)
    assert first["_reasoning"].startswith("Thinking about: CALL_TOOL read a.txt #")
    history = [user, entry(first), result(first, "a.txt: see b")]
    stack.script(GREP)
    second = turn(stack, model, history, stream=stream)
    return [*history, entry(second), result(second, "found x")]


def on_loop(stack: Stack, call: Callable[[], T]) -> T:
    """Run ``call`` on the relay's IOLoop thread (the store's connection lives there)."""

    async def run() -> T:
        return call()

    return stack.loop.run(run())


def sent_messages(stack: Stack) -> list[dict[str, Any]]:
    """The messages the provider received last."""
    messages: list[dict[str, Any]] = stack.fake.requests[-1].body["messages"]
    return messages


def strict_cache(stack: Stack) -> StrictCache:
    """The running relay's strict-provider cache."""
    runtime = stack.relay.runtime
    assert runtime is not None
    return runtime.strict


# --- the tool chain: off fails with the provider's 400, on succeeds ---------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_off_the_providers_own_400_reaches_the_client(tmp_path: Path, stream: bool) -> None:
    with stack_for(tmp_path, OFF) as stack:
        user = {"role": "user", "content": "CALL_TOOL read a.txt"}
        first = turn(stack, "deepseek/deepseek-chat", [user], stream=stream)
        history = [user, entry(first), result(first, "a.txt")]
        with pytest.raises(openai.BadRequestError) as caught:
            turn(stack, "deepseek/deepseek-chat", history, stream=stream)
        assert caught.value.status_code == 400
        assert caught.value.body == {
            "message": DEEPSEEK, "type": "invalid_request_error", "param": None, "code": None,
        }  # fmt: skip
        assert "reasoning_content" not in sent_messages(stack)[1]  # nothing restored or filled
        assert not (tmp_path / "data" / "reasoning-cache.sqlite").exists()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("rule", ["tool_turns", "tool_turns_indexed", "kimi"])
def test_on_the_tool_chain_succeeds_with_continuity(
    tmp_path: Path, stream: bool, rule: str
) -> None:
    with stack_for(tmp_path, ON, rule) as stack:
        history = tool_chain(stack, stream=stream)
        third = turn(stack, "deepseek/deepseek-chat", history, stream=stream)
        assert third["content"].startswith("Tool output: found x")
        assert continuity(third["content"]) == (2, 2, 0, 0)
        probe = stack.fake.requests[-1].continuity
        assert probe is not None
        assert probe["items"] == [
            {"index": 1, "state": "exact", "tool_calls": 1},
            {"index": 3, "state": "exact", "tool_calls": 1},
        ]
        metrics = strict_cache(stack).metrics
        key = ("deepseek", "deepseek-chat")
        assert (metrics.hits[key], metrics.misses[key], metrics.replays[key]) == (3, 0, 2)
        assert metrics.captured[key] == 3


def test_a_cursor_style_echo_is_found_by_its_history_identity(tmp_path: Path) -> None:
    """Cursor re-serializes tool arguments; the identity predicts that spelling."""
    with stack_for(tmp_path, ON) as stack:
        history = tool_chain(stack, stream=True)
        for message in history:
            for call in message.get("tool_calls", []):
                arguments = json.loads(call["function"]["arguments"])
                call["function"]["arguments"] = json.dumps(arguments, separators=(",", ":"))
        third = turn(stack, "deepseek/deepseek-chat", history, stream=False)
        assert continuity(third["content"]) == (2, 2, 0, 0)
        sources = strict_cache(stack).metrics.sources
        assert sources["memory/identity"] >= 2  # the third turn: both by identity


def test_a_client_that_keeps_reasoning_is_forwarded_as_sent(tmp_path: Path) -> None:
    with stack_for(tmp_path, ON) as stack:
        user = {"role": "user", "content": "CALL_TOOL"}
        first = turn(stack, "deepseek/deepseek-chat", [user], stream=False)
        kept = {**entry(first), "reasoning_content": first["_reasoning"]}
        turn(stack, "deepseek/deepseek-chat", [user, kept, result(first, "x")], stream=False)
        assert sent_messages(stack)[1] == kept
        assert strict_cache(stack).metrics.hits == {}


# --- every turn once tools are present -------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_plain_turns_under_the_every_turn_rule_are_restored(tmp_path: Path, stream: bool) -> None:
    for env, ok in ((ON, True), (OFF, False)):
        with stack_for(
            tmp_path / env["REASONING_CACHE_ENABLED"], env, "all_turns_with_tools"
        ) as stack:
            user = {"role": "user", "content": "hello"}
            plain = turn(stack, "together/some-model", [user], stream=stream)
            assert "tool_calls" not in plain
            history = [user, entry(plain), {"role": "user", "content": "more"}]
            if not ok:
                with pytest.raises(openai.BadRequestError, match="must be passed back"):
                    turn(stack, "together/some-model", history, stream=stream)
                continue
            again = turn(stack, "together/some-model", history, stream=stream)
            assert continuity(again["content"]) == (1, 1, 0, 0)
            # Without tools in the request the rule asks nothing of the plain turn.
            turn(stack, "together/some-model", history, stream=stream, tools=None)
            assert "reasoning_content" not in sent_messages(stack)[1]


# --- restarts, expiry, integrity ---------------------------------------------------------------


def test_after_a_restart_the_first_lookup_is_served_from_disk(tmp_path: Path) -> None:
    with stack_for(tmp_path, ON) as stack:
        history = tool_chain(stack, stream=True)
        stack.restart_relay()
        third = turn(stack, "deepseek/deepseek-chat", history, stream=True)
        assert continuity(third["content"]) == (2, 2, 0, 0)
        sources = strict_cache(stack).metrics.sources
        assert sources["disk/tool_call"] + sources["disk/identity"] == 2
        assert not any(name.startswith("memory/") for name in sources)


def test_ttl_expiry_by_a_clock_jump(tmp_path: Path) -> None:
    clock = ManualClock()
    with stack_for(tmp_path, ON, clock=clock) as stack:
        strict = strict_cache(stack)
        assert strict._cleanup is not None and strict._cleanup.is_running()  # on the IOLoop
        user = {"role": "user", "content": "CALL_TOOL"}
        first = turn(stack, "deepseek/deepseek-chat", [user], stream=False)
        history = [user, entry(first), result(first, "x")]
        clock.advance(7000)  # within the 2 h TTL: a hit, which slides it
        turn(stack, "deepseek/deepseek-chat", history, stream=False)
        clock.advance(7000)
        stack.script({"output": [{"type": "message", "text": "ok"}]})
        turn(stack, "deepseek/deepseek-chat", history, stream=False)
        clock.jump_wall(7201)
        with pytest.raises(openai.BadRequestError, match="must be passed back"):
            turn(stack, "deepseek/deepseek-chat", history, stream=False)
        assert sent_messages(stack)[1]["reasoning_content"] == ""  # the miss policy, no text
        assert strict.metrics.rejected["record_expired"] >= 1
        assert on_loop(stack, strict.cleanup) == 3  # the first answer and the two after it
        stats = on_loop(stack, strict.stats).store
        assert stats is not None and stats.entries == 0


def test_a_tampered_record_is_a_miss_not_a_forgery(tmp_path: Path) -> None:
    with stack_for(tmp_path, ON) as stack:
        user = {"role": "user", "content": "CALL_TOOL"}
        first = turn(stack, "deepseek/deepseek-chat", [user], stream=False)
        stack.loop.run(stack.relay.stop())  # it owns the file: tamper while it is down
        conn = sqlite3.connect(tmp_path / "data" / "reasoning-cache.sqlite")
        conn.execute("UPDATE strict_entries SET reasoning = reasoning || ' (edited)'")
        conn.commit()
        conn.close()
        stack.relay = RelayServer(stack.config, clock=stack.clock)
        stack.loop.run(stack.relay.start())
        with pytest.raises(openai.BadRequestError):
            turn(
                stack,
                "deepseek/deepseek-chat",
                [user, entry(first), result(first, "x")],
                stream=False,
            )
        assert "edited" not in json.dumps(sent_messages(stack))
        assert strict_cache(stack).metrics.rejected["payload_digest_mismatch"] >= 1


def test_records_land_in_the_shared_store(tmp_path: Path) -> None:
    with stack_for(tmp_path, ON) as stack:
        user = {"role": "user", "content": "CALL_TOOL"}
        first = turn(stack, "deepseek/deepseek-chat", [user], stream=False)
        turn(stack, "deepseek/deepseek-chat", [{"role": "user", "content": "hi"}], stream=True)
        strict = strict_cache(stack)
        page = on_loop(stack, lambda: strict.entries(provider="deepseek"))
        assert [e.model for e in page.entries] == ["deepseek-chat", "deepseek-chat"]
        assert page.entries[1].tool_call_ids == (first["tool_calls"][0]["id"],)
        assert page.entries[1].reasoning == first["_reasoning"]
        stats = on_loop(stack, strict.stats)
        assert stats.store is not None and stats.store.entries == 2
        assert stats.memory_entries == 2


# --- stripping -------------------------------------------------------------------------------


@pytest.mark.parametrize("env", [ON, OFF], ids=["on", "off"])
def test_non_strict_chat_upstreams_get_no_reasoning_content(
    tmp_path: Path, env: dict[str, str]
) -> None:
    with stack_for(tmp_path, env, "off") as stack:
        user = {"role": "user", "content": "hello"}
        first = turn(stack, "plain/gpt-4o", [user], stream=False)
        kept = {**entry(first), "reasoning_content": first["_reasoning"]}
        turn(stack, "plain/gpt-4o", [user, kept, {"role": "user", "content": "more"}], stream=True)
        assert sent_messages(stack)[1] == entry(first)
        assert strict_cache(stack).metrics.stripped[("plain", "gpt-4o")] == 1
        assert strict_cache(stack).metrics.captured == {}


def test_legacy_deepseek_reasoner_gets_it_stripped(tmp_path: Path) -> None:
    with stack_for(tmp_path, ON, "legacy_rejects") as stack:
        user = {"role": "user", "content": "hello"}
        first = turn(stack, "deepseek/deepseek-reasoner", [user], stream=False)
        kept = {**entry(first), "reasoning_content": first["_reasoning"]}
        again = turn(
            stack,
            "deepseek/deepseek-reasoner",
            [user, kept, {"role": "user", "content": "more"}],
            stream=True,
        )
        assert again["content"].startswith("Echo: more")
        assert "reasoning_content" not in sent_messages(stack)[1]


def test_strict_true_restores_for_an_unlisted_provider(tmp_path: Path) -> None:
    with stack_for(tmp_path, ON) as stack:
        history = tool_chain(stack, stream=False, model="custom/my-thinker")
        third = turn(stack, "custom/my-thinker", history, stream=False)
        assert continuity(third["content"]) == (2, 2, 0, 0)


# --- routing, request shape and errors -------------------------------------------------------


def test_an_alias_names_the_provider_and_fills_in_effort(tmp_path: Path) -> None:
    aliases = {"ds": {"model": "deepseek-chat", "provider": "deepseek", "reasoning_effort": "high",
                      "sampling": "drop"}}  # fmt: skip
    with stack_for(tmp_path, {**ON, "RELAY_MODEL_ALIASES": json.dumps(aliases)}) as stack:
        with stack.openai() as client:
            completion = client.chat.completions.create(
                model="ds", messages=[{"role": "user", "content": "hi"}], temperature=0
            )
        assert completion.model == "ds"
        body = stack.fake.requests[-1].body
        assert stack.fake.requests[-1].path == "/v1/chat/completions"
        assert (body["model"], body["reasoning_effort"]) == ("deepseek-chat", "high")
        assert "temperature" not in body


def test_the_client_body_is_forwarded_as_chat(tmp_path: Path) -> None:
    with stack_for(tmp_path, ON) as stack, stack.openai() as client:
        chunks = list(client.chat.completions.create(
            model="deepseek/deepseek-chat", messages=[{"role": "user", "content": "hi"}],
            stream=True, stream_options={"include_usage": True}, max_tokens=50, user="alice",
        ))  # fmt: skip
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        body = stack.fake.requests[-1].body
        assert {k: body[k] for k in ("stream", "stream_options", "max_tokens", "user")} == {
            "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 50,
            "user": "alice",
        }  # fmt: skip


def test_a_responses_provider_is_called_at_its_own_url(tmp_path: Path) -> None:
    with stack_for(tmp_path, ON) as stack, stack.openai() as client:
        completion = client.chat.completions.create(
            model="mirror/gpt-5", messages=[{"role": "user", "content": "hi"}]
        )
        assert completion.choices[0].message.content
        record = stack.fake.requests[-1]
        assert (record.path, record.body["model"]) == ("/v1/responses", "gpt-5")


def test_direct_responses_calls_refuse_chat_providers(tmp_path: Path) -> None:
    with stack_for(tmp_path, ON) as stack:
        answer = requests.post(
            stack.base_url + "/responses", headers=stack.headers(),
            json={"model": "deepseek/deepseek-chat", "input": "hi"}, timeout=10,
        )  # fmt: skip
        assert answer.status_code == 400
        assert "speaks Chat Completions" in answer.json()["error"]["message"]


def test_a_responses_shaped_body_is_refused_for_a_chat_provider(tmp_path: Path) -> None:
    with stack_for(tmp_path, ON) as stack:
        answer = requests.post(
            stack.base_url + "/chat/completions", headers=stack.headers(),
            json={"model": "deepseek/deepseek-chat", "input": "hi"}, timeout=10,
        )  # fmt: skip
        assert answer.status_code == 400
        assert answer.json()["error"]["param"] == "messages"


@pytest.mark.parametrize(
    ("status", "kind"), [(429, openai.RateLimitError), (500, openai.InternalServerError)]
)
def test_provider_http_errors_keep_their_status_and_envelope(
    tmp_path: Path, status: int, kind: type[openai.APIStatusError]
) -> None:
    with stack_for(tmp_path, ON) as stack:
        stack.script({"http_error": {"status": status, "message": f"scripted {status}"}})
        with pytest.raises(kind) as caught:
            turn(stack, "deepseek/deepseek-chat", [{"role": "user", "content": "hi"}], stream=True)
        assert caught.value.status_code == status
        assert isinstance(caught.value.body, dict)
        assert caught.value.body["message"] == f"scripted {status}"


def raw_stream(stack: Stack) -> list[str]:
    body: dict[str, Any] = {"model": "deepseek/deepseek-chat", "stream": True,
                            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    answer = requests.post(stack.base_url + "/chat/completions", headers=stack.headers(),
                           json=body, timeout=10)  # fmt: skip
    assert answer.status_code == 200
    return [frame for frame in answer.text.split("\n\n") if frame]


@pytest.mark.parametrize(
    ("script", "message"),
    [
        # Latency: the first chunks reach the client before the failure does.
        ({"error_event": {"message": "overloaded", "after_events": 3},
          "toxics": {"latency_ms": 30}}, "overloaded"),
        ({"toxics": {"cut_after_events": 3, "latency_ms": 30}},
         "the upstream chat stream ended without data: [DONE]"),
        ({"toxics": {"reset_after_events": 3, "latency_ms": 30}},
         "the upstream connection broke mid-stream"),
    ],
    ids=["error-frame", "cut", "reset"],
)  # fmt: skip
def test_a_failed_stream_ends_with_an_error_frame_and_records_nothing(
    tmp_path: Path, script: dict[str, Any], message: str
) -> None:
    with stack_for(tmp_path, ON) as stack:
        stack.script(script)
        frames = raw_stream(stack)
        assert "data: [DONE]" not in frames
        last = json.loads(frames[-1].removeprefix("data: "))
        assert message in last["error"]["message"]
        stats = on_loop(stack, strict_cache(stack).stats)
        assert stats.store is not None and stats.store.entries == 0
        stack.script(script)
        with pytest.raises(openai.APIError):
            turn(stack, "deepseek/deepseek-chat", [{"role": "user", "content": "hi"}], stream=True)


def test_an_unreachable_provider_names_its_setting(tmp_path: Path) -> None:
    dead = {**PROVIDERS, "dead": {"kind": "chat", "base_url": "http://127.0.0.1:9/v1"}}
    with running_stack(tmp_path / "data", ON, providers=dead) as stack, stack.openai() as client:
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(
                model="dead/deepseek-chat", messages=[{"role": "user", "content": "hi"}]
            )
        assert caught.value.status_code == 502
        assert "RELAY_PROVIDERS['dead'].base_url" in caught.value.message


def test_the_banner_lists_providers(tmp_path: Path) -> None:
    with stack_for(tmp_path, ON) as stack:
        lines = stack.relay.banner()
        assert any(line.startswith("provider deepseek: chat at http://127.0.0.1:") and
                   line.endswith("(key from TEST_PROVIDER_KEY, strict auto)") for line in lines)  # fmt: skip
        assert not any("sk-test-provider-key" in line for line in lines)


def test_an_error_before_any_chunk_is_an_http_error_with_the_providers_envelope(
    tmp_path: Path,
) -> None:
    with stack_for(tmp_path, ON) as stack:
        stack.script({"error_event": {"message": "overloaded", "code": "busy", "after_events": 0}})
        answer = requests.post(
            stack.base_url + "/chat/completions", headers=stack.headers(), timeout=10,
            json={"model": "deepseek/deepseek-chat", "stream": True,
                  "messages": [{"role": "user", "content": "hi"}]},
        )  # fmt: skip
        assert answer.status_code == 502
        assert answer.json() == {
            "error": {
                "message": "overloaded",
                "type": "server_error",
                "param": None,
                "code": "busy",
            }
        }


def test_each_upstream_gets_its_own_key(tmp_path: Path) -> None:
    with stack_for(tmp_path, ON) as stack:
        stack.fake.api_keys = frozenset({PROVIDER_KEY})  # the fake now accepts only this one
        turn(stack, "deepseek/deepseek-chat", [{"role": "user", "content": "hi"}], stream=False)
        with pytest.raises(openai.AuthenticationError) as caught:  # the OpenAI key: refused
            turn(stack, "gpt-5", [{"role": "user", "content": "hi"}], stream=False)
        assert caught.value.status_code == 401
