"""haproxy in front of two ``relay serve`` processes (tests/support/haproxy.py, team.py):
round robin, a stream passed through as it comes, a dead instance taken out of the
rotation. Each relay keeps a SQLite store of its own here; sharing one is
test_team_deployment.py's."""

from __future__ import annotations

import os
import signal
import subprocess
from itertools import pairwise
from pathlib import Path

import pytest

from fakeupstream.fake import FakeUpstream
from tests.support.haproxy import RECIPE, address_of, config, program
from tests.support.team import content_deltas, data_frames, team


def test_consecutive_requests_land_on_different_instances(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    with team(upstream, tmp_path, ("r1", "r2")) as two:
        turns = [two.chat([{"role": "user", "content": f"hello {i}"}]) for i in range(4)]
        assert [turn.status for turn in turns] == [200] * 4
        instances = [turn.instance for turn in turns]
        assert set(instances) == {"r1", "r2"}
        assert all(a != b for a, b in pairwise(instances)), instances
        # Each relay's own count agrees with the header haproxy added.
        assert two.requests_served("r1") == {"ok": 2.0}
        assert two.requests_served("r2") == {"ok": 2.0}
        for i, turn in enumerate(turns):
            assert turn.text.startswith(f"Echo: hello {i}\n")


def test_a_stream_passes_through_as_it_comes(tmp_path: Path, upstream: FakeUpstream) -> None:
    with team(upstream, tmp_path, ("r1", "r2")) as two:
        # Two deltas, then the upstream goes silent with the stream open: the first delta
        # reaches the client only if no hop buffers the body until its end.
        upstream.enqueue(
            {
                "output": [{"type": "message", "text": "first second"}],
                "deltas": 2,
                "toxics": {"hang_after_events": 5},
            }
        )
        with two.stream([{"role": "user", "content": "stream it"}]) as answer:
            assert answer.status_code == 200
            assert answer.headers["Content-Type"].startswith("text/event-stream")
            assert "Content-Encoding" not in answer.headers
            first = next(content_deltas(data_frames(answer)))
            assert first == "first "
            assert upstream.requests[-1].ended is None  # the upstream is still holding it


def test_a_dead_instance_leaves_the_rotation(tmp_path: Path, upstream: FakeUpstream) -> None:
    with team(upstream, tmp_path, ("r1", "r2", "r3")) as three:
        os.kill(three.relays["r2"].proc.pid, signal.SIGKILL)
        assert three.proxy is not None
        # Before haproxy's check notices, a refused connection is redispatched.
        turns = [three.chat([{"role": "user", "content": f"q{i}"}]) for i in range(3)]
        three.proxy.wait_down("r2")
        turns += [three.chat([{"role": "user", "content": f"q{i}"}]) for i in range(3, 7)]
        assert [turn.status for turn in turns] == [200] * 7
        assert {turn.instance for turn in turns} == {"r1", "r3"}
        assert three.requests_served("r1")["ok"] + three.requests_served("r3")["ok"] == 7


def test_the_recipe_is_valid_and_the_tests_change_only_address_servers_and_timing(
    tmp_path: Path,
) -> None:
    found = program()
    if found is None:
        pytest.skip("haproxy not found (Debian package 'haproxy')")
    checked = subprocess.run([found, "-c", "-q", "-f", str(RECIPE)], capture_output=True,
                             text=True, timeout=30, check=False)  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    recipe = RECIPE.read_text(encoding="utf-8").splitlines()
    rendered = config([("a", "127.0.0.1:1"), ("b", "127.0.0.1:2")], 3, "/healthz").splitlines()
    changed = ("bind ", "server ", "default-server ")
    kept = [line for line in recipe if not line.strip().startswith(changed)]
    assert [line for line in rendered if not line.strip().startswith(changed)] == kept
    assert "    bind fd@3" in rendered
    assert rendered[-2:] == ["    server a 127.0.0.1:1", "    server b 127.0.0.1:2"]
    assert "    balance roundrobin" in kept and "    option httpchk GET /healthz" in kept
    assert address_of("http://127.0.0.1:4321/v1") == "127.0.0.1:4321"
