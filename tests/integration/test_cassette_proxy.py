"""The recording proxy streams (every byte passed on as it arrives, chunk timing kept) and
the fake plays a recording back as it went: its chunks, its delays, its ending."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from fakeupstream.__main__ import main as fake_main
from fakeupstream.cassette import Cassette, Chunk, load
from fakeupstream.fake import FakeUpstream
from live.cassettes import record_cassettes
from tests.support.stack import UPSTREAM_KEY, LoopThread

AUTH = {"Authorization": f"Bearer {UPSTREAM_KEY}"}
BODY = {"model": "gpt-4.1", "input": "hello", "stream": True}


@contextmanager
def serving(fake: FakeUpstream) -> Iterator[LoopThread]:
    """``fake`` on loopback; the loop it runs in, to wait on its events."""
    loop = LoopThread()
    try:
        loop.run(fake.start())
        yield loop
    finally:
        loop.run(fake.stop())
        loop.close()


def events_of(response: requests.Response) -> Iterator[tuple[float, dict[str, Any]]]:
    """Each SSE event's data as it arrives, with the time it arrived."""
    for line in response.iter_lines():
        if line.startswith(b"data: "):
            yield time.monotonic(), json.loads(line[6:])


def post(url: str, body: dict[str, Any] = BODY) -> requests.Response:
    return requests.post(f"{url}/responses", json=body, headers=AUTH, stream=True, timeout=10)


def record_one(fake: FakeUpstream, directory: Path) -> bytes:
    """Record one streamed answer of ``fake`` into a shareable cassette; its bytes."""
    with (
        record_cassettes(fake.base_url, directory, shareable=True) as url,
        post(url) as response,
    ):
        return response.content


def only_cassette(directory: Path) -> Cassette:
    (path,) = directory.glob("cassette-*.yaml")
    return load(path)


def test_the_proxy_passes_events_on_before_the_answer_ends(tmp_path: Path) -> None:
    """The upstream goes silent after three events and never ends: a proxy that buffered
    would pass nothing on (the read would time out)."""
    fake = FakeUpstream(seed=1)
    with serving(fake) as loop:
        fake.enqueue({"toxics": {"hang_after_events": 3}})
        with record_cassettes(fake.base_url, tmp_path, shareable=True) as url:
            with post(url) as response:
                seen = []
                for _, event in events_of(response):
                    seen.append(event["type"])
                    if len(seen) == 3:
                        break
            # The client left: the proxy leaves the upstream too.
            loop.run(fake.wait_for_requests(1))
        assert seen == ["response.created", "response.in_progress", "response.output_item.added"]
        assert fake.requests[0].ended == "client_gone"
    (played,) = only_cassette(tmp_path).interactions
    assert played.ended == "client_gone"
    assert played.response_body.count(b"\n\n") == 3

    # Played back: the same three events, then nothing until the client leaves.
    playing = FakeUpstream(cassette=tmp_path / "cassette-001.yaml")
    with serving(playing) as loop:
        with post(playing.base_url) as response:
            again = [e["type"] for _, (_, e) in zip(range(3), events_of(response), strict=False)]
        assert again == seen
        loop.run(playing.wait_for_requests(1))
        assert playing.requests[0].ended == "client_gone"
        assert [e["type"] for e in playing.requests[0].events] == seen


def test_an_upstream_that_breaks_off_is_played_back_breaking_off(tmp_path: Path) -> None:
    fake = FakeUpstream(seed=2)
    with serving(fake):
        fake.enqueue({"toxics": {"cut_after_events": 4, "cut_mode": "close"}})
        with record_cassettes(fake.base_url, tmp_path, shareable=False) as url:
            got = bytearray()
            with post(url) as response, pytest.raises(requests.exceptions.ChunkedEncodingError):
                for piece in response.iter_content(None):
                    got += piece
    (played,) = only_cassette(tmp_path).interactions
    assert played.ended == "close"
    assert played.response_body == bytes(got) and got.count(b"\n\n") == 4

    playing = FakeUpstream(cassette=tmp_path / "cassette-001.yaml")
    with serving(playing):
        again = bytearray()
        with (
            post(playing.base_url) as response,
            pytest.raises(requests.exceptions.ChunkedEncodingError),
        ):
            for piece in response.iter_content(None):
                again += piece
    assert again == got


def event_times(chunks: tuple[Chunk, ...]) -> list[float]:
    """When (ms after the request) each recorded event had come in whole."""
    times, now = [], 0.0
    for chunk in chunks:
        now += chunk.delay_ms
        times += [now] * chunk.data.count(b"\n\n")
    return times


