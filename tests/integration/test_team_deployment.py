"""Team deployment with real components on loopback (issue 31 §2): ``relay serve`` processes
behind haproxy (round robin), sharing one PostgreSQL replay store in a throwaway cluster,
one fake upstream for all (tests/support/team.py, haproxy.py, pg_cluster.py).

Replay is read from the fake's continuity probe (``replayed``/``intact``/``misplaced``:
what the upstream got back, checked against what it sealed) and markers and intents from
the shared database itself. The longer fault runs are in
tests/scenarios/test_team_faults.py (``nox -s scenarios``).
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fakeupstream.fake import FakeUpstream
from scenarios.wait import wait_until
from tests.support.cache_stack import continuity
from tests.support.pg_cluster import PgCluster, PgDatabase
from tests.support.relay_cli import run_relay
from tests.support.serve_process import Relay, env_for, start
from tests.support.team import Team, Turn, content_deltas, data_frames, stream_end, team

LEASE_MS = 1500  # short, so a survivor takes over a dead instance's intents quickly
LATENCY_MS = 150  # per event of a racing answer: both are in flight at once


def follow(messages: list[dict[str, Any]], turn: Turn, next_prompt: str) -> list[dict[str, Any]]:
    return [*messages, {"role": "assistant", "content": turn.text},
            {"role": "user", "content": next_prompt}]  # fmt: skip


def rows(database: PgDatabase, query: str) -> list[tuple[Any, ...]]:
    with database.connect() as conn:
        return conn.execute(query).fetchall()


def no_intents_left(database: PgDatabase) -> bool:
    """Every intent resolved: one resolves after its answer is delivered, so just after the
    client has it, it may still be there (the database has no event to wait on)."""
    return wait_until(
        lambda: rows(database, "SELECT count(*) FROM intents") == [(0,)],
        timeout=10, what="every intent resolved",
    )  # fmt: skip


def served_by_every_instance(deployment: Team, messages: list[dict[str, Any]]) -> list[Turn]:
    """One answer from each instance, asking until both serve again; the refusals before
    that are only 503 ``cache_unavailable`` (the database known down, not yet probed)."""
    served: dict[str, Turn] = {}

    def ask() -> bool:
        turn = deployment.chat(messages)
        if turn.status == 200:
            assert turn.instance is not None
            served.setdefault(turn.instance, turn)
        else:
            assert (turn.status, turn.error_code) == (503, "cache_unavailable"), turn
        return set(served) == set(deployment.relays)

    wait_until(ask, timeout=15, what="both instances serving again")
    return [served[name] for name in sorted(served)]


def verify_clean(deployment: Team, database: PgDatabase) -> None:
    """``relay cache verify`` against the shared store, with a relay's own settings."""
    env = next(iter(deployment.relays.values())).env
    done = run_relay("cache", "verify", env=env | {"REASONING_CACHE_URL": database.url})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("verified postgresql://"), lines
    assert lines[0].split(" (")[0].endswith(f"/{database.name}"), lines
    assert lines[-1] == "result: clean", lines


def test_a_conversation_alternating_between_instances_replays_every_earlier_block(
    tmp_path: Path, upstream: FakeUpstream, pg_database: PgDatabase
) -> None:
    with team(upstream, tmp_path, ("r1", "r2"), REASONING_CACHE_URL=pg_database.url) as two:
        messages = [{"role": "user", "content": "turn 0"}]
        instances = []
        for k in range(5):
            if k % 2:  # every other turn streamed: the same rules either way
                with two.stream(messages) as answer:
                    turn = Turn(200, answer.headers["X-Relay-Instance"], {})
                    text = "".join(content_deltas(data_frames(answer)))
                turn = Turn(200, turn.instance, {"choices": [{"message": {"content": text}}]})
            else:
                turn = two.chat(messages)
            instances.append(turn.instance)
            assert continuity(turn.text) == (k, k, 0), (k, turn.instance)
            messages = follow(messages, turn, f"turn {k + 1}")
        assert instances == ["r1", "r2", "r1", "r2", "r1"]
        assert no_intents_left(pg_database)
        verify_clean(two, pg_database)


