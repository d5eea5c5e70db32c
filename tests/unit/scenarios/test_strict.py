"""The harness for strict thinking-mode Chat providers, without processes: the relay's
provider configuration, the client's reasoning handling, the fake's Chat records as the
history sees them, and the checker's rules for Chat calls (``no_false_success`` backed by
the provider's answer, ``no_wrong_restore``) on hand-made histories."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scenarios.answer import ChatAnswer, parse_sse_data
from scenarios.checker import check_history
from scenarios.core import Ctx, Matches, Turn
from scenarios.dsl import ABSENT, KeepReasoning, Provider, RelayOptions, UpstreamReceived
from scenarios.fakeapi import FakeControl, normalize_chat_exchange
from scenarios.history import History
from scenarios.runner import PROVIDER_KEY_ENV
from scenarios.seed import Seed

# --- the relay's configuration ------------------------------------------------------------


def test_providers_point_at_the_fake_with_the_provider_key() -> None:
    options = RelayOptions(
        cache_enabled=True,
        providers=(Provider("deepseek"), Provider("plain", strict=False)),
        strict_ttl_s=60,
    )
    assert options.env()["REASONING_CACHE_STRICT_TTL_SECONDS"] == "60"
    env = options.provider_env("http://127.0.0.1:9999/", "sk-p")
    assert env[PROVIDER_KEY_ENV] == "sk-p"
    assert json.loads(env["RELAY_PROVIDERS"]) == {
        "deepseek": {"kind": "chat", "base_url": "http://127.0.0.1:9999/v1",
                     "api_key_env": PROVIDER_KEY_ENV, "strict": "auto"},
        "plain": {"kind": "chat", "base_url": "http://127.0.0.1:9999/v1",
                  "api_key_env": PROVIDER_KEY_ENV, "strict": False},
    }  # fmt: skip
    assert RelayOptions().provider_env("http://x", "k") == {}


def test_the_provider_spec_is_what_the_relay_accepts() -> None:
    from relay.settings.providers import parse_providers

    env = RelayOptions(providers=(Provider("kimi", strict=True),)).provider_env("http://h:1", "k")
    parsed = parse_providers(json.loads(env["RELAY_PROVIDERS"]), env)
    provider = parsed["kimi"]
    assert (provider.kind, provider.url, provider.strict) == (
        "chat", "http://h:1/v1/chat/completions", True,
    )  # fmt: skip


# --- the client: reasoning shown, dropped like Cursor, kept on request ----------------------


def test_the_client_collects_reasoning_and_drops_it_from_its_history() -> None:
    streamed = ChatAnswer(status=200)
    for chunk in (
        {"choices": [{"delta": {"role": "assistant", "content": None, "reasoning_content": ""}}]},
        {"choices": [{"delta": {"content": None, "reasoning_content": "Think #abc"}}]},
        {"choices": [{"delta": {"content": "Hi", "reasoning_content": None}}]},
        {"choices": [{"delta": {}, "finish_reason": "stop"}]},
    ):
        parse_sse_data(streamed, json.dumps(chunk))
    parse_sse_data(streamed, "[DONE]")
    whole = ChatAnswer(status=200)
    message = {"role": "assistant", "content": "Hi", "reasoning_content": "Think #abc"}
    whole.set_json_body(json.dumps({"choices": [{"message": message}]}).encode())
    for answer in (streamed, whole):
        assert answer.reasoning == "Think #abc"
        assert answer.summary()["reasoning"] == "Think #abc"
        assert answer.assistant_message() == {"role": "assistant", "content": "Hi"}


def _ctx(answer: ChatAnswer | None, history: list[dict[str, Any]]) -> Ctx:
    ctx = Ctx(harness=None, seed=Seed(1))  # type: ignore[arg-type]
    ctx.conversations["main"] = history
    ctx.turns["t1"] = Turn("t1", "main", {}, upstream_from=0, answer=answer)
    return ctx


def test_keep_reasoning_puts_the_shown_reasoning_back_into_the_last_answer() -> None:
    answer = ChatAnswer(status=200, done=True, text="Hi", reasoning="Think #abc")
    history = [{"role": "user", "content": "hi"}, answer.assistant_message()]
    KeepReasoning().run(_ctx(answer, history))
    assert history[-1] == {"role": "assistant", "content": "Hi", "reasoning_content": "Think #abc"}
    with pytest.raises(AssertionError, match="ends with no answer"):
        KeepReasoning().run(_ctx(answer, [{"role": "user", "content": "hi"}]))
    silent = ChatAnswer(status=200, done=True, text="Hi")
    with pytest.raises(AssertionError, match="showed no reasoning"):
        KeepReasoning().run(_ctx(silent, [silent.assistant_message()]))


# --- the fake's Chat records ------------------------------------------------------------------

ASK = [{"role": "user", "content": "CALL_TOOL"}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


def _completion(content: str | None, reasoning: str, calls: list[Any] | None = None,
                finish: str = "stop") -> dict[str, Any]:  # fmt: skip
    message: dict[str, Any] = {"role": "assistant", "content": content,
                               "reasoning_content": reasoning}  # fmt: skip
    if calls:
        message["tool_calls"] = calls
    return {"object": "chat.completion", "choices": [
        {"index": 0, "message": message, "finish_reason": finish}]}  # fmt: skip


def _chunks(text: str, reasoning: str) -> list[Any]:
    head = {"object": "chat.completion.chunk"}
    return [
        {
            **head,
            "choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": ""}}],
        },
        {**head, "choices": [{"index": 0, "delta": {"reasoning_content": reasoning}}]},
        {**head, "choices": [{"index": 0, "delta": {"content": text}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        "[DONE]",
    ]


def _record(body: dict[str, Any], **fields: Any) -> dict[str, Any]:
    base = {"path": "/v1/chat/completions", "body": body, "status": 200, "stream": False,
            "events": [], "response": None, "ended": "finish", "continuity": {"restored": 0}}  # fmt: skip
    return {**base, **fields}


def test_a_json_chat_record_becomes_a_completed_exchange_with_its_message() -> None:
    body = {"model": "deepseek-chat", "messages": ASK}
    raw = _record(body, response=_completion(None, "R #1", [CALL], "tool_calls"))
    exchange = normalize_chat_exchange(raw, 3)
    assert (exchange["index"], exchange["outcome"], exchange["credential"]) == (
        3, "completed", "provider",
    )  # fmt: skip
    assert exchange["output"] == [{
        "role": "assistant", "content": "", "refusal": "", "reasoning_content": "R #1",
        "tool_calls": [{"id": "call_1", "name": "read_file", "arguments": "{}"}],
    }]  # fmt: skip
    cut = normalize_chat_exchange({**raw, "ended": "close"}, 3)
    assert cut["outcome"] == "broken"


def test_a_streamed_chat_record_is_completed_only_with_done() -> None:
    body = {"model": "deepseek-chat", "messages": ASK, "stream": True}
    sent = _chunks("Hello", "R #2")
    whole = normalize_chat_exchange(_record(body, stream=True, events=sent), 0)
    assert whole["outcome"] == "completed"
    assert whole["output"][0]["content"] == "Hello"
    assert whole["output"][0]["reasoning_content"] == "R #2"
    assert normalize_chat_exchange(_record(body, stream=True, events=sent[:3]), 0)["outcome"] == (
        "broken"
    )
    failed = [*sent[:2], {"error": {"message": "overloaded"}}]
    assert normalize_chat_exchange(_record(body, stream=True, events=failed), 0)["outcome"] == (
        "error_event"
    )
    refused = _record(body, status=400, response={"error": {"message": "must be passed back"}})
    assert normalize_chat_exchange(refused, 0)["outcome"] == "http_error"


def test_scripts_are_mirrored_onto_chat_calls_too() -> None:
    fake = FakeControl("http://127.0.0.1:1", proc=None, history=None)
    fake._queued = [{"output": "first"}, {"output": "second"}]
    records = [
        _record({"model": "m", "messages": ASK}, response=_completion("a", "R")),
        {**_record({"model": "gpt-5", "input": "hi"}), "path": "/v1/responses"},
        {**_record({}), "path": "/__fake/strict"},
    ]
    fake.requests = lambda: records  # type: ignore[method-assign]
    first, second, _ = fake._fetch()
    assert (first["script"], first["credential"]) == ({"output": "first"}, "provider")
    assert second["script"] == {"output": "second"}


class _StubFake:
    def __init__(self, exchanges: list[dict[str, Any]]) -> None:
        self._exchanges = exchanges

    def exchanges(self) -> list[dict[str, Any]]:
        return self._exchanges


class _StubHarness:
    def __init__(self, exchanges: list[dict[str, Any]]) -> None:
        self.fake = _StubFake(exchanges)


def test_upstream_received_checks_chat_continuity_and_reasoning_sent() -> None:
    messages = [*ASK, {"role": "assistant", "content": None, "tool_calls": [CALL],
                       "reasoning_content": "R #0123"}, {"role": "tool", "content": "x"}]  # fmt: skip
    body = {"model": "deepseek-chat", "messages": messages}
    exchange = normalize_chat_exchange(
        _record(body, response=_completion("ok", "R2"), continuity={"exact": 1, "wrong": 0}), 0
    )
    ctx = Ctx(harness=_StubHarness([exchange]), seed=Seed(1))  # type: ignore[arg-type]
    ctx.turns["t2"] = Turn("t2", "main", {"messages": messages}, upstream_from=0)
    UpstreamReceived("t2", continuity={"exact": 1, "wrong": 0},
                     reasoning={0: ABSENT, 1: Matches("#0123$"), 2: ABSENT}).check(ctx)  # fmt: skip
    with pytest.raises(AssertionError, match="reasoning_content t2 sent upstream: 1: expected"):
        UpstreamReceived("t2", reasoning={1: ""}).check(ctx)
    with pytest.raises(AssertionError, match="0: expected ''"):
        UpstreamReceived("t2", reasoning={0: ""}).check(ctx)


# --- the checker on Chat calls ----------------------------------------------------------------

Event = tuple[str, dict[str, Any]]


def chat_call(index: int, messages: list[Any], answer: dict[str, Any],
              states: dict[int, str] | None = None, *, outcome: str = "completed",
              model: str = "deepseek-chat") -> Event:  # fmt: skip
    """A Chat-provider call as normalize_chat_exchange records it."""
    items = [{"index": i, "state": s, "tool_calls": 0} for i, s in (states or {}).items()]
    return "upstream_exchange", {
        "index": index, "path": "/v1/chat/completions", "body": {"model": model,
        "messages": messages}, "continuity": {"items": items}, "status": 200, "events": [],
        "outcome": outcome, "output": [answer] if outcome == "completed" else [],
        "ended": "finish", "finished": True, "credential": "provider",
    }  # fmt: skip


def said(text: str, reasoning: str, calls: list[Any] | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": text, "refusal": "", "reasoning_content": reasoning,
            "tool_calls": calls or []}  # fmt: skip


def got(turn: str, text: str, finish: str = "stop") -> Event:
    return "client_answer", {
        "turn": turn, "status": 200, "outcome": "success", "text": text, "refusal": "",
        "tool_calls": [], "finish_reason": finish, "done": True, "error": None, "frames": 4,
        "frames_after_done": 0,
    }  # fmt: skip


def sent(turn: str, messages: list[Any]) -> Event:
    body = {"model": "deepseek/deepseek-chat", "messages": messages}
    return "client_request", {"turn": turn, "conversation": "main", "body": body}


HI, MORE = {"role": "user", "content": "hi"}, {"role": "user", "content": "more"}
ONE = {"role": "assistant", "content": "One."}


def restored_chain(value: str, state: str = "exact") -> list[Event]:
    """t1 answered "One." with reasoning R1; t2 sends it back and the relay restores."""
    return [
        ("process_start", {"role": "relay", "incarnation": 1, "cache_enabled": True}),
        sent("t1", [HI]),
        chat_call(0, [HI], said("One.", "R1 #aa")),
        got("t1", "One."),
        sent("t2", [HI, ONE, MORE]),
        chat_call(
            1, [HI, {**ONE, "reasoning_content": value}, MORE], said("Two.", "R2 #bb"), {1: state}
        ),
        got("t2", "Two."),
    ]


def run(events: list[Event], *only: str) -> Any:
    return check_history(History.from_events(events), only or ("all",))


def test_an_exact_restore_passes_and_is_counted() -> None:
    report = run(restored_chain("R1 #aa"))
    assert report.ok, report.describe()
    assert report.stats["chat_calls"] == 2
    assert (report.stats["restored_reasoning"], report.stats["wrong_restores"]) == (1, 0)
    assert report.stats["wrong_replays"] == 0  # nothing of the Responses model misfires


@pytest.mark.parametrize(
    ("value", "state", "problem"),
    [
        ("R9 #zz", "wrong", "probe found the restored reasoning_content wrong"),
        ("R9 #zz", "exact", "never minted (invented)"),
        ("R2 #bb", "exact", "minted for a different visible assistant message"),
    ],
)
def test_a_wrong_restore_is_a_violation(value: str, state: str, problem: str) -> None:
    events = restored_chain(value, state)
    if value == "R2 #bb":  # minted by an earlier call, for another message
        events.insert(2, chat_call(9, [MORE], said("Other.", "R2 #bb")))
    report = run(events, "no_wrong_restore")
    assert report.count("no_wrong_restore") == 1, report.describe()
    assert problem in report.describe()


def test_a_restore_across_models_is_a_violation() -> None:
    events = restored_chain("R1 #aa")
    kind, data = events[2]
    events[2] = (kind, {**data, "body": {**data["body"], "model": "kimi-k2"}})
    assert "another provider or model" in run(events, "no_wrong_restore").describe()


def test_an_empty_fill_and_the_clients_own_value_are_not_wrong_restores() -> None:
    report = run(restored_chain("", "wrong"))
    assert report.ok, report.describe()
    assert (report.stats["empty_fills"], report.stats["restored_reasoning"]) == (1, 0)
    events = restored_chain("edited by the client", "wrong")
    events[4] = sent("t2", [HI, {**ONE, "reasoning_content": "edited by the client"}, MORE])
    assert run(events).ok  # the client's own value, forwarded as sent
    raw = {
        "turn": "t2",
        "conversation": "raw",
        "body": {"raw_bytes": 10},
        "json": {"messages": [HI, {**ONE, "reasoning_content": "edited by the client"}]},
    }
    events[4] = ("client_request", raw)  # PostRaw records the parsed body as "json"
    assert run(events).ok


def test_a_chat_success_needs_a_completed_provider_answer() -> None:
    events = restored_chain("R1 #aa")
    assert run(events, "no_false_success").ok
    events[6] = got("t2", "Something else.")
    assert run(events, "no_false_success").count("no_false_success") == 1
    events = restored_chain("R1 #aa")
    kind, data = events[5]
    events[5] = (kind, {**data, "outcome": "broken", "output": []})  # the provider was cut
    assert run(events, "no_false_success").count("no_false_success") == 1
