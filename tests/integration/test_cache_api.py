"""``/api/cache/reasoning`` over a real loopback relay: auth, shapes, filters, clamping,
deletes, bad input, and no ciphertext or reasoning text unless asked for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.stack import Stack, running_stack
from tests.support.strict_stack import PROVIDERS, turn

ADMIN = "admin-token-0123456789"
ENV = {"REASONING_CACHE_ENABLED": "1", "RELAY_ADMIN_TOKEN": ADMIN}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with running_stack(tmp_path / "data", ENV, providers=PROVIDERS, fake_strict="tool_turns") as s:
        yield s


def api(
    stack: Stack, method: str = "GET", token: str | None = ADMIN, **params: Any
) -> requests.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return requests.request(
        method,
        f"http://127.0.0.1:{stack.relay.port}/api/cache/reasoning",
        params=params,
        headers=headers,
        timeout=10,
    )


def tool_turns(stack: Stack, model: str, prompt: str) -> list[dict[str, Any]]:
    """Two turns: a tool call, its result, then a restored follow-up."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"CALL_TOOL {prompt}"}]
    first = turn(stack, model, messages, stream=False)
    first.pop("_reasoning")
    messages += [
        first,
        {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "ok"},
    ]
    second = turn(stack, model, messages, stream=True)
    second.pop("_reasoning")
    return [*messages, second]


def test_auth_admin_token_only(stack: Stack) -> None:
    assert api(stack, token=None).status_code == 401
    wrong = api(stack, token=stack.token)  # the relay token is never accepted
    assert wrong.status_code == 401
    assert "RELAY_ADMIN_TOKEN" in wrong.json()["error"]["message"]
    assert api(stack).status_code == 200


def test_off_without_an_admin_token(tmp_path: Path) -> None:
    with running_stack(tmp_path / "data", {"REASONING_CACHE_ENABLED": "1"}) as s:
        resp = api(s)
    assert resp.status_code == 404
    assert "RELAY_ADMIN_TOKEN" in resp.json()["error"]["message"]


def test_stats_entries_and_filters(stack: Stack) -> None:
    tool_turns(stack, "deepseek/deepseek-chat", "one")
    tool_turns(stack, "custom/thinker", "two")
    body = api(stack).json()
    stats = body["stats"]
    assert stats["dbEntries"] == stats["totalEntries"] == len(body["entries"]) >= 2
    assert stats["hits"] >= 2 and stats["replays"] >= 2
    assert stats["replayRate"].endswith("%")
    assert set(stats["byProvider"]) >= {"deepseek", "custom"}
    assert stats["oldestEntry"].endswith("Z") and stats["newestEntry"] >= stats["oldestEntry"]
    entry = body["entries"][0]
    assert set(entry) >= {"toolCallId", "provider", "model", "charCount", "createdAt", "expiresAt"}
    assert "reasoning" not in entry  # only on request
    only = api(stack, provider="deepseek").json()["entries"]
    assert only and {e["provider"] for e in only} == {"deepseek"}
    assert api(stack, model="thinker").json()["entries"][0]["model"] == "thinker"
    with_text = api(stack, include="reasoning").json()["entries"]
    assert all(e["reasoning"] for e in with_text)


@pytest.mark.parametrize(("raw", "clamped"), [("0", 1), ("-5", 1), ("1", 1), ("999", 200)])
def test_limit_is_clamped(stack: Stack, raw: str, clamped: int) -> None:
    body = api(stack, limit=raw).json()
    assert body["pagination"]["limit"] == clamped


def test_pagination_walks_every_entry(stack: Stack) -> None:
    for n in range(3):
        tool_turns(stack, "deepseek/deepseek-chat", f"page {n}")
    total = api(stack).json()["stats"]["dbEntries"]
    seen, before = [], None
    while True:
        params = {"limit": "1", **({"before": str(before)} if before else {})}
        body = api(stack, **params).json()
        seen += [e["id"] for e in body["entries"]]
        before = body["pagination"]["nextBefore"]
        if before is None:
            break
    assert len(seen) == len(set(seen)) == total


def test_encrypted_records_are_metadata_only(stack: Stack) -> None:
    with stack.openai() as client:
        client.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "hi"}])
    resp = api(stack)
    records = resp.json()["encryptedRecords"]
    assert records["observations"] == 1 and records["payloadBytes"] > 0
    assert records["recent"][0]["model"] == "gpt-5"
    assert len(records["recent"][0]["endDigest"]) == 12
    assert records["hotCache"]["entries"] == 0  # nothing replayed yet
    assert "gAAAA" not in resp.text  # no ciphertext anywhere