def test_two_instances_racing_at_one_position_never_both_replay_an_ambiguous_block(
    tmp_path: Path, upstream: FakeUpstream, pg_database: PgDatabase
) -> None:
    with team(upstream, tmp_path, ("r1", "r2"), REASONING_CACHE_URL=pg_database.url) as two:
        messages = [{"role": "user", "content": "race"}]
        first = two.chat(messages)
        messages = follow(messages, first, "answer twice")
        # The same visible answer twice, each with its own ciphertext: at one position, two
        # payloads for one visible identity. Paced, so both are in flight at once.
        same = {
            "output": [
                {"type": "reasoning", "summary": ["thinking it over"]},
                {"type": "message", "text": "the same answer"},
            ],
            "toxics": {"latency_ms": LATENCY_MS},
        }
        upstream.enqueue(same, same)
        with ThreadPoolExecutor(2) as pool:
            racing = list(pool.map(lambda _: two.chat(messages), range(2)))
        assert {turn.instance for turn in racing} == {"r1", "r2"}
        assert [turn.text for turn in racing] == ["the same answer"] * 2
        one, other = upstream.requests[-2:]
        streamed_s = len(one.events) * LATENCY_MS / 1000  # the first took at least this long
        assert abs(other.received_at - one.received_at) < streamed_s, "they overlapped"
        for racer in (one, other):  # each replayed the earlier block, intact
            assert racer.continuity is not None
            assert (racer.continuity["replayed"], racer.continuity["intact"]) == (1, 1)
        ((race_position,),) = rows(  # where two observations share one visible answer
            pg_database, "SELECT position FROM observations GROUP BY position HAVING count(*) = 2"
        )
        # The next turn, on either instance, carries the ambiguous answer: only the block
        # before it replays. (Two answers of their own, so that they conflict with nothing.)
        upstream.enqueue(*({"output": [{"type": "reasoning", "summary": ["more"]},
                                       {"type": "message", "text": f"follow-up {k}"}]}
                           for k in (1, 2)))  # fmt: skip
        after = follow(messages, racing[0], "go on")
        turns = [two.chat(after), two.chat(after)]
        assert {turn.instance for turn in turns} == {"r1", "r2"}
        for follow_up in upstream.requests[-2:]:
            assert follow_up.continuity is not None
            assert (follow_up.continuity["replayed"], follow_up.continuity["intact"]) == (1, 1)
        assert rows(pg_database, "SELECT kind, position FROM markers") == [
            ("end_conflict", race_position)
        ]
        verify_clean(two, pg_database)


def test_a_killed_instances_intent_is_poisoned_by_a_survivor_within_the_lease(
    tmp_path: Path, upstream: FakeUpstream, pg_database: PgDatabase
) -> None:
    with team(
        upstream, tmp_path, ("r1", "r2"),
        REASONING_CACHE_URL=pg_database.url, REASONING_CACHE_LEASE_MS=str(LEASE_MS),
    ) as two:  # fmt: skip
        messages = [{"role": "user", "content": "doomed"}]
        messages = follow(messages, two.chat(messages), "stream this")
        # Mid-stream: two deltas out, then the upstream holds the stream open.
        upstream.enqueue(
            {
                "output": [{"type": "message", "text": "half said"}],
                "deltas": 2,
                "toxics": {"hang_after_events": 5},
            }
        )
        with two.stream(messages) as answer:
            victim = answer.headers["X-Relay-Instance"]
            assert "half said".startswith(next(content_deltas(data_frames(answer))))
            (dead,) = rows(pg_database, "SELECT instance_id, position FROM intents")
            os.kill(two.relays[victim].proc.pid, signal.SIGKILL)
            killed_at = time.monotonic()
        survivor = two.relays[next(name for name in two.relays if name != victim)]

        # Other conversations go on meanwhile (haproxy sends them to the survivor).
        other = [{"role": "user", "content": "unaffected"}]
        for k in range(2):
            turn = two.chat(other)
            assert continuity(turn.text) == (k, k, 0)
            other = follow(other, turn, f"more {k}")

        survivor.output.wait_for(r"cache_lapsed_intents_recovered .*intents=1", LEASE_MS / 250)
        took_s = time.monotonic() - killed_at
        assert took_s < LEASE_MS * 4 / 3 / 1000 + 2.0, took_s  # a lease and a heartbeat
        assert no_intents_left(pg_database)
        assert rows(pg_database, "SELECT kind, position FROM markers") == [
            ("start_poison", dead[1])
        ]

        # The client tries again: a new answer at the poisoned position, which never
        # replays (only the block before it does).
        retry = two.chat(messages)
        assert continuity(retry.text) == (1, 1, 0)
        assert continuity(two.chat(follow(messages, retry, "and now")).text) == (1, 1, 0)
        verify_clean(two, pg_database)


