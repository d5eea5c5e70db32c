"""The fake's strict thinking-mode ``POST /v1/chat/completions`` over real HTTP.

Driven by the official ``openai`` SDK (strict response validation, no retries) in JSON and
stream mode, plus plain ``requests`` for the ``/__fake/`` controls. The fake runs in its
own IOLoop thread; one test starts ``python -m fakeupstream --strict ...``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

from tests.support.fake_runner import Runner, running_fake

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-strict-0123456789"
MODEL = "deepseek-reasoner"
DEEPSEEK = "The reasoning_content in the thinking mode must be passed back to the API."
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}},
]
GREP = {"output": [{"type": "reasoning", "text": "Now grep."}, {"type": "function_call", "name": "grep", "arguments": '{"q": "x"}'}]}  # fmt: skip


class StrictRunner(Runner):
    """The shared fake runner, with the strict Chat endpoint's helpers."""

    @property
    def root(self) -> str:
        return self.fake.base_url.removesuffix("/v1")

    def client(self, api_key: str = KEY) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.fake.base_url,
            api_key=api_key,
            max_retries=0,
            _strict_response_validation=True,
        )

    def script(self, *scripts: dict[str, Any]) -> None:
        answer = requests.post(self.root + "/__fake/scripts", json=list(scripts), timeout=5)
        assert answer.status_code == 200, answer.text

    def strict(self, setting: Any) -> requests.Response:
        return requests.post(self.root + "/__fake/strict", json=setting, timeout=5)

    def records(self, wait_for: int = 0) -> list[dict[str, Any]]:
        params = {"wait_for": wait_for, "timeout": 5}
        records: list[dict[str, Any]] = requests.get(
            self.root + "/__fake/requests", params=params, timeout=10
        ).json()
        return records


@pytest.fixture(scope="module")
def shared() -> Iterator[StrictRunner]:
    with running_fake(StrictRunner, seed=21, api_keys=[KEY, "sk-other"]) as runner:
        assert isinstance(runner, StrictRunner)
        yield runner


@pytest.fixture
def fake(shared: StrictRunner) -> StrictRunner:
    requests.post(shared.root + "/__fake/reset", timeout=5).raise_for_status()
    return shared


@pytest.fixture
def client(fake: StrictRunner) -> Iterator[openai.OpenAI]:
    with fake.client() as c:
        yield c


# --- one turn, as a client sees it --------------------------------------------------------


def turn(client: openai.OpenAI, messages: list[Any], *, stream: bool, **kw: Any) -> dict[str, Any]:
    """One completion as the assistant message a client appends to its history."""
    arguments: dict[str, Any] = {"model": MODEL, "messages": messages, "tools": TOOLS, **kw}
    if not stream:
        completion = client.chat.completions.create(**arguments)
        message = completion.choices[0].message
        assert completion.usage is not None
        assert completion.usage.completion_tokens_details is not None
        assert completion.usage.completion_tokens_details.reasoning_tokens
        return {
            "finish": completion.choices[0].finish_reason,
            **message.model_dump(exclude_none=True),
        }
    result: dict[str, Any] = {"role": "assistant", "content": None, "reasoning_content": ""}
    calls: dict[int, dict[str, Any]] = {}
    seen_content = False
    finish = None
    for chunk in client.chat.completions.create(**arguments, stream=True):
        for choice in chunk.choices:
            delta = choice.delta
            piece = (delta.model_extra or {}).get("reasoning_content")
            if piece:
                assert not seen_content, "reasoning_content after content"
                result["reasoning_content"] += piece
            if delta.content:
                seen_content = True
                result["content"] = (result["content"] or "") + delta.content
            for call in delta.tool_calls or []:
                slot = calls.setdefault(
                    call.index, {"type": "function", "function": {"arguments": ""}}
                )
                if call.id is not None:
                    assert call.function is not None
                    slot["id"], slot["function"]["name"] = call.id, call.function.name
                if call.function is not None and call.function.arguments:
                    slot["function"]["arguments"] += call.function.arguments
            finish = choice.finish_reason or finish
    if calls:
        result["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"finish": finish, **result}


def history_entry(answer: dict[str, Any], *, keep_reasoning: bool = True) -> dict[str, Any]:
    entry = {k: v for k, v in answer.items() if k != "finish"}
    if not keep_reasoning:
        entry.pop("reasoning_content", None)
    return entry


def tool_result(answer: dict[str, Any], content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"], "content": content}


# --- auth ------------------------------------------------------------------------------------


def test_auth_is_the_responses_endpoints(fake):
    for path in ("/v1/chat/completions", "/v1/responses"):
        missing = requests.post(fake.root + path, json={}, timeout=5)
        wrong = requests.post(
            fake.root + path,
            json={},
            headers={"Authorization": "Bearer sk-wrong-key-123"},
            timeout=5,
        )
        assert missing.status_code == wrong.status_code == 401
        assert missing.json()["error"]["message"].startswith("You didn't provide an API key.")
        assert wrong.json()["error"]["code"] == "invalid_api_key"
        assert wrong.json()["error"]["message"].startswith("Incorrect API key provided: sk-wr")
    with (
        fake.client("sk-wrong-key-123") as bad,
        pytest.raises(openai.AuthenticationError) as caught,
    ):
        bad.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 401
    with fake.client("sk-other") as other:  # any accepted key
        other.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])