def test_the_hot_cache_serves_the_next_turns_of_a_conversation(stack: Stack) -> None:
    history: list[dict[str, str]] = [{"role": "user", "content": "hi"}]
    with stack.openai() as client:
        first = client.chat.completions.create(model="gpt-5", messages=history)
        history += [{"role": "assistant", "content": first.choices[0].message.content or ""},
                    {"role": "user", "content": "more"}]  # fmt: skip
        for _ in range(2):  # the same next turn twice: verified from disk, then hot
            client.chat.completions.create(model="gpt-5", messages=history)
    hot = api(stack).json()["encryptedRecords"]["hotCache"]
    assert (hot["entries"], hot["hits"]) == (1, 1)
    assert 0 < hot["bytes"] <= hot["capacityBytes"] == 4 * 1024 * 1024


def test_each_turn_plans_on_the_previous_turns_remembered_chain(stack: Stack) -> None:
    """Turn 3 replays turn 2's chain plus one block: its links and order are the
    remembered verdict's (relay.core.plan_memo); turn 2's chain was checked in full."""
    history: list[dict[str, str]] = [{"role": "user", "content": "hi"}]
    with stack.openai() as client:
        for turn in range(3):
            answer = client.chat.completions.create(model="gpt-5", messages=history)
            history += [{"role": "assistant", "content": answer.choices[0].message.content or ""},
                        {"role": "user", "content": f"more {turn}"}]  # fmt: skip
    memo = api(stack).json()["encryptedRecords"]["planMemo"]
    assert memo == {"entries": 2, "hits": 1}


def test_deletes(stack: Stack) -> None:
    tool_turns(stack, "deepseek/deepseek-chat", "a")
    tool_turns(stack, "custom/thinker", "b")
    entry = next(e for e in api(stack, provider="custom").json()["entries"] if e["toolCallId"])
    gone = api(stack, "DELETE", toolCallId=entry["toolCallId"]).json()
    assert gone == {"deleted": 1, "scope": "toolCallId"}
    assert api(stack, "DELETE", provider="deepseek").json()["deleted"] >= 1
    assert api(stack, provider="deepseek").json()["entries"] == []
    assert api(stack, "DELETE").json()["scope"] == "all"
    stats = api(stack).json()["stats"]
    assert (stats["dbEntries"], stats["memoryEntries"], stats["hits"]) == (0, 0, 0)


@pytest.mark.parametrize(
    ("method", "params", "param"),
    [
        ("GET", {"limit": "ten"}, "limit"),
        ("GET", {"before": "x"}, "before"),
        ("GET", {"before": "9223372036854775808"}, "before"),  # beyond SQLite's integers
        ("GET", {"before": "9" * 5000}, "before"),  # beyond int()'s digit limit
        ("GET", {"before": "\u00b2"}, "before"),  # str.isdigit() says yes, int() says no
        ("GET", {"before": "0"}, "before"),
        ("GET", {"before": "-1"}, "before"),
        ("GET", {"limit": "9" * 5000}, "limit"),
        ("GET", {"include": "ciphertext"}, "include"),
        ("GET", {"sort": "asc"}, "sort"),
        ("DELETE", {"provider": "a", "toolCallId": "b"}, None),
        ("DELETE", {"model": "m"}, "model"),
        ("DELETE", {"toolCallId": ""}, "toolCallId"),
        ("GET", {"provider": ""}, "provider"),
    ],
)
def test_bad_input_is_a_clear_400(
    stack: Stack, method: str, params: dict[str, str], param: str | None
) -> None:
    resp = api(stack, method, **params)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


def test_unsupported_method(stack: Stack) -> None:
    resp = api(stack, "POST")
    assert resp.status_code == 405
    assert resp.json()["error"]["message"]


def test_before_the_largest_entry_id_lists_everything(stack: Stack) -> None:
    tool_turns(stack, "deepseek/deepseek-chat", "a")
    everything = api(stack).json()["entries"]
    assert everything
    assert api(stack, before=str(2**63 - 1)).json()["entries"] == everything
    assert api(stack, before="000" + str(everything[0]["id"] + 1)).json()["entries"] == everything
