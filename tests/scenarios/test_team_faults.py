"""Two relays (three with ``RELAY_SCENARIO_BUDGET=long``) on one PostgreSQL store behind
haproxy, under crashes and restarts, judged by the scenario checker (``nox -s scenarios``;
issue 31 §2).

Conversations advance in rounds through haproxy (round robin), each round's answers paced
so that the faults land mid-traffic: a relay killed with SIGKILL mid-stream (and started
again later, on its port, as a new instance), PostgreSQL restarted (``fast``) and crashed
(``immediate``). The fake upstream runs as the harness's subprocess, so every upstream call
is recorded, and the checker's ``no_wrong_replay`` must count 0 over the whole run. The
closing table (printed) is the fault table of the issue: fault, instances, requests, wrong
replays, poisoned positions, time to recover.
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from scenarios.checker import generations, no_wrong_replay
from scenarios.client import chat
from scenarios.fakeapi import FakeControl
from scenarios.runner import Harness, credential_label
from scenarios.seed import Seed
from scenarios.wait import wait_until
from tests.support.pg_cluster import PgCluster
from tests.support.stack import TOKEN
from tests.support.team import Team

pytestmark = [pytest.mark.scenario, pytest.mark.slow]

LONG = os.environ.get("RELAY_SCENARIO_BUDGET") == "long"
CONVERSATIONS = 6 if LONG else 4
ROUNDS = 24 if LONG else 10
NAMES = ("r1", "r2", "r3") if LONG else ("r1", "r2")
LEASE_MS = 1500
PACE = {"toxics": {"latency_ms": 30}}  # per event: a round's answers are in flight together
SLOW = {"toxics": {"latency_ms": 250}}


@dataclass
class Conversation:
    messages: list[dict[str, Any]]
    answered: int = 0


@dataclass
class FaultRow:
    fault: str
    requests: int = 0
    refused: int = 0  # 503 and broken streams: the client tries again later
    poisoned: int = 0  # start_poison markers written meanwhile
    # kill: until the survivor poisoned the dead instance's intents; restart: until a
    # cached turn succeeds again; back: until haproxy routes to it again
    recover_s: float = 0.0


def count(cluster: PgCluster, database: str, query: str) -> int:
    with cluster.connect(database) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def exists(cluster: PgCluster, database: str, query: str) -> bool:
    return count(cluster, database, query) > 0


def absent(cluster: PgCluster, database: str, instance: str) -> bool:
    """Whether ``instance``'s lease row is gone (recovered after it lapsed)."""
    query = f"SELECT count(*) FROM instances WHERE id = '{instance}'"
    return count(cluster, database, query) == 0


def calls_beyond(fake: FakeControl, received: int) -> bool:
    return int(fake.health()["requests"]) > received


def answered(deployment: Team, conversation: Conversation) -> bool:
    return turn(deployment, conversation, stream=False) == "ok"


def turn(deployment: Team, conversation: Conversation, stream: bool) -> str:
    """One turn through haproxy: ``ok`` (the conversation advances), else the failure."""
    body: dict[str, Any] = {"model": "gpt-5", "messages": conversation.messages, "stream": stream}
    try:
        answer = chat(deployment.base, TOKEN, body, timeout=30)
    except OSError as exc:  # a killed relay: its connections break
        return type(exc).__name__
    if answer.outcome != "success":
        return answer.outcome
    conversation.messages += [
        {"role": "assistant", "content": answer.text},
        {"role": "user", "content": f"turn {conversation.answered + 1}"},
    ]
    conversation.answered += 1
    return "ok"


POISONED = "SELECT count(*) FROM markers WHERE kind = 'start_poison'"
LIVE_LEASES = "SELECT count(*) FROM instances WHERE expires_at > clock_timestamp()"
FAULTS = {
    2: "kill -9 r1 mid-stream",
    4: "r1 back on its port (a new instance)",
    6: "PostgreSQL restart (fast)",
    8: "PostgreSQL crash (immediate)",
}