def test_other_methods_are_invalid_urls(fake):
    answer = requests.get(fake.root + "/v1/chat/completions", timeout=5)
    assert answer.status_code == 404
    assert answer.json()["error"]["message"] == "Invalid URL (GET /v1/chat/completions)"


# --- answers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_default_answer_through_the_sdk(client, stream):
    answer = turn(client, [{"role": "user", "content": "hello"}], stream=stream)
    assert answer["finish"] == "stop"
    assert answer["content"] == "Echo: hello\ncontinuity: restored=0 exact=0 wrong=0 missing=0"
    assert answer["reasoning_content"].startswith("Thinking about: hello #")


@pytest.mark.parametrize("stream", [False, True])
def test_call_tool_through_the_sdk(client, stream):
    answer = turn(client, [{"role": "user", "content": "CALL_TOOL please"}], stream=stream)
    assert answer["finish"] == "tool_calls"
    assert [c["function"]["name"] for c in answer["tool_calls"]] == ["read_file"]
    assert answer["tool_calls"][0]["function"]["arguments"] == "{}"


def test_stream_usage_chunk_through_the_sdk(client):
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens_details is not None
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens > 0


# --- the three-turn tool chain -----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "rule", ["tool_turns", "tool_turns_indexed", "kimi", "all_turns_with_tools"]
)
def test_tool_chain_succeeds_when_reasoning_is_passed_back(fake, client, stream, rule):
    assert fake.strict({"rule": rule}).status_code == 200
    user = {"role": "user", "content": "CALL_TOOL read a.txt"}
    first = turn(client, [user], stream=stream)
    history = [user, history_entry(first), tool_result(first, "a.txt: see b")]
    fake.script(GREP)
    second = turn(client, history, stream=stream)
    assert second["finish"] == "tool_calls"
    assert second["reasoning_content"].startswith("Now grep. #")
    history += [history_entry(second), tool_result(second, "found x")]
    third = turn(client, history, stream=stream)
    assert third["finish"] == "stop"
    assert (
        third["content"] == "Tool output: found x\ncontinuity: restored=2 exact=2 wrong=0 missing=0"
    )
    records = fake.records(wait_for=3)
    assert [r["status"] for r in records] == [200, 200, 200]
    assert [r["path"] for r in records] == ["/v1/chat/completions"] * 3
    assert records[2]["continuity"]["items"] == [
        {"index": 1, "state": "exact", "tool_calls": 1},
        {"index": 3, "state": "exact", "tool_calls": 1},
    ]
    assert records[2]["stream"] is stream
    if stream:
        assert records[2]["events"][-1] == "[DONE]"


