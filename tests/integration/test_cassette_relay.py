"""A cassette recorded from the fake (relay -> recorder -> fake) replays through the relay
(relay -> playback fake): the official SDK gets the same answers and the fake sees the
same request bodies, on a JSON turn, an SSE turn with a tool call and a replay turn."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
import vcr.serialize
from vcr.serializers import yamlserializer

from fakeupstream.cassette import load
from fakeupstream.cassette_scrub import CIPHERTEXT_KEY, scrub_value
from fakeupstream.fake import FakeUpstream
from live.cassettes import record_cassettes
from relay.app.server import RelayServer
from relay.settings.config import load_config
from tests.support.stack import TOKEN, UPSTREAM_KEY, LoopThread

MODEL = "gpt-5"  # a reasoning model: every answer carries encrypted reasoning
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


@contextmanager
def relay_client(loop: LoopThread, data_dir: Path, upstream: str) -> Iterator[openai.OpenAI]:
    """A relay with the replay cache on, talking to ``upstream``; the strict SDK to it."""
    config = load_config(
        {
            "RELAY_PORT": "0",
            "RELAY_TOKEN": TOKEN,
            "RELAY_DATA_DIR": str(data_dir),
            "OPENAI_API_KEY": UPSTREAM_KEY,
            "OPENAI_BASE_URL": upstream,
            "RELAY_SSE_KEEPALIVE_MS": "0",
            "REASONING_CACHE_ENABLED": "1",
        }
    )
    relay = RelayServer(config)
    port = loop.run(relay.start())
    try:
        with openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key=TOKEN,
            max_retries=0,
            _strict_response_validation=True,
        ) as client:
            yield client
    finally:
        loop.run(relay.stop())


def normalized(payload: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    """A completion or chunk with what the relay makes up itself replaced: its completion
    id (``chatcmpl-`` + random hex, drawn per request) by its order of appearance, and
    ``created`` (the relay's wall clock at the request). Everything else -- content, tool
    call ids and arguments (from the upstream), finish reasons, usage -- stays."""
    assert payload["id"].startswith("chatcmpl-")
    assert isinstance(payload["created"], int)
    number = ids.setdefault(payload["id"], f"completion-{len(ids)}")
    return {**payload, "id": number, "created": "<created>"}


def drive(client: openai.OpenAI) -> list[Any]:
    """Three turns; what the client got, normalized."""
    ids: dict[str, str] = {}
    got: list[Any] = []
    # 1. A JSON turn.
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}]
    )
    got.append(normalized(answer.model_dump(), ids))
    # 2. An SSE turn in which the model calls a tool.
    messages: list[Any] = [{"role": "user", "content": "CALL_TOOL read notes.txt"}]
    with client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    ) as stream:
        chunks = [chunk.model_dump() for chunk in stream]
    got.append([normalized(chunk, ids) for chunk in chunks])
    calls = [
        c
        for chunk in chunks
        for choice in chunk["choices"]
        for c in choice["delta"].get("tool_calls") or []
    ]
    assert calls and calls[0]["id"], "the fake should have called the tool"
    call = {
        "id": calls[0]["id"],
        "type": "function",
        "function": {
            "name": "read_file",
            "arguments": "".join(c["function"]["arguments"] or "" for c in calls),
        },
    }
    # 3. The replay turn: the relay sends the stored block of turn 2 back upstream.
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "the notes"},
    ]
    with client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=TOOLS,
        stream=True,
    ) as stream:
        got.append([normalized(chunk.model_dump(), ids) for chunk in stream])
    return got


@dataclass
class Recording:
    cassette: Path
    answers: list[Any]  # what the client got
    bodies: list[Any]  # what the fake upstream received
    ciphertexts: set[str]  # every encrypted_content the fake sent or received


def ciphertexts_in(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = {v for k, v in value.items() if k == CIPHERTEXT_KEY and isinstance(v, str)}
        return found.union(*(ciphertexts_in(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(ciphertexts_in(v) for v in value))
    return set()


def record(tmp_path: Path, *, shareable: bool) -> Recording:
    loop = LoopThread()
    fake = FakeUpstream(seed=4321)
    try:
        loop.run(fake.start())
        directory = tmp_path / ("shared" if shareable else "private")
        with record_cassettes(fake.base_url, directory, shareable=shareable) as proxy_url:
            assert proxy_url.startswith("http://127.0.0.1:") and proxy_url.endswith("/v1")
            with relay_client(loop, tmp_path / "record-data", proxy_url) as client:
                answers = drive(client)
        (cassette,) = directory.glob("cassette-*.yaml")
        records = fake.requests
        assert [r.status for r in records] == [200, 200, 200]
        sent = [{"events": r.events, "response": r.response, "body": r.body} for r in records]
        return Recording(cassette, answers, [r.body for r in records], ciphertexts_in(sent))
    finally:
        loop.run(fake.stop())
        loop.close()


def replay(tmp_path: Path, cassette: Path) -> tuple[list[Any], list[Any]]:
    loop = LoopThread()
    fake = FakeUpstream(seed=99, cassette=cassette)  # another seed: nothing is generated
    try:
        loop.run(fake.start())
        with relay_client(loop, tmp_path / "replay-data", fake.base_url) as client:
            answers = drive(client)
        assert fake.playback is not None and fake.playback.status()["played"] == 3
        assert [r.status for r in fake.requests] == [200, 200, 200]
        return answers, [r.body for r in fake.requests]
    finally:
        loop.run(fake.stop())
        loop.close()


@pytest.mark.parametrize("shareable", [False, True], ids=["private", "shareable"])
def test_a_recorded_cassette_replays_through_the_relay(tmp_path: Path, shareable: bool) -> None:
    recording = record(tmp_path, shareable=shareable)
    answers, bodies = replay(tmp_path, recording.cassette)

    assert answers == recording.answers
    tool_turn = recording.answers[1]
    assert tool_turn[-2]["choices"][0]["finish_reason"] == "tool_calls"
    # The replay turn replayed the tool turn's block: the fake's probe said so when recording.
    replay_text = "".join(
        c["choices"][0]["delta"]["content"] or "" for c in recording.answers[2] if c["choices"]
    )
    assert "continuity: replayed=1 intact=1" in replay_text

    if shareable:  # the relay sent back the digests the cassette handed out
        assert [scrub_value(b) for b in bodies] == [scrub_value(b) for b in recording.bodies]
        assert bodies != recording.bodies
    else:
        assert bodies == recording.bodies
    replayed = [item for item in bodies[2]["input"] if item.get("type") == "reasoning"]
    assert replayed and all(CIPHERTEXT_KEY in item for item in replayed)


@pytest.mark.parametrize("shareable", [False, True], ids=["private", "shareable"])
def test_no_cassette_keeps_the_authorization_header(tmp_path: Path, shareable: bool) -> None:
    recording = record(tmp_path, shareable=shareable)
    text = recording.cassette.read_text()
    assert UPSTREAM_KEY not in text and TOKEN not in text
    requests, responses, _ = vcr.serialize.deserialize(text, yamlserializer)
    assert len(requests) == 3
    for request in requests:
        assert "authorization" not in {name.lower() for name in request.headers}
        assert request.headers["Content-Type"] == "application/json"  # headers are kept
    assert all(not any(n.lower() == "set-cookie" for n in r["headers"]) for r in responses)


def test_a_shareable_cassette_holds_no_ciphertext_of_the_original(tmp_path: Path) -> None:
    recording = record(tmp_path, shareable=True)
    assert len(recording.ciphertexts) >= 3  # three answers with reasoning, one replayed
    text = recording.cassette.read_text()
    assert not [token for token in recording.ciphertexts if token in text]
    cassette = load(recording.cassette)
    assert cassette.shareable
    found: set[str] = set()
    for interaction in cassette.interactions:
        found |= ciphertexts_in(json.loads(interaction.request_body))
        for line in interaction.response_body.splitlines():
            if line.startswith(b"data: {"):
                found |= ciphertexts_in(json.loads(line[6:]))
    assert found and all(value.startswith("sha256:") and len(value) == 71 for value in found)


def test_an_unscrubbed_cassette_is_private(tmp_path: Path) -> None:
    recording = record(tmp_path, shareable=False)
    assert stat.S_IMODE(os.stat(recording.cassette.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(recording.cassette).st_mode) == 0o600
    # It does keep the ciphertext: that is why it must stay private.
    assert any(token in recording.cassette.read_text() for token in recording.ciphertexts)