def test_two_relays_on_postgresql_replay_nothing_wrong_through_crashes_and_restarts(
    seed: Seed, own_pg_cluster: PgCluster, tmp_path: Path
) -> None:
    cluster = own_pg_cluster
    database = cluster.create_database()
    with Harness("team_faults", seed) as harness:
        fake = harness.start_fake()
        fake.credential = credential_label(0)
        deployment = Team(
            tmp_path,
            {
                "OPENAI_API_KEY": harness.api_keys[0],
                "OPENAI_BASE_URL": fake.base_url + "/v1",
                "REASONING_CACHE_URL": cluster.url(database),
                "REASONING_CACHE_LEASE_MS": str(LEASE_MS),
                "SCENARIO_RUN_MARKER": str(harness.tmp),
            },
        )
        rows = [FaultRow("none")]
        conversations = [
            Conversation([{"role": "user", "content": f"conversation {k}"}])
            for k in range(CONVERSATIONS)
        ]
        try:
            r1, *_ = deployment.start_relays(*NAMES)
            proxy = deployment.start_proxy()
            r1_port = r1.base.rsplit(":", 1)[1].split("/")[0]
            r1_instance = r1.wait_for(r"cache_opened_shared .*instance=(\S+)").group(1)
            with ThreadPoolExecutor(CONVERSATIONS) as pool:
                for round_no in range(ROUNDS):
                    fault = FAULTS.get(round_no)
                    if fault is not None:
                        rows.append(FaultRow(fault, poisoned=-count(cluster, database, POISONED)))
                    row = rows[-1]
                    # The kill's round is slower: r1 must still hold its intent when killed.
                    pace = SLOW if fault is not None and fault.startswith("kill") else PACE
                    fake.script(*[pace] * CONVERSATIONS)
                    received = int(fake.health()["requests"])
                    round_started = time.time()
                    results = [
                        pool.submit(turn, deployment, c, stream=(round_no + k) % 2 == 0)
                        for k, c in enumerate(conversations)
                    ]
                    if fault is not None and fault.startswith("kill"):
                        # This round's (a finished round's intent may linger a moment).
                        holds_intent = (
                            "SELECT count(*) FROM intents WHERE phase = 'dispatch' AND "
                            f"instance_id = '{r1_instance}' AND created_at > {round_started}"
                        )
                        wait_until(partial(exists, cluster, database, holds_intent),
                                   timeout=30, what="r1 to hold an intent")  # fmt: skip
                        os.kill(r1.proc.pid, signal.SIGKILL)
                        killed_at = time.monotonic()
                        # A survivor (whichever beats first) poisons its intents and
                        # removes its lease row.
                        wait_until(partial(absent, cluster, database, r1_instance),
                                   timeout=LEASE_MS / 250, what="a survivor's recovery")  # fmt: skip
                        row.recover_s = time.monotonic() - killed_at
                    elif fault is not None and fault.startswith("PostgreSQL"):
                        wait_until(partial(calls_beyond, fake, received),
                                   timeout=30, what="the round's first upstream call")  # fmt: skip
                        cluster.stop("fast" if "fast" in fault else "immediate")
                    outcomes = [future.result() for future in results]
                    row.requests += len(outcomes)
                    row.refused += sum(outcome != "ok" for outcome in outcomes)
                    if fault is not None and fault.startswith("PostgreSQL"):
                        cluster.start()
                        started = time.monotonic()
                        probe = Conversation([{"role": "user", "content": f"probe {round_no}"}])
                        wait_until(partial(answered, deployment, probe),
                                   timeout=30, what="a cached turn after the restart")  # fmt: skip
                        row.recover_s = time.monotonic() - started
                    elif fault is not None and fault.startswith("r1 back"):
                        started = time.monotonic()
                        (r1,) = deployment.start_relays("r1", RELAY_PORT=r1_port)
                        proxy.wait_up("r1")
                        row.recover_s = time.monotonic() - started
                        # Back as a new instance; the dead one's lease row is gone.
                        again = r1.wait_for(r"cache_opened_shared .*instance=(\S+)").group(1)
                        assert again != r1_instance
                        assert absent(cluster, database, r1_instance)
                    if round_no + 1 in FAULTS or round_no + 1 == ROUNDS:
                        row.poisoned += count(cluster, database, POISONED)
            deployment.close()  # every instance gone: their leases lapse
            wait_until(lambda: count(cluster, database, LIVE_LEASES) == 0,
                       timeout=LEASE_MS / 1000 + 10, what="every lease to lapse")  # fmt: skip
            # A new instance recovers what the others left: intents whose resolution
            # failed while the database was down (their instance lived on).
            (newcomer,) = deployment.start_relays("r3")
            left = newcomer.wait_for(r"cache_opened_shared .*recovered_intents=(\d+)")
        finally:
            deployment.close()
        fake.sync(final=True)
        violations = no_wrong_replay(harness.history)
        gens = generations(harness.history)
    replayed = sum(
        1 for gen in gens for item in gen.input
        if isinstance(item, dict) and item.get("type") == "reasoning"
    )  # fmt: skip
    print("\n| fault | instances | requests | refused or cut | wrong replays | poisoned "
          "positions | time to recover |\n|---|---|---|---|---|---|---|")  # fmt: skip
    for r in rows:
        print(f"| {r.fault} | {len(NAMES)} | {r.requests} | {r.refused} | {len(violations)} | "
              f"{r.poisoned} | {r.recover_s:.2f} s |")  # fmt: skip
    print(f"upstream calls {len(gens)}, reasoning items replayed {replayed}, intents "
          f"recovered by a newcomer at the end {left.group(1)}")  # fmt: skip
    assert violations == [], violations
    assert replayed > 0, "the run replayed nothing: the check did not bind"
    assert count(cluster, database, "SELECT count(*) FROM intents") == 0
    assert all(c.answered >= ROUNDS // 2 for c in conversations), conversations