EXPECTED = {
    ("tool_turns", 1): DEEPSEEK,
    ("tool_turns", 3): DEEPSEEK,
    ("tool_turns_indexed", 1): "Missing `reasoning_content` field in the assistant message at message index 1.",
    ("tool_turns_indexed", 3): "Missing `reasoning_content` field in the assistant message at message index 3.",
    ("kimi", 1): "thinking is enabled but reasoning_content is missing in assistant tool call message at index 1",
    ("kimi", 3): "thinking is enabled but reasoning_content is missing in assistant tool call message at index 3",
}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("rule", "dropped"), list(EXPECTED))
@pytest.mark.parametrize("prefix", [False, True])
def test_tool_chain_fails_when_reasoning_is_dropped(fake, client, stream, rule, dropped, prefix):
    assert fake.strict({"rule": rule, "prefix": prefix}).json() == {"rule": rule, "prefix": prefix}
    user = {"role": "user", "content": "CALL_TOOL read a.txt"}
    first = turn(client, [user], stream=stream)
    keep_first = dropped != 1
    history = [user, history_entry(first, keep_reasoning=keep_first), tool_result(first, "b")]
    fake.script(GREP)
    if keep_first:
        second = turn(client, history, stream=stream)
        history += [history_entry(second, keep_reasoning=False), tool_result(second, "x")]
    with pytest.raises(openai.BadRequestError) as caught:
        turn(client, history, stream=stream)
    message = ("Param Incorrect: " if prefix else "") + EXPECTED[rule, dropped]
    error = caught.value
    assert error.status_code == 400
    assert error.body == {
        "message": message,
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    assert error.message == f"Error code: 400 - {message}"  # the SDK surfaces the text
    last = fake.records()[-1]
    assert last["status"] == 400
    assert last["continuity"]["missing"] == 1
    assert last["response"]["error"]["message"] == message


def test_reasoning_moved_between_turns_counts_wrong(fake, client):
    user = {"role": "user", "content": "CALL_TOOL"}
    first = turn(client, [user], stream=False)
    fake.script(GREP)
    history = [user, history_entry(first), tool_result(first, "b")]
    second = turn(client, history, stream=False)
    swapped = [
        user,
        {**history_entry(first), "reasoning_content": second["reasoning_content"]},
        tool_result(first, "b"),
        {**history_entry(second), "reasoning_content": first["reasoning_content"]},
        tool_result(second, "x"),
    ]
    fake.script({"strict": "off"})
    third = turn(client, swapped, stream=False)
    assert third["content"].endswith("continuity: restored=2 exact=0 wrong=2 missing=0")
    with pytest.raises(openai.BadRequestError, match="must be passed back"):
        turn(client, swapped, stream=False)


def test_all_turns_with_tools_needs_plain_turns_too(fake, client):
    fake.strict("all_turns_with_tools")
    user = {"role": "user", "content": "hello"}
    plain = turn(client, [user], stream=False)
    history = [
        user,
        history_entry(plain, keep_reasoning=False),
        {"role": "user", "content": "more"},
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        turn(client, history, stream=False)
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["message"] == DEEPSEEK
    history[1] = history_entry(plain)
    assert turn(client, history, stream=False)["content"].endswith(
        "restored=1 exact=1 wrong=0 missing=0"
    )
    # Under the documented rule the plain turn needs nothing.
    fake.strict("tool_turns")
    history[1] = history_entry(plain, keep_reasoning=False)
    assert turn(client, history, stream=False)["content"].endswith(
        "restored=0 exact=0 wrong=0 missing=1"
    )


def test_legacy_rejects_reasoning_sent_back(fake, client):
    fake.script({"strict": "legacy_rejects"}, {"strict": "legacy_rejects"})
    user = {"role": "user", "content": "hello"}
    plain = turn(client, [user], stream=False)
    history = [user, history_entry(plain), {"role": "user", "content": "again"}]
    with pytest.raises(openai.BadRequestError) as caught:
        turn(client, history, stream=True)
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["message"] == (
        "reasoning_content is not accepted in input messages by this model; remove it from "
        "the message at message index 1."
    )
    history[1] = history_entry(plain, keep_reasoning=False)
    fake.script({"strict": "legacy_rejects"})
    assert turn(client, history, stream=True)["finish"] == "stop"


# --- controls and scripted errors ----------------------------------------------------------------


def test_strict_control_endpoint(fake):
    root = fake.root + "/__fake/strict"
    assert requests.get(root, timeout=5).json() == {"rule": "tool_turns", "prefix": False}
    assert fake.strict({"prefix": True}).json() == {"rule": "tool_turns", "prefix": True}
    assert fake.strict("kimi").json() == {"rule": "kimi", "prefix": True}
    bad = fake.strict({"rule": "sometimes"})
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "invalid_strict"
    assert "'strict.rule' must be one of" in bad.json()["error"]["message"]
    broken = requests.post(root, data=b"{", timeout=5)
    assert broken.status_code == 400
    assert requests.get(root, timeout=5).json() == {"rule": "kimi", "prefix": True}
    requests.post(fake.root + "/__fake/reset", timeout=5).raise_for_status()
    assert requests.get(root, timeout=5).json() == {"rule": "tool_turns", "prefix": False}


def test_bad_strict_script_is_refused(fake):
    answer = requests.post(fake.root + "/__fake/scripts", json={"strict": "nope"}, timeout=5)
    assert answer.status_code == 400
    assert "'strict.rule' must be one of" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (400, openai.BadRequestError),
    ],
)
def test_scripted_http_errors(fake, client, status, kind):
    fake.script({"http_error": {"status": status, "message": f"scripted {status}"}})
    with pytest.raises(kind) as caught:
        turn(client, [{"role": "user", "content": "hi"}], stream=False)
    assert caught.value.status_code == status
    assert caught.value.body["message"] == f"scripted {status}"


def test_scripted_mid_stream_error(fake, client):
    fake.script({"error_event": {"message": "overloaded", "after_events": 3}})
    with pytest.raises(openai.APIError, match="overloaded"):
        turn(client, [{"role": "user", "content": "hi"}], stream=True)


def test_one_queue_serves_both_endpoints(fake, client):
    fake.script({"output": [{"type": "message", "text": "scripted chat"}]}, {"status": "failed"})
    assert (
        turn(client, [{"role": "user", "content": "hi"}], stream=False)["content"]
        == "scripted chat"
    )
    response = client.responses.create(model="gpt-5", input="hi", store=False)
    assert response.status == "failed"


def test_toxics_apply_to_chat_streams(fake):
    fake.script({"toxics": {"cut_after_events": 2}})
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    answer = requests.post(
        fake.root + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=5,
    )
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    frames = [f for f in answer.text.split("\n\n") if f]
    assert len(frames) == 2
    assert all(f.startswith("data: {") for f in frames)
    assert fake.records(wait_for=1)[0]["ended"] == "finish"


def test_the_cli_sets_the_strictness():
    command = [sys.executable, "-m", "fakeupstream", "--port", "0", "--quiet"]
    command += ["--strict", "kimi", "--strict-prefix"]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            line = child.stdout.readline().strip()
            root = line.removeprefix("fakeupstream listening on ")
            strict = requests.get(root + "/__fake/strict", timeout=5).json()
            assert strict == {"rule": "kimi", "prefix": True}
        finally:
            child.terminate()
            child.wait(10)