def test_a_postgresql_restart_refuses_only_safety_writes_then_recovers(
    tmp_path: Path, upstream: FakeUpstream, pg_database: PgDatabase
) -> None:
    cluster = pg_database.cluster
    with team(upstream, tmp_path, ("r1", "r2"), REASONING_CACHE_URL=pg_database.url) as two:
        messages = [{"role": "user", "content": "across a restart"}]
        messages = follow(messages, two.chat(messages), "next")
        # One answer in flight as the database goes: paced after its first events.
        upstream.enqueue({"toxics": {"latency_ms": 100, "latency_after_events": 5}})
        with two.stream(messages) as answer:
            frames = data_frames(answer)
            assert next(content_deltas(frames))
            cluster.stop("fast")
            try:
                # Its observation cannot commit: an error frame, never [DONE] (no false
                # success).
                assert [e["code"] for e in stream_end(frames)] == ["cache_unavailable"]
            except BaseException:
                cluster.start()
                raise
        try:
            # A reasoning model's request needs its dispatch intent: refused on both.
            refused = [two.chat(messages), two.chat(messages)]
            assert {turn.instance for turn in refused} == {"r1", "r2"}
            assert [(t.status, t.error_code) for t in refused] == [(503, "cache_unavailable")] * 2
            # A request the cache does not handle needs no write: it still works.
            plain = [
                two.chat([{"role": "user", "content": f"plain {k}"}], "gpt-4o") for k in (1, 2)
            ]
            assert [turn.status for turn in plain] == [200, 200]
        finally:
            cluster.start()
        # No operator action: each instance's background probe (at most a second apart)
        # finds the database again; until then a request is refused at once.
        back = served_by_every_instance(two, messages)
        assert [continuity(turn.text) for turn in back] == [(1, 1, 0), (1, 1, 0)]
        # The position whose answer was cut never replays: only the block before it does.
        upstream.enqueue({"output": [{"type": "reasoning", "summary": ["again"]},
                                     {"type": "message", "text": "a new answer"}]})  # fmt: skip
        retried = two.chat(messages)
        assert retried.text == "a new answer"
        assert continuity(two.chat(follow(messages, retried, "then")).text) == (1, 1, 0)
        verify_clean(two, pg_database)


def test_an_instance_idle_through_a_postgresql_restart_serves_its_next_request(
    tmp_path: Path, upstream: FakeUpstream, pg_database: PgDatabase
) -> None:
    with team(
        upstream, tmp_path, ("r1", "r2"),
        # No heartbeat within the test: it would find a dead connection before a request.
        REASONING_CACHE_URL=pg_database.url, REASONING_CACHE_LEASE_MS="600000",
    ) as two:  # fmt: skip
        messages = [{"role": "user", "content": "idle"}]
        messages = follow(messages, two.chat(messages), "after the restart")
        pg_database.cluster.restart()  # no request meanwhile: each pool still holds one
        turns = [two.chat(messages), two.chat(messages)]
        assert {turn.instance for turn in turns} == {"r1", "r2"}
        assert [(t.status, t.error_code) for t in turns] == [(200, None)] * 2


def test_a_relay_signs_in_with_its_pgpassfile_and_never_prints_the_password(
    tmp_path: Path, upstream: FakeUpstream, pg_cluster: PgCluster, relays: list[Relay]
) -> None:
    """A role that needs its password (scram-sha-256 on the socket); the URL names the
    role and no password; libpq finds it in PGPASSFILE (0600), as it allows."""
    password = "pgpass-secret-0b9f2c71"
    pg_cluster.create_role("team_relay", password)
    database = pg_cluster.create_database(owner="team_relay")
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"*:*:*:team_relay:{password}\n", encoding="utf-8")
    passfile.chmod(0o600)  # libpq ignores a file others can read
    url = pg_cluster.url(database, user="team_relay")
    relay = start(relays, env_for(tmp_path, upstream, REASONING_CACHE_URL=url,
                                  PGPASSFILE=str(passfile)))  # fmt: skip
    try:
        messages = relay.conversation("signed in")
        assert continuity(relay.chat(messages)) == (1, 1, 0)
        relay.stop()
        assert password not in "".join(relay.seen)
        with pg_cluster.connect(database) as conn:
            owners = conn.execute("SELECT DISTINCT tableowner FROM pg_tables "
                                  "WHERE schemaname = 'public'").fetchall()  # fmt: skip
        assert owners == [("team_relay",)]  # the relay worked as that role
    finally:
        pg_cluster.drop_database(database)
        with pg_cluster.connect() as conn:
            conn.execute("DROP ROLE team_relay")
