"""Transport guards over real sockets: timeouts, broken streams, keepalive, cancellation."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from relay.transport.downstream import Downstream
from tests.support.stack import Stack

BODY: dict[str, Any] = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}
TEXT = {"output": [{"type": "message", "text": "hello world"}]}


def post(stack: Stack, stream: bool) -> requests.Response:
    return requests.post(
        f"{stack.base_url}/chat/completions",
        json={**BODY, "stream": stream},
        headers=stack.headers(),
        timeout=20,
    )


def sse_frames(resp: requests.Response) -> list[str]:
    assert resp.status_code == 200, resp.text
    return [f for f in resp.text.split("\n\n") if f]


def assert_stream_failed(resp: requests.Response, needle: str) -> None:
    """A visible failure: an error frame and no [DONE], or (if it broke before the first
    frame could be sent) a 5xx with the error envelope."""
    if resp.status_code >= 500:
        assert needle in resp.json()["error"]["message"]
        return
    frames = sse_frames(resp)
    assert frames[-1] != "data: [DONE]"
    assert "data: [DONE]" not in frames
    error = json.loads(frames[-1][len("data: ") :])["error"]
    assert needle in error["message"], error


@pytest.mark.parametrize(
    ("toxics", "needle"),
    [
        ({"cut_after_events": 5}, "without a terminal event"),
        ({"cut_after_events": 5, "cut_mode": "close"}, "terminal event"),
        ({"reset_after_events": 5}, "mid-stream"),
        ({"malformed_at_event": 5}, "JSON"),
    ],
)
def test_broken_streams_fail_visibly(stack: Stack, toxics: dict[str, Any], needle: str) -> None:
    stack.script({**TEXT, "toxics": toxics})
    assert_stream_failed(post(stack, True), needle)
    stack.script({**TEXT, "toxics": toxics})
    resp = post(stack, False)
    assert resp.status_code == 502, resp.text
    assert resp.json()["error"]["type"] == "upstream_error"


def test_missing_final_blank_line_is_accepted(stack: Stack) -> None:
    stack.script({**TEXT, "toxics": {"omit_final_blank_line": True}})
    frames = sse_frames(post(stack, True))
    assert frames[-1] == "data: [DONE]"


def test_sliced_stream_gives_same_answer(stack: Stack) -> None:
    stack.script({**TEXT, "toxics": {"slice_bytes": 7, "slice_random": True}})
    sliced = sse_frames(post(stack, True))
    stack.script(TEXT)
    whole = sse_frames(post(stack, True))

    def contents(frames: list[str]) -> list[object]:
        return [json.loads(f[6:])["choices"] for f in frames if f != "data: [DONE]"]

    assert contents(sliced) == contents(whole)


def test_oversized_event_fails(stack_factory) -> None:  # type: ignore[no-untyped-def]
    with stack_factory({"RELAY_MAX_SSE_EVENT_BYTES": "2048"}) as s:
        s.script({**TEXT, "toxics": {"oversized_event_bytes": 10_000, "oversized_at_event": 1}})
        resp = post(s, False)
        assert resp.status_code == 502
        assert "RELAY_MAX_SSE_EVENT_BYTES" in resp.json()["error"]["message"]


def test_idle_upstream_times_out(stack_factory) -> None:  # type: ignore[no-untyped-def]
    with stack_factory({"RELAY_IDLE_TIMEOUT_MS": "300"}) as s:
        s.script({**TEXT, "toxics": {"hang_after_events": 0}})
        resp = post(s, False)
        assert resp.status_code == 504, resp.text
        assert "RELAY_IDLE_TIMEOUT_MS" in resp.json()["error"]["message"]
        s.script({**TEXT, "toxics": {"hang_after_events": 4}})
        assert_stream_failed(post(s, True), "RELAY_IDLE_TIMEOUT_MS")


def test_unreachable_upstream_is_502(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.support.stack import running_stack

    # The discard port: nothing listens, and bind(0) never hands it to another test.
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    with running_stack(tmp_path / "d", env) as s:
        for stream in (False, True):
            resp = post(s, stream)
            assert resp.status_code == 502, resp.text
            assert "could not reach the upstream" in resp.json()["error"]["message"]


def test_keepalive_comments_fill_silence(stack_factory) -> None:  # type: ignore[no-untyped-def]
    with stack_factory({"RELAY_SSE_KEEPALIVE_MS": "50"}) as s:
        s.script({**TEXT, "toxics": {"latency_ms": 120}})
        resp = post(s, True)
        frames = sse_frames(resp)
        assert ": keepalive" in frames
        data = [f for f in frames if f.startswith("data: ") and f != "data: [DONE]"]
        text = "".join(json.loads(f[6:])["choices"][0]["delta"].get("content") or "" for f in data)
        assert text == "hello world"  # keepalives never reach assistant output


@contextlib.contextmanager
def streaming_socket(stack: Stack) -> Iterator[socket.socket]:
    """A raw client socket whose streamed answer has begun (a first ``data:`` frame came)
    and then stays open: the fake hangs after four events until the relay goes away."""
    stack.script({**TEXT, "toxics": {"hang_after_events": 4}})
    request = json.dumps({**BODY, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", stack.relay.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            + f"Authorization: Bearer {stack.token}\r\nContent-Type: application/json\r\n".encode()
            + f"Content-Length: {len(request)}\r\n\r\n".encode()
            + request
        )
        received = b""
        while b"data: " not in received:
            received += sock.recv(4096)
        yield sock


def test_client_disconnect_cancels_upstream(stack: Stack) -> None:
    with streaming_socket(stack):
        pass  # leaving closes the socket mid-stream
    # The fake's hanging handler ends only when its client (the relay) goes away.
    done = threading.Event()

    def wait_for_end() -> None:
        while stack.fake.requests[-1].ended is None:
            stack.loop.run(_tick())
        done.set()

    thread = threading.Thread(target=wait_for_end, daemon=True)
    thread.start()
    assert done.wait(10), "the relay did not cancel the upstream request"
    assert stack.fake.requests[-1].ended == "client_gone"


async def _tick() -> None:
    import asyncio

    await asyncio.sleep(0.01)


def test_a_stream_sends_each_frame_at_once_on_a_kept_alive_connection(stack: Stack) -> None:
    """TCP_NODELAY on the client's socket while it streams: without it, a client that keeps
    its connection alive (Cursor does) gets small frames late, each held back by Nagle's
    algorithm until the previous one is ACKed, which the client's delayed ACK postpones."""
    with streaming_socket(stack) as sock:

        async def relay_side_nodelay() -> int:
            # White box: the relay's end of this very connection, on its loop thread.
            for connection in stack.relay._http.connections:  # type: ignore[union-attr]
                server_socket = connection.stream.socket
                if server_socket.getpeername() == sock.getsockname():
                    return server_socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            raise AssertionError("the relay has no connection from this client")

        assert stack.loop.run(relay_side_nodelay()) != 0


