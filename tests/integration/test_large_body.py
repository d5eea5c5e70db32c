"""A large body does not stall the other connections: ``relay serve`` (a process of its
own, so that the test's threads do not share its GIL) keeps answering /healthz during a
50 MB upload. The body is parsed off the event loop, piecewise
(relay.http.request_body); it is refused by translation at its last message, so no upstream
work is measured along."""

from __future__ import annotations

import contextlib
import http.client
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from relay.handlers.relaying import PARSE_OFF_LOOP_BYTES
from tests.support.log_leaks import observe_process
from tests.support.relay_cli import relay_env, serving
from tests.support.stack import Stack

# Measured with the body parsed and translated on the loop: one /healthz waited 7.5 s,
# 97 % of the large request's time, and so no other probe was answered meanwhile. Off the
# loop, piecewise: probes answered every few ms throughout (median 3 to 15 times the idle
# one), the slowest 0.2 to 0.7 s, at the start (one pass over the whole text, its UTF-8
# decoding) and at the end (freeing the parsed body, which happens where its last
# reference goes).
MEDIAN_RATIO_LIMIT = 50
WORST_SHARE_LIMIT = 0.25  # of the large request's time


def conversation(size: int, *, valid: bool) -> bytes:
    """A chat body of about ``size`` bytes shaped like a long agent session: content
    parts, tool calls and their results; unless ``valid``, its last message has an
    unknown role."""
    turn = [
        {"role": "user", "content": [{"type": "text", "text": f"step {i} " * 12} for i in range(8)]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/{i}.py"})}}
                for i in range(4)
            ],
        },
        *({"role": "tool", "tool_call_id": f"call_{i}", "content": "line\n" * 40} for i in range(4)),
    ]  # fmt: skip
    one = len(json.dumps(turn))
    messages = turn * (size // one) + [{"role": "user" if valid else "wizard", "content": "x"}]
    return json.dumps({"model": "gpt-5", "messages": messages}).encode()


def healthz(conn: http.client.HTTPConnection) -> float:
    started = time.perf_counter()
    conn.request("GET", "/healthz")
    resp = conn.getresponse()
    assert (resp.status, resp.read()) == (200, b'{"status":"ok"}')
    return time.perf_counter() - started


@contextlib.contextmanager
def fake_upstream() -> Iterator[str]:
    """The fake Responses API as a process of its own: its parse of the large body is
    not the relay's."""
    command = [sys.executable, "-m", "fakeupstream", "--port", "0", "--quiet"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            yield child.stdout.readline().strip().removeprefix("fakeupstream listening on ")
        finally:
            child.kill()
            child.wait()


@pytest.mark.parametrize("relayed", [False, True], ids=["refused at its end", "relayed"])
def test_healthz_is_answered_during_a_large_upload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], relayed: bool
) -> None:
    """``refused at its end``: parsed and translated, then a 400 for its last message.
    ``relayed``: a valid body, parsed, translated, encoded and sent upstream."""
    body = conversation(50 * 1024 * 1024, valid=relayed)
    with contextlib.ExitStack() as stack:
        extra = {}
        if relayed:
            extra = {
                "OPENAI_API_KEY": "sk-test",
                "OPENAI_BASE_URL": stack.enter_context(fake_upstream()) + "/v1",
            }
        env = relay_env(tmp_path, **extra)
        proc = stack.enter_context(serving(env, "test_large_body"))
        assert proc.stdout is not None
        banner = [proc.stdout.readline() for _ in range(3)]
        port = int(banner[0].split("http://127.0.0.1:")[1].split("/")[0])
        token = (tmp_path / "data" / "relay-token").read_text().strip()
        probe = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        idle = statistics.median(healthz(probe) for _ in range(40))
        answer: list[tuple[int, bytes]] = []

        def upload() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
            resp = conn.getresponse()
            answer.append((resp.status, resp.read()))
            conn.close()

        uploading = threading.Thread(target=upload)
        started = time.perf_counter()
        uploading.start()
        during = []
        while uploading.is_alive():
            during.append(healthz(probe))
        took = time.perf_counter() - started
        uploading.join()
        probe.close()
        observe_process("test_large_body", "".join(banner), env)
    worst = max(during)
    with capsys.disabled():
        print(
            f"\nlarge body ({'relayed' if relayed else 'refused at its end'}): "
            f"{len(body) / 1e6:.1f} MB answered in {took:.2f} s; /healthz idle median "
            f"{idle * 1000:.2f} ms, during the upload {len(during)} probes, median "
            f"{statistics.median(during) * 1000:.2f} ms "
            f"({statistics.median(during) / idle:.1f} x idle), worst {worst * 1000:.1f} ms "
            f"({worst / idle:.0f} x idle, {worst / took:.0%} of the upload's time)"
        )
    [(status, text)] = answer
    if relayed:
        assert status == 200, text[:300]
        assert json.loads(text)["object"] == "chat.completion"
    else:
        assert status == 400, text[:300]
        assert "role" in json.loads(text)["error"]["message"]  # the whole body was parsed
    assert len(during) >= 3
    assert statistics.median(during) / idle < MEDIAN_RATIO_LIMIT
    assert worst / took < WORST_SHARE_LIMIT


@pytest.mark.parametrize("path", ["/chat/completions", "/responses"])
def test_a_body_over_the_threshold_is_relayed_as_one_under_it(stack: Stack, path: str) -> None:
    """Parsed and translated on a worker thread (over 1 MiB), the request is relayed
    exactly as it would be from the loop."""
    text = "x" * (PARSE_OFF_LOOP_BYTES + 1000)
    if path == "/chat/completions":
        body: dict[str, object] = {
            "model": "gpt-5",
            "messages": [{"role": "user", "content": text}],
        }
    else:
        body = {"model": "gpt-5", "input": text}
    resp = requests.post(
        stack.base_url + path, data=json.dumps(body), headers=stack.headers(), timeout=30
    )
    assert resp.status_code == 200, resp.text[:300]
    [sent] = stack.fake.requests[-1:]
    assert text in json.dumps(sent.body)