def test_chunk_timing_is_recorded_and_played_back(tmp_path: Path) -> None:
    """The fake waits the pace before each event from the fourth on, so event i cannot
    come sooner than (i - 2) paces after the request, recorded or played back. (Lower
    bounds only: a loaded machine may delay or merge pieces, never hurry them.)"""
    pace_ms = 40
    script = {
        "output": [{"type": "message", "text": "abcd"}],
        "deltas": 4,
        "toxics": {"latency_ms": pace_ms, "latency_after_events": 3},
    }
    fake = FakeUpstream(seed=3)
    fake.enqueue(script)
    with (
        serving(fake),
        record_cassettes(fake.base_url, tmp_path, shareable=True) as url,
        post(url) as response,
    ):
        recorded = [event["type"] for _, event in events_of(response)]
    (played,) = only_cassette(tmp_path).interactions
    assert len(recorded) == 12 and len(played.chunks) > 1  # passed on in pieces
    came = event_times(played.chunks)
    assert len(came) == len(recorded)
    assert all(came[i] >= (i - 2) * pace_ms * 0.9 for i in range(3, 12)), came

    playing = FakeUpstream(cassette=tmp_path / "cassette-001.yaml")
    with serving(playing):
        start = time.monotonic()
        with post(playing.base_url) as response:
            arrivals = list(events_of(response))
    assert [event["type"] for _, event in arrivals] == recorded
    after_ms = [(at - start) * 1000 for at, _ in arrivals]
    assert all(after_ms[i] >= (i - 2) * pace_ms * 0.9 for i in range(3, 12)), after_ms


def test_the_cassette_control_loads_shows_and_unloads(tmp_path: Path) -> None:
    fake = FakeUpstream(seed=5, files_dir=tmp_path)
    with serving(fake):
        original = record_one(fake, tmp_path)
        path = str(tmp_path / "cassette-001.yaml")
        control = fake.base_url.replace("/v1", "/__fake/cassette")
        bad = requests.post(control, json={"path": str(tmp_path / "none.yaml")}, timeout=10)
        assert bad.status_code == 400 and "cannot read the cassette" in bad.text
        outside = requests.post(control, json={"path": "../elsewhere.yaml"}, timeout=10)
        assert outside.status_code == 400 and "is not under the fake's files directory" in (
            outside.text
        )
        loaded = requests.post(control, json={"path": path, "timing": 0}, timeout=10).json()
        assert loaded["playing"]["interactions"] == 1 and loaded["playing"]["shareable"]
        with post(fake.base_url) as response:
            assert response.content == original
        assert requests.get(control, timeout=10).json()["playing"]["played"] == 1
        with post(fake.base_url) as response:  # played already
            assert response.status_code == 400
            assert response.json()["error"]["code"] == "cassette_mismatch"
        requests.post(fake.base_url.replace("/v1", "/__fake/reset"), timeout=10)
        with post(fake.base_url) as response:  # reset rewinds
            assert response.content == original
        assert requests.delete(control, timeout=10).json() == {"playing": None}
        with post(fake.base_url) as response:  # generated again: new ids, new ciphertext
            assert response.status_code == 200 and response.content != original


def test_the_command_line_plays_a_cassette(tmp_path: Path) -> None:
    fake = FakeUpstream(seed=6)
    with serving(fake):
        original = record_one(fake, tmp_path)
    command = [sys.executable, "-m", "fakeupstream", "--port", "0", "--quiet"]
    command += ["--cassette", str(tmp_path / "cassette-001.yaml"), "--cassette-timing", "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("fakeupstream listening on http://127.0.0.1:"), line
            with post(line.split(" on ")[1].strip() + "/v1") as response:
                assert response.content == original
        finally:
            process.terminate()


def test_the_command_line_says_what_is_wrong_with_a_cassette(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--quiet", "--port", "0", "--cassette", str(tmp_path / "none.yaml")]
    assert fake_main(argv) == 2  # quiet: no log handler left on pytest's captured stderr
    assert "fakeupstream: cannot read the cassette" in capsys.readouterr().err


def test_an_unreachable_upstream_is_a_502_and_records_nothing(tmp_path: Path) -> None:
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    with (
        record_cassettes("http://127.0.0.1:1/v1", tmp_path, shareable=True) as url,
        post(url) as response,
    ):
        assert response.status_code == 502
        error = response.json()["error"]
    assert "could not reach the upstream (http://127.0.0.1:1/v1/responses)" in error["message"]
    assert list(tmp_path.glob("cassette-*")) == []
