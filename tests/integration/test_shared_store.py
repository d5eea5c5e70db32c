"""Two relays on one PostgreSQL store over real loopback servers (the SDK as the client,
the fake upstream's continuity probe as the judge): a conversation whose turns alternate
between the relays replays every earlier block; PostgreSQL going away turns only the
requests that need a safety write into 503 cache_unavailable (at once, with no connect
attempt on the loop, while it is known down), and both relays recover by themselves, through
a background probe, when it is back."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

from relay.app.server import RelayServer
from relay.clock import Clock, ManualClock
from relay.ops.collector import RuntimeCollector
from relay.ops.status import status_document
from relay.storage.postgres.connections import PROBE_CAP_S, Connections
from tests.support.cache_stack import CACHE_ON, ask, continuity
from tests.support.log_leaks import observe_process
from tests.support.pg_cluster import PgCluster, PgDatabase
from tests.support.pg_store import SilentForwarder
from tests.support.relay_cli import relay_env
from tests.support.stack import Stack, running_stack
from tests.support.team import content_deltas, data_frames

PASSWORD = "pw-never-printed-4431"


@contextmanager
def two_relays(
    tmp_path: Path, url: str, clock: Clock | None = None
) -> Iterator[tuple[Stack, Stack]]:
    """Two relays sharing the store at ``url`` and one fake upstream (one scope: the same
    upstream origin, credential and relay token), each with its own data directory."""
    env = {**CACHE_ON, "REASONING_CACHE_URL": url, "RELAY_ADMIN_SOCKET": "off"}
    with running_stack(tmp_path / "a", env, clock=clock) as first:
        config = dataclasses.replace(first.config, data_dir=tmp_path / "b")
        relay = RelayServer(config, clock=first.clock)
        first.loop.run(relay.start())
        second = Stack(first.loop, first.fake, relay, config, first.clock)
        try:
            yield first, second
        finally:
            second.close_clients()
            first.loop.run(relay.stop())


def turn(messages: list[dict[str, Any]], text: str, n: int) -> None:
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"q{n}"}]


def connections_of(stack: Stack) -> Connections:
    runtime = stack.relay.runtime
    assert runtime is not None and runtime.leases is not None
    connections = runtime.leases.store.connections
    assert connections is not None
    return connections


def refused_503(stack: Stack, messages: list[dict[str, Any]]) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        ask(stack, messages, stream=False)
    assert refused.value.status_code == 503
    body = refused.value.body
    assert isinstance(body, dict) and body["code"] == "cache_unavailable"


def bypassing_requests_work(stack: Stack) -> None:
    """/healthz and a request that needs no safety write (not a reasoning model)."""
    assert requests.get(f"http://127.0.0.1:{stack.port}/healthz", timeout=30).ok
    with stack.openai() as client:
        plain = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
        assert plain.choices[0].message.content


def ask_after_restart(stack: Stack, messages: list[dict[str, Any]]) -> tuple[str, list[int]]:
    """The answer, and the statuses of the failures before it: a request that finds a
    probe due starts it and is refused; once the probe has connected, the relay serves."""
    failed: list[int] = []
    for _attempt in range(2):
        try:
            return ask(stack, messages, stream=False), failed
        except openai.APIStatusError as err:
            failed.append(err.status_code)
            assert connections_of(stack).wait_probe(30)
    raise AssertionError(f"no recovery: {failed}")


def test_a_conversation_alternating_between_relays_replays_every_block(
    tmp_path: Path, pg_database: PgDatabase
) -> None:
    with two_relays(tmp_path, pg_database.url) as (a, b):
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
        for n, (relay, stream) in enumerate([(a, True), (b, False), (a, False), (b, True)]):
            text = ask(relay, messages, stream=stream)
            assert continuity(text) == (n, n, 0), f"turn {n}"
            turn(messages, text, n)
        for stack in (a, b):
            runtime = stack.relay.runtime
            assert runtime is not None and runtime.leases is not None
            shared = runtime.leases.to_json()
            live = shared["liveInstances"]
            assert isinstance(live, list) and len(live) == 2, shared
            assert any("postgresql://" in line for line in stack.relay.banner())


def test_a_database_restart_fails_safety_writes_only_and_recovers(
    tmp_path: Path, own_pg_cluster: PgCluster
) -> None:
    """While the database is down no request waits on a connect: after the one attempt
    that finds it down, a burst of safety writes costs no connect attempt until a probe is
    due (the fake clock, not the wall clock, says when), then at most one per probe
    interval, off the loop; requests that bypass the cache are served throughout."""
    clock = ManualClock()
    database = own_pg_cluster.create_database()
    with two_relays(tmp_path, own_pg_cluster.url(database), clock) as (a, b):
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
        turn(messages, ask(a, messages, stream=False), 0)
        own_pg_cluster.stop()
        for relay in (a, b):
            pool = connections_of(relay)
            refused_503(relay, messages)  # finds it down (the heartbeat may have first)
            attempts = pool.connect_attempts
            assert pool.known_down
            for _burst in range(8):
                refused_503(relay, messages)
            bypassing_requests_work(relay)
            assert pool.connect_attempts == attempts and pool.refused >= 8
            for _interval in range(3):  # one probe per interval at most, still down
                clock.advance(PROBE_CAP_S)
                for _burst in range(4):
                    refused_503(relay, messages)
                assert pool.wait_probe(30)
            assert attempts < pool.connect_attempts <= attempts + 3
        own_pg_cluster.start()
        clock.advance(PROBE_CAP_S)
        for n, relay in enumerate((b, a), start=1):
            text, failed = ask_after_restart(relay, messages)
            assert failed in ([], [503])  # at most the request that started the probe
            assert continuity(text)[0] == n, f"relay {n} did not recover"
            turn(messages, text, n)


def test_a_database_gone_silent_holds_no_other_request(
    tmp_path: Path, pg_database: PgDatabase
) -> None:
    """A database host that stops answering (no refusal, no reply): the request whose
    safety write needs a new connection is refused once the connect budget is spent, and
    other requests are served, all while that connect still waits for libpq's
    connect_timeout, off the loop."""
    with SilentForwarder(pg_database.cluster) as forwarder:
        env = {**CACHE_ON, "REASONING_CACHE_URL": forwarder.url(pg_database.name),
               "RELAY_ADMIN_SOCKET": "off"}  # fmt: skip
        with running_stack(tmp_path / "relay", env) as stack:
            messages: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
            assert continuity(ask(stack, messages, stream=False))[0] == 0
            pool = connections_of(stack)
            forwarder.go_silent()
            refused_503(stack, messages)  # its pooled connections cut, a new one unanswered
            assert not pool.wait_probe(0), "the relay waited for the connect"
            assert requests.get(f"http://127.0.0.1:{stack.port}/healthz", timeout=30).ok
            refused_503(stack, messages)  # known down: refused at once
            assert not pool.wait_probe(0), "a request waited for the connect"
            assert pool.known_down and pool.wait_probe(30)  # libpq gave up, off the loop


def test_serve_refuses_an_unreachable_database_in_one_line(
    tmp_path: Path, own_pg_cluster: PgCluster
) -> None:
    """``relay serve`` as a process: one line naming the database and the variable, and
    the password in the URL nowhere in its output."""
    own_pg_cluster.stop()
    url = own_pg_cluster.url("postgres").replace("relay@", f"relay:{PASSWORD}@")
    env = relay_env(tmp_path, REASONING_CACHE_ENABLED="1", REASONING_CACHE_URL=url,
                    RELAY_ADMIN_SOCKET="off")  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "relay", "serve"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    observe_process("test_shared_store relay serve", result.stdout + result.stderr, env)
    assert result.returncode == 1
    assert PASSWORD not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("relay: cannot open the reasoning cache: cannot reach")
    assert "REASONING_CACHE_URL" in lines[0] and "postgresql://relay@" in lines[0]


def test_status_and_metrics_show_the_store_kind_and_the_leases(
    tmp_path: Path, pg_database: PgDatabase
) -> None:
    with two_relays(tmp_path, pg_database.url) as (a, _other):
        ops, runtime = a.relay.ops, a.relay.runtime
        assert ops is not None and runtime is not None

        async def read() -> tuple[dict[str, Any], dict[str, float]]:
            doc = status_document(runtime, ops.sampler, ops.snapshots, offline_fake=False)
            samples = {
                f"{s.name}{sorted(s.labels.items())}": s.value
                for family in RuntimeCollector(runtime, ops.sampler).collect()
                for s in family.samples
            }
            return doc, samples

        doc, samples = a.loop.run(read())
        assert doc["relay"]["storeKind"] == "postgresql"
        shared = doc["relay"]["shared"]
        assert shared["database"].startswith("postgresql://") and len(shared["liveInstances"]) == 2
        assert doc["store"]["counts"]["observations"]["value"] == 0
        assert samples["relay_cache_store_info[('kind', 'postgresql')]"] == 1
        assert samples["relay_shared_live_instances[]"] == 2
        own = [k for k in samples if "lease_expires" in k and "'self', 'true'" in k]
        assert len(own) == 1 and 0 < samples[own[0]] <= 30


def test_a_relay_with_caching_off_on_the_shared_store_says_what_it_costs(
    tmp_path: Path, pg_database: PgDatabase
) -> None:
    env = {"REASONING_CACHE_URL": pg_database.url, "RELAY_ADMIN_SOCKET": "off"}
    with running_stack(tmp_path, env) as stack:
        warning = [line for line in stack.relay.banner() if line.startswith("WARNING")]
        assert len(warning) == 1 and "over the shared store postgresql://relay@" in warning[0]
        assert "for all relays" in warning[0]


def test_an_intent_left_open_by_an_outage_is_poisoned_when_the_database_returns(
    tmp_path: Path, own_pg_cluster: PgCluster
) -> None:
    """A generation in flight when PostgreSQL goes away cannot resolve its intent; the
    instance remembers it and its own heartbeat poisons and removes it once the database
    answers again, without waiting for the instance to die."""
    clock = ManualClock()
    database = PgDatabase(own_pg_cluster, own_pg_cluster.create_database())
    env = {**CACHE_ON, "REASONING_CACHE_URL": database.url, "RELAY_ADMIN_SOCKET": "off"}
    with running_stack(tmp_path, env, clock=clock) as stack:
        runtime = stack.relay.runtime
        assert runtime is not None and runtime.leases is not None
        keeper, store = runtime.leases, runtime.leases.store
        stack.script(
            {
                "output": [{"type": "message", "text": "half said"}],
                "deltas": 2,
                "toxics": {"hang_after_events": 5},
            }
        )
        body: dict[str, Any] = {
            "model": "gpt-5",
            "stream": True,
            "messages": [{"role": "user", "content": "x"}],
        }
        with requests.post(
            f"{stack.base_url}/chat/completions", json=body, headers=stack.headers(),
            stream=True, timeout=30,
        ) as answer:  # fmt: skip
            frames = data_frames(answer)  # kept: a collected iterator closes the stream
            deltas = content_deltas(frames)
            assert "half said".startswith(next(deltas))
            with database.connect() as conn:
                (position,) = conn.execute("SELECT position FROM intents").fetchone() or ()
            own_pg_cluster.stop()
            stack.loop.run(stack.fake.drop_connections())  # the generation fails mid-way
            with contextlib.suppress(requests.RequestException):
                for _rest in frames:
                    pass

        async def abandoned() -> int:
            return len(store.abandoned)

        for _turn in range(200):  # the relay closes the session after the client's end
            if stack.loop.run(abandoned()):
                break
            stack.loop.run(asyncio.sleep(0.01))
        assert stack.loop.run(abandoned()) == 1
        own_pg_cluster.start()

        async def beat() -> None:
            keeper.beat()

        clock.advance(PROBE_CAP_S)
        stack.loop.run(beat())  # refused: it starts the probe
        assert connections_of(stack).wait_probe(30)
        stack.loop.run(beat())
        assert keeper.to_json()["abandonedRecovered"] == 1
        with database.connect() as conn:
            assert conn.execute("SELECT count(*) FROM intents").fetchone() == (0,)
            poisoned = conn.execute("SELECT kind, position FROM markers").fetchall()
        assert poisoned == [("start_poison", position)]
