"""FakeUpstream in-process on a real loopback socket: HTTP answers, records, toxics, replays.

The fake runs in its own IOLoop thread (``running_fake``) so plain blocking clients
(``requests``, raw sockets) can talk to it; one test starts it in the test's own loop.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import openai
import pydantic
import pytest
import requests
from openai.types.responses import Response, ResponseStreamEvent
from tornado.httpclient import AsyncHTTPClient

from fakeupstream import FakeUpstream
from fakeupstream.models import MODELS
from tests.support import recordings
from tests.support.fake_runner import Runner, running_fake

EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
KEY = "sk-test-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
USER = {"role": "user", "content": "hello"}
BASE = {
    "model": "gpt-5",
    "input": [USER],
    "store": False,
    "include": ["reasoning.encrypted_content"],
    "reasoning": {"effort": "low", "summary": "auto"},
}


@pytest.fixture(scope="module")
def shared():
    with running_fake(seed=3, files_dir=recordings.RECORDINGS) as runner:
        yield runner


@pytest.fixture
def fake(shared):
    shared.fake.reset()
    return shared


def post(
    runner: Runner, body: Any, *, headers: dict[str, str] | None = None, **kw: Any
) -> requests.Response:
    return requests.post(
        runner.url + "/responses", json=body, headers=AUTH if headers is None else headers, **kw
    )


def sse_events(text: str) -> list[dict[str, Any]]:
    assert "[DONE]" not in text
    frames = [f for f in text.split("\n\n") if f]
    return [json.loads(f.split("data: ", 1)[1]) for f in frames]


# --- raw socket client ---------------------------------------------------------------


@dataclass
class Raw:
    head: bytes = b""
    chunks: list[bytes] = field(default_factory=list)  # HTTP chunks = the fake's flushes
    finished: bool = False  # the terminating zero-length chunk arrived
    reset: bool = False  # the connection was reset (RST)

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    @property
    def frames(self) -> list[bytes]:
        return [f + b"\n\n" for f in self.body.split(b"\n\n") if f]


def open_raw(runner: Runner, body: dict[str, Any], *, timeout: float = 5) -> socket.socket:
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", runner.fake.port), timeout=timeout)
    sock.sendall(
        b"POST /v1/responses HTTP/1.1\r\nHost: fake\r\nConnection: close\r\n"
        + f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n".encode()
        + f"Content-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    return sock


def read_raw(sock: socket.socket, *, until_frames: int | None = None) -> Raw:
    """Read until EOF/RST, or until ``until_frames`` complete SSE frames arrived."""
    data = b""
    result = Raw()
    while True:
        result = parse_chunked(data, result.reset)
        if until_frames is not None and len(result.frames) >= until_frames:
            return result
        try:
            piece = sock.recv(65536)
        except ConnectionResetError:
            return parse_chunked(data, True)
        if not piece:
            return parse_chunked(data, False)
        data += piece


def parse_chunked(data: bytes, reset: bool) -> Raw:
    head, _, rest = data.partition(b"\r\n\r\n")
    result = Raw(head=head, reset=reset)
    if b"transfer-encoding: chunked" not in head.lower():
        result.chunks = [rest] if rest else []
        return result
    while rest:
        size_line, sep, after = rest.partition(b"\r\n")
        if not sep:
            break
        size = int(size_line, 16)
        if size == 0:
            result.finished = True
            break
        if len(after) < size + 2:
            break
        result.chunks.append(after[:size])
        rest = after[size + 2 :]
    return result


def settle(runner: Runner) -> None:
    """Wait until the fake has finished answering everything it received."""
    runner.call(runner.fake.wait_for_requests(len(runner.fake.requests)))


def raw_exchange(runner: Runner, script: dict[str, Any], body: dict[str, Any] | None = None) -> Raw:
    runner.fake.enqueue(script)
    with open_raw(runner, {**BASE, "stream": True, **(body or {})}) as sock:
        raw = read_raw(sock)
    settle(runner)
    return raw


# --- auth, routing, headers ----------------------------------------------------------


def test_missing_key_gets_openais_401_envelope_and_keeps_the_script(fake):
    fake.fake.enqueue({"output": [{"type": "message", "text": "scripted"}]})
    answer = post(fake, BASE, headers={})
    assert answer.status_code == 401
    assert answer.headers["Content-Type"] == "application/json"
    error = answer.json()["error"]
    assert error["message"].startswith("You didn't provide an API key.")
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", None, None)
    assert answer.text.startswith('{\n    "error": {\n        "message"')  # OpenAI's indent
    assert fake.fake.queued == 1
    assert post(fake, BASE).json()["output"][0]["content"][0]["text"] == "scripted"


def test_configured_keys_reject_others():
    with running_fake(api_keys=["sk-right-key-000"]) as runner:
        answer = post(runner, BASE, headers={"Authorization": "Bearer sk-wrong-key-999"})
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "invalid_api_key"
        assert "sk-wr*******-999" in answer.json()["error"]["message"]
        ok = post(runner, BASE, headers={"Authorization": "Bearer sk-right-key-000"})
        assert ok.status_code == 200


@pytest.mark.parametrize(
    ("method", "path"), [("POST", "/v1/models"), ("GET", "/v1/responses"), ("GET", "/v1/files")]
)
def test_unknown_urls_get_openais_404(fake, method, path):
    answer = requests.request(method, f"http://127.0.0.1:{fake.fake.port}{path}", headers=AUTH)
    assert answer.status_code == 404
    assert answer.json()["error"]["message"] == f"Invalid URL ({method} {path})"


# --- GET /v1/models -------------------------------------------------------------------


def test_models_lists_the_fakes_models_in_openais_shape(fake):
    with openai.OpenAI(
        base_url=fake.url, api_key=KEY, max_retries=0, _strict_response_validation=True
    ) as client:
        page = client.models.list()
    assert [(m.id, m.created, m.owned_by) for m in page.data] == [
        (model_id, created, owner) for model_id, (created, owner) in MODELS.items()
    ]
    assert all(m.object == "model" for m in page.data)
    assert fake.fake.models_listed == 1
    assert fake.fake.requests == []  # the records are model calls only


def test_models_needs_the_key():
    with running_fake(api_keys=["sk-right-key-000"]) as runner:
        url = runner.url + "/models"
        missing = requests.get(url, timeout=5)
        assert missing.status_code == 401
        assert missing.json()["error"]["message"].startswith("You didn't provide an API key.")
        wrong = requests.get(url, headers={"Authorization": "Bearer sk-wrong-key-999"}, timeout=5)
        assert wrong.status_code == 401
        assert wrong.json()["error"]["code"] == "invalid_api_key"
        assert runner.fake.models_listed == 0
        right = requests.get(url, headers={"Authorization": "Bearer sk-right-key-000"}, timeout=5)
        assert right.status_code == 200
        assert runner.fake.models_listed == 1


@pytest.mark.parametrize("model", list(MODELS))
def test_every_listed_model_is_accepted(fake, model):
    answer = post(fake, {"model": model, "input": "hello"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == model


def test_json_answer_headers_and_strict_body(fake):
    answer = post(fake, BASE)
    assert answer.status_code == 200
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.headers["x-request-id"].startswith("req_")
    assert "Server" not in answer.headers
    assert int(answer.headers["Content-Length"]) == len(answer.content)
    response = Response.model_validate(answer.json(), strict=True)
    assert response.output_text.startswith("Echo: hello\ncontinuity: replayed=0")


def test_stream_answer_is_sse_without_done(fake):
    answer = post(fake, {**BASE, "stream": True})
    assert answer.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    assert answer.headers["Transfer-Encoding"] == "chunked"
    assert answer.text.endswith("\n\n")
    events = sse_events(answer.text)
    for event in events:
        EVENT.validate_python(event, strict=True)
    assert events[-1]["type"] == "response.completed"


def test_validation_errors_come_back_with_openais_status_and_text(fake):
    answer = post(fake, {**BASE, "temperature": 0})
    assert answer.status_code == 400
    assert answer.json() == {
        "error": {
            "message": "Unsupported value: 'temperature' does not support 0 with this model. "
            "Only the default (1) value is supported.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "unsupported_value",
        }
    }
    broken = requests.post(fake.url + "/responses", data=b"{not json", headers=AUTH)
    assert broken.status_code == 400
    assert broken.json()["error"]["message"].startswith("We could not parse the JSON body")


def test_scripted_http_error_with_headers(fake):
    fake.fake.enqueue(
        {
            "http_error": {
                "status": 429,
                "type": "requests",
                "code": "rate_limit_exceeded",
                "message": "Rate limit reached.",
                "headers": {"retry-after": "2"},
            }
        }
    )
    answer = post(fake, BASE)
    assert (answer.status_code, answer.headers["retry-after"]) == (429, "2")
    assert answer.json()["error"] == {
        "message": "Rate limit reached.",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }


# --- continuity across real requests -------------------------------------------------


def test_replay_in_place_is_intact_and_reported(fake):
    first = post(fake, BASE).json()
    replay = {**BASE, "input": [USER, *first["output"], {"role": "user", "content": "next"}]}
    second = post(fake, replay).json()
    text = second["output"][-1]["content"][0]["text"]
    assert text == "Echo: next\ncontinuity: replayed=1 intact=1 misplaced=0"
    report = fake.fake.requests[-1].continuity
    assert (report["replayed"], report["intact"], report["invalid"]) == (1, 1, 0)
    assert len(report["secrets"]) == 1


def test_replay_without_ids_still_intact(fake):
    first = post(fake, BASE).json()
    reasoning, message = first["output"]
    visible = {"role": "assistant", "content": message["content"][0]["text"]}
    replay = {**BASE, "input": [USER, reasoning, visible, {"role": "user", "content": "next"}]}
    assert (
        post(fake, replay)
        .json()["output"][-1]["content"][0]["text"]
        .endswith("replayed=1 intact=1 misplaced=0")
    )


def test_replay_in_the_wrong_place_is_misplaced_not_rejected(fake):
    first = post(fake, BASE).json()
    reasoning = first["output"][0]
    wrong = {"role": "assistant", "content": "a different answer"}
    replay = {**BASE, "input": [USER, reasoning, wrong, {"role": "user", "content": "next"}]}
    answer = post(fake, replay)
    assert answer.status_code == 200
    assert answer.json()["output"][-1]["content"][0]["text"].endswith(
        "replayed=1 intact=0 misplaced=1"
    )


def test_replay_after_an_edited_history_is_misplaced_and_recorded(fake):
    first = post(fake, {**BASE, "instructions": "Be brief.", "stream": True})
    final = sse_events(first.text)[-1]["response"]
    after = [*final["output"], {"role": "user", "content": "next"}]
    same = {**BASE, "instructions": "Be brief.", "input": [USER, *after]}
    edited = {**same, "input": [{"role": "user", "content": "hello!"}, *after]}
    dropped = {**same, "input": after}
    bodies = (same, edited, dropped)
    texts = [post(fake, body).json()["output"][-1]["content"][0]["text"] for body in bodies]
    assert [text.rsplit("\n", 1)[1] for text in texts] == [
        "continuity: replayed=1 intact=1 misplaced=0",
        "continuity: replayed=1 intact=0 misplaced=1",
        "continuity: replayed=1 intact=0 misplaced=1",
    ]
    root = f"http://127.0.0.1:{fake.fake.port}/__fake"
    records = requests.get(root + "/requests", params={"wait_for": 4}).json()
    reports = [record["continuity"] for record in records[1:]]
    assert [(r["intact"], r["misplaced"], r["invalid"]) for r in reports] == [
        (1, 0, 0),
        (0, 1, 0),
        (0, 1, 0),
    ]
    assert [r["items"][0]["reason"] for r in reports] == [None, "history", "history"]
    assert [r["items"][0]["index"] for r in reports] == [1, 1, 0]
    assert reports[0]["secrets"] == reports[1]["secrets"] == reports[2]["secrets"]


def test_replay_under_another_key_is_rejected(fake):
    first = post(fake, BASE).json()
    replay = {**BASE, "input": [USER, *first["output"], USER]}
    answer = post(fake, replay, headers={"Authorization": "Bearer sk-another-key"})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_encrypted_content"
    assert fake.fake.requests[-1].continuity["invalid"] == 1


def test_tool_chain_default(fake):
    tools = [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}]
    body: dict[str, Any] = {
        **BASE,
        "tools": tools,
        "input": [{"role": "user", "content": "CALL_TOOL please"}],
    }
    first = post(fake, body).json()
    reasoning, call = first["output"]
    assert (call["type"], call["name"], call["arguments"]) == ("function_call", "read_file", "{}")
    result = {"type": "function_call_output", "call_id": call["call_id"], "output": "file body"}
    body["input"] = [*body["input"], reasoning, call, result]
    text = post(fake, body).json()["output"][-1]["content"][0]["text"]
    assert text == "Tool output: file body\ncontinuity: replayed=1 intact=1 misplaced=0"


# --- records and control endpoints ---------------------------------------------------


def test_requests_are_recorded_with_the_key_redacted(fake):
    post(fake, {**BASE, "stream": True})
    settle(fake)
    record = fake.fake.requests[0]
    assert (record.method, record.path, record.status, record.stream) == (
        "POST",
        "/v1/responses",
        200,
        True,
    )
    assert record.headers["Authorization"] == "REDACTED"
    assert KEY not in json.dumps(record.to_json())
    assert record.body["model"] == "gpt-5"
    assert record.events[-1]["type"] == "response.completed"
    assert record.ended == "finish"


def test_control_endpoints(fake):
    root = f"http://127.0.0.1:{fake.fake.port}/__fake"
    assert requests.get(root + "/health").json() == {"ok": True, "queued": 0, "requests": 0}
    queued = requests.post(root + "/scripts", json=[{"status": "failed"}, {}])
    assert queued.json() == {"queued": 2}
    one = requests.post(root + "/scripts", json={"output": [{"type": "message", "text": "x"}]})
    assert one.json() == {"queued": 3}
    bad = requests.post(root + "/scripts", json={"status": "nope"})
    assert bad.status_code == 400
    assert "script 0: 'status' must be one of" in bad.json()["error"]["message"]
    assert post(fake, BASE).json()["status"] == "failed"
    records = requests.get(root + "/requests", params={"wait_for": 1}).json()
    assert [r["status"] for r in records] == [200]
    assert records[0]["response"]["status"] == "failed"
    assert requests.post(root + "/reset").json() == {"reset": True}
    assert requests.get(root + "/health").json() == {"ok": True, "queued": 0, "requests": 0}


def test_record_file_gets_one_json_line_per_request(tmp_path):
    path = tmp_path / "records.jsonl"
    with running_fake(record_path=str(path)) as runner:
        post(runner, BASE)
        post(runner, BASE, headers={})
        runner.call(runner.fake.wait_for_requests(2))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["status"] for line in lines] == [200, 401]


# --- toxics, seen from a raw socket --------------------------------------------------

TEXT = {"output": [{"type": "message", "text": "one two three four five six seven"}]}


def test_plain_stream_ends_with_a_terminating_chunk(fake):
    raw = raw_exchange(fake, TEXT)
    assert raw.finished and not raw.reset
    assert json.loads(raw.frames[-1].split(b"data: ")[1])["type"] == "response.completed"


def test_slices_split_sse_lines_across_reads(fake):
    raw = raw_exchange(fake, {**TEXT, "toxics": {"slice_bytes": 7}})
    assert raw.finished
    assert max(len(c) for c in raw.chunks) == 7
    assert any(b"\n" not in c for c in raw.chunks)  # pieces fall inside lines
    events = [json.loads(f.split(b"data: ")[1]) for f in raw.frames]
    assert events[-1]["type"] == "response.completed"


def test_random_slices_are_lossless(fake):
    whole = raw_exchange(fake, {**TEXT, "toxics": {}}).frames
    sliced = raw_exchange(fake, {**TEXT, "toxics": {"slice_random": True, "slice_bytes": 9}})
    assert len(sliced.frames) == len(whole)
    assert len({len(c) for c in sliced.chunks}) > 1


def test_cut_after_events_ends_the_body_without_a_terminal(fake):
    raw = raw_exchange(fake, {**TEXT, "toxics": {"cut_after_events": 3}})
    assert raw.finished and len(raw.frames) == 3
    assert b"response.completed" not in raw.body
    record = fake.fake.requests[-1]
    assert (len(record.events), record.ended) == (3, "finish")


def test_cut_close_drops_the_connection_mid_body(fake):
    raw = raw_exchange(fake, {**TEXT, "toxics": {"cut_after_events": 3, "cut_mode": "close"}})
    assert not raw.finished and not raw.reset
    assert len(raw.frames) == 3


def test_cut_after_bytes(fake):
    raw = raw_exchange(fake, {**TEXT, "toxics": {"cut_after_bytes": 1000}})
    assert len(raw.body) == 1000
    assert fake.fake.requests[-1].sent_bytes == 1000


def test_reset_after_events_is_a_tcp_reset(fake):
    raw = raw_exchange(fake, {**TEXT, "toxics": {"reset_after_events": 4}})
    assert raw.reset
    assert len(raw.frames) <= 4  # RST may discard bytes still in flight
    assert fake.fake.requests[-1].ended == "reset"


def test_hang_keeps_the_connection_open_without_blocking_others(fake):
    fake.fake.enqueue({**TEXT, "toxics": {"hang_after_events": 2}})
    with open_raw(fake, {**BASE, "stream": True}) as hanging:
        raw = read_raw(hanging, until_frames=2)
        assert len(raw.frames) == 2
        assert post(fake, BASE).status_code == 200  # the server keeps serving
        hanging.setblocking(False)
        with pytest.raises(BlockingIOError):
            hanging.recv(1)  # nothing more was sent
        assert fake.fake.requests[0].ended is None
    fake.call(fake.fake.wait_for_requests(2))
    assert fake.fake.requests[0].ended == "client_gone"


def test_stop_ends_a_hang():
    with running_fake() as runner:
        runner.fake.enqueue({"toxics": {"hang_after_events": 1}})
        with open_raw(runner, {**BASE, "stream": True}) as sock:
            assert len(read_raw(sock, until_frames=1).frames) == 1
            runner.call(runner.fake.stop())
            rest = read_raw(sock)
            assert not rest.finished
        assert runner.fake.requests[0].ended == "stopped"


def test_latency_before_each_event(fake):
    started = time.monotonic()
    raw = raw_exchange(fake, {**TEXT, "toxics": {"latency_ms": 10}})
    assert time.monotonic() - started >= 0.010 * len(raw.frames)


def test_malformed_event(fake):
    raw = raw_exchange(fake, {**TEXT, "toxics": {"malformed_at_event": 2}})
    data = [f.split(b"data: ", 1)[1] for f in raw.frames]
    json.loads(data[1])
    with pytest.raises(ValueError):
        json.loads(data[2])
    assert json.loads(data[-1])["type"] == "response.completed"


def test_oversized_event(fake):
    raw = raw_exchange(fake, {**TEXT, "toxics": {"oversized_event_bytes": 70_000}})
    big = raw.frames[2].split(b"data: ", 1)[1].rstrip(b"\n")
    assert len(big) == 70_000
    assert json.loads(big)["type"] == "response.output_item.added"


def test_omit_final_blank_line(fake):
    raw = raw_exchange(fake, {**TEXT, "toxics": {"omit_final_blank_line": True}})
    assert raw.finished
    assert raw.body.endswith(b"}\n") and not raw.body.endswith(b"\n\n")
    last = raw.body.rsplit(b"data: ", 1)[1]
    assert json.loads(last)["type"] == "response.completed"


def test_json_body_cut_is_short_of_its_content_length(fake):
    fake.fake.enqueue({"toxics": {"cut_after_bytes": 50}})
    with open_raw(fake, BASE) as sock:
        raw = read_raw(sock)
    assert b"content-length" in raw.head.lower()
    assert len(raw.body) == 50


# --- recordings, byte for byte -------------------------------------------------------

RECORDED = recordings.names()


@pytest.mark.parametrize("name", RECORDED)
@pytest.mark.parametrize(
    "toxics", [{}, {"slice_random": True, "slice_bytes": 97}], ids=["whole", "sliced"]
)
def test_recordings_replay_byte_for_byte(fake, name, toxics):
    path = recordings.stream_path(name)
    fake.fake.enqueue({"raw_sse_file": str(path), "toxics": toxics})
    with post(fake, {**BASE, "stream": True}, stream=True) as answer:
        assert answer.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        received = b"".join(answer.iter_content(chunk_size=None))
    settle(fake)
    assert received == path.read_bytes()
    record = fake.fake.requests[-1]
    assert record.events[-1]["type"] == "response.completed"


def test_recording_cut_mid_stream(fake):
    path = recordings.stream_path("reply_single_tool_call")
    raw = raw_exchange(fake, {"raw_sse_file": str(path), "toxics": {"cut_after_events": 10}})
    assert raw.body == b"".join(path.read_bytes().split(b"\n\n")[i] + b"\n\n" for i in range(10))


# --- in the caller's own loop ---------------------------------------------------------


def test_start_in_the_current_loop():
    async def scenario() -> dict[str, Any]:
        fake = FakeUpstream(seed=1)
        await fake.start()
        try:
            answer = await AsyncHTTPClient().fetch(
                fake.base_url + "/responses",
                method="POST",
                headers=AUTH,
                body=json.dumps({"model": "gpt-4.1", "input": "hi"}),
            )
            parsed: dict[str, Any] = json.loads(answer.body)
            return parsed
        finally:
            await fake.stop()

    body = asyncio.run(scenario())
    assert body["output"][0]["content"][0]["text"].startswith("Echo: hi")


def test_records_are_capped_but_counted():
    with running_fake(max_records=2) as runner:
        for _ in range(3):
            post(runner, BASE)
        runner.call(runner.fake.wait_for_requests(3))
        assert (runner.fake.received, len(runner.fake.requests)) == (3, 2)
        health = requests.get(f"http://127.0.0.1:{runner.fake.port}/__fake/health").json()
        assert health["requests"] == 3


def test_ipv6_loopback():
    async def scenario() -> None:
        fake = FakeUpstream()
        try:
            port = await fake.start("::1", 0)
        except OSError:
            pytest.skip("cannot bind ::1 on this machine")
        try:
            assert fake.base_url == f"http://[::1]:{port}/v1"
            body = json.dumps({"model": "gpt-4.1", "input": "hi"})
            url = fake.base_url + "/responses"
            answer = await AsyncHTTPClient().fetch(url, method="POST", headers=AUTH, body=body)
            assert answer.code == 200
        finally:
            await fake.stop()

    asyncio.run(scenario())