@pytest.mark.parametrize("path", ["/chat/completions", "/responses"])
def test_a_stream_is_set_up_once_however_many_frames_go_before_the_first_flush(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """The event-stream headers, TCP_NODELAY and the keepalive timer are set up for the
    first frame only, though the headers are written only when the first batch is flushed
    (here every event comes in one read: the fake shares the relay's loop)."""
    setups: list[Downstream] = []
    start_keepalive = Downstream.start_keepalive

    def counted(down: Downstream) -> None:
        setups.append(down)
        start_keepalive(down)

    monkeypatch.setattr(Downstream, "start_keepalive", counted)
    stack.script(TEXT)
    body: dict[str, Any] = {**BODY, "stream": True}
    if path == "/responses":
        body = {"model": "gpt-5", "input": "hi", "stream": True}
    resp = requests.post(stack.base_url + path, json=body, headers=stack.headers(), timeout=20)
    assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    assert len(sse_frames(resp)) > 3
    assert len(setups) == 1


def test_the_first_output_goes_out_before_the_rest_of_its_read_is_converted(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Time to first token: the role chunk and the first content chunk are flushed at once,
    though the same read holds more events (the fake shares the relay's loop, so every
    event arrives in one read); later frames keep one flush per read."""
    flushed: list[int] = []  # frames per flush
    drain = Downstream.drain

    async def counted(down: Downstream) -> None:
        pending = down._pending
        await drain(down)
        if pending:
            flushed.append(pending)

    monkeypatch.setattr(Downstream, "drain", counted)
    stack.script({"output": [{"type": "message", "text": "x" * 20}], "delta_size": 1})
    frames = sse_frames(post(stack, True))
    chunks = [json.loads(f.removeprefix("data: ")) for f in frames[:-1]]
    assert [c["choices"][0]["delta"] for c in chunks[:2]] == [
        {"role": "assistant", "content": ""},
        {"content": "x"},
    ]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "x" * 20
    assert flushed[0] == 2
    assert flushed[1] > 1  # the rest of that read, in one flush
    assert sum(flushed) == len(frames)
