"""relay.cache.session: one cached request from dispatch to delivery, on a real store in a
temp dir, driven as the chat handler drives it (tests/support/replay_driver.py). What
dispatch sends, what each way of ending writes (delivered, aborted before or after the
commit, a failed generation), and the upstream's refusal of replayed state: its blocks
retired, the error redacted, the request resent once without replay or not at all."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.cache.session import CacheSession
from relay.clock import ManualClock
from relay.core.capture import ClientProjection
from relay.core.json_bytes import encode_body
from relay.core.receipts import Reason
from relay.core.records import StoredPayload
from relay.core.rejection import RejectionKind
from relay.errors import UpstreamHTTPError
from relay.storage.replay_store import ReasoningStore
from relay.storage.scoped_source import ScopedSource
from tests.support.replay_driver import (
    REFUSED,
    Relay,
    answer,
    captured,
    failed_events,
    output_items,
    replayed,
    said,
    user,
)
from tests.support.replay_model import History
from tests.support.store_rows import conn_of

QUOTED = "gAAAAABpZ0x1"  # the ciphertext prefix REFUSED quotes
FIRST: History = (user("hi"),)
FOLLOW: History = (user("hi"), said("one"), user("more"))


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    opened = Relay(tmp_path / "cache.sqlite", ManualClock())
    yield opened
    opened.close()


@pytest.fixture
def replaying(relay: Relay) -> CacheSession:
    """A dispatched follow-up whose plan replays turn one's block."""
    answer(relay, FIRST, "one", 1)
    session = relay.session(FOLLOW)
    session.dispatch()
    assert len(session.plan.blocks) == 1
    return session


def intents(relay: Relay) -> list[str]:
    return [row.id for row in relay.store.unresolved_intents()]


def poisoned(relay: Relay, history: History) -> bool:
    scope_id = relay.scope_id()
    assert scope_id is not None
    start = relay.digests(history).boundaries[-1]
    return relay.store.poisoned_starts(scope_id, [start]) == {start}


def counted(relay: Relay, outcome: str, kind: str = "chat") -> int:
    return relay.cache.metrics.replay.outcomes[kind, "gpt-5", outcome]  # type: ignore[index]


def wire(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``input`` as the upstream receives it (replayed blocks spliced in verbatim)."""
    items: list[dict[str, Any]] = json.loads(encode_body(body))["input"]
    return items


def reasoning_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in wire(body) if item.get("type") == "reasoning"]


def test_dispatch_sends_the_request_unstored_asking_for_encrypted_reasoning(relay: Relay) -> None:
    session = relay.session(FIRST)
    assert session.position == 1  # the answer will be the second visible message
    body = session.dispatch()
    assert body["store"] is False
    assert "reasoning.encrypted_content" in body["include"]
    assert reasoning_items(body) == []
    assert intents(relay) == [relay.last_intent]  # committed before anything is sent
    assert counted(relay, "dispatched") == 0  # nothing replayed: not a replay dispatch


def test_a_follow_up_replays_the_earlier_block_in_its_place(relay: Relay) -> None:
    _, items = answer(relay, FIRST, "one", 1)
    session = relay.session(FOLLOW)
    body = session.dispatch()
    assert session.position == 3
    sent = wire(body)
    # The stored output items stand where the visible assistant message was.
    kinds = [item.get("type", item.get("role")) for item in sent]
    assert kinds == ["user", "reasoning", "message", "user"]
    assert [item["role"] for item in sent if item.get("role")] == ["user", "assistant", "user"]
    assert sent[1:3] == items
    assert counted(relay, "dispatched") == 1
    assert relay.cache.metrics.replayed_blocks == 1


def test_a_dispatch_pins_its_plan_s_last_block_alone(relay: Relay) -> None:
    """One pin per intent whatever the plan's length (design §6): the blocks beneath the
    last one are its ancestry, which cleanup keeps while the pinned block keeps its
    payload (tests/unit/storage/test_cleanup.py)."""
    answer(relay, FIRST, "one", 1)
    second = (*FOLLOW, said("two"), user("again"))
    answer(relay, FOLLOW, "two", 2)
    session = relay.session(second)
    session.dispatch()
    assert len(session.plan.blocks) == 2
    assert isinstance(relay.store, ReasoningStore)
    pins = (
        conn_of(relay.store)
        .execute("SELECT ancestor_id FROM dependencies WHERE intent_id = ?", (relay.last_intent,))
        .fetchall()
    )
    assert pins == [(session.plan.blocks[-1].observation.id,)]


def test_the_first_upstream_event_counts_a_replay_as_accepted_once(
    replaying: CacheSession, relay: Relay
) -> None:
    assert counted(relay, "accepted") == 0
    items = output_items({"role": "assistant", "content": "two"}, 2, reasoning=True)
    answer(relay, (), "two", 2, session=replaying, items=items)
    assert counted(relay, "accepted") == 1  # not once per event


def test_an_unreplayed_request_is_never_counted_accepted(relay: Relay) -> None:
    answer(relay, FIRST, "one", 1)
    assert counted(relay, "accepted") == 0


def test_abort_before_dispatch_writes_nothing_and_frees_its_capacity(relay: Relay) -> None:
    session = relay.session(FIRST)
    assert relay.cache.capacity.sessions == 1
    session.abort("client_disconnected")
    assert relay.cache.capacity.sessions == 0 and relay.cache.capacity.in_use == 0
    assert relay.scope_id() is None  # not even the scope row: nothing was dispatched
    session.abort("again")  # closing twice is harmless
    assert relay.cache.capacity.sessions == 0


@pytest.mark.parametrize(
    ("ending", "poison"),
    [("abort", True), ("complete+abort", False), ("delivered", False),
     ("delivered+abort", False)],
)  # fmt: skip
def test_each_ending_resolves_the_intent_and_poisons_only_an_unknown_output(
    relay: Relay, ending: str, poison: bool
) -> None:
    session = relay.session(FIRST)
    session.dispatch()
    if ending != "abort":
        answer(relay, FIRST, "one", 1, session=session, deliver=ending.startswith("delivered"))
    if ending.endswith("abort"):  # the pipeline poisons only an output it never committed
        session.abort("client_disconnected", poison=ending == "abort")
    assert intents(relay) == []
    assert poisoned(relay, FIRST) is poison
    assert relay.cache.capacity.sessions == 0


def test_a_completed_but_undelivered_generation_keeps_its_intent(relay: Relay) -> None:
    session, _ = answer(relay, FIRST, "one", 1, deliver=False)
    assert intents(relay) == [relay.last_intent]  # delivery phase: recovery resolves it
    assert [row.phase for row in relay.store.unresolved_intents()] == ["delivery"]
    session.delivered()
    assert intents(relay) == []


def test_a_failed_generation_poisons_its_position(relay: Relay) -> None:
    session = relay.session(FIRST)
    session.dispatch()
    items = output_items({"role": "assistant", "content": "one"}, 1, reasoning=True)
    result = captured(session, failed_events(items, "gpt-5"), ClientProjection())
    assert session.complete(result).kind == "poison"
    assert poisoned(relay, FIRST)
    session.delivered()
    assert intents(relay) == []


@pytest.mark.parametrize(
    "error",
    [UpstreamHTTPError(500, {"error": {"message": "boom", "type": "server_error",
                                       "param": None, "code": None}}),
     UpstreamHTTPError(400, {"error": {"message": "Unsupported parameter: 'top_k'.",
                                       "type": "invalid_request_error", "param": "top_k",
                                       "code": "unsupported_parameter"}})],
    ids=["server-error", "unrelated-400"],
)  # fmt: skip
def test_an_ordinary_upstream_error_is_not_a_replay_refusal(
    replaying: CacheSession, relay: Relay, error: UpstreamHTTPError
) -> None:
    assert replaying.refused(error) is None
    assert len(replaying.plan.blocks) == 1  # nothing retired
    assert replayed(relay, FOLLOW)[0] == ["rs_1"]
    replaying.abort("upstream_failed")
    assert poisoned(relay, FOLLOW)


def test_a_refusal_without_replay_is_ordinary(relay: Relay) -> None:
    # (After output the pipeline never asks: tests/unit/pipeline/test_chat.py.)
    plain = relay.session(FIRST)
    plain.dispatch()
    assert plain.refused(REFUSED) is None  # nothing replayed: nothing to retire
    plain.abort("upstream_failed")
    assert poisoned(relay, FIRST)


def test_a_refused_replay_is_retired_and_resent_once_without_it(
    replaying: CacheSession, relay: Relay
) -> None:
    dispatched_intent = relay.last_intent
    refusal = replaying.refused(REFUSED)
    assert refusal is not None
    assert refusal.kind is RejectionKind.INVALID_ENCRYPTED_CONTENT
    assert refusal.error.status == 400
    assert QUOTED in REFUSED.envelope()["error"]["message"]
    message = refusal.error.envelope()["error"]["message"]
    assert QUOTED not in message and "<redacted>" in message
    assert refusal.error.envelope()["error"]["code"] == "invalid_encrypted_content"
    assert refusal.resend is not None and reasoning_items(refusal.resend) == []
    assert refusal.resend["store"] is False
    # The new intent replaces the dispatched one, with an empty plan.
    assert intents(relay) == [relay.last_intent] and relay.last_intent != dispatched_intent
    assert not replaying.plan.blocks
    assert Reason.UPSTREAM_REJECTED in {r.reason for r in replaying.plan.rejections}
    assert counted(relay, "resent") == 1
    rejected = relay.cache.metrics.replay.rejected
    assert rejected["chat", "gpt-5", RejectionKind.INVALID_ENCRYPTED_CONTENT] == 1
    # No later plan selects the block, and a second refusal is an ordinary failure.
    assert replayed(relay, FOLLOW) == ([], [Reason.UPSTREAM_REJECTED])
    assert replaying.refused(REFUSED) is None
    answer(relay, (), "two", 2, session=replaying)
    assert intents(relay) == [] and not poisoned(relay, FOLLOW)


def test_with_resending_off_the_refusal_reaches_the_client_and_poisons_nothing(
    relay: Relay,
) -> None:
    answer(relay, FIRST, "one", 1)
    context = relay.cache._context
    relay.cache._context = dataclasses.replace(context, resend_rejected=False)
    session = relay.session(FOLLOW)
    session.dispatch()
    refusal = session.refused(REFUSED)
    assert refusal is not None and refusal.resend is None
    assert QUOTED not in json.dumps(refusal.error.envelope()) and QUOTED not in str(refusal.error)
    assert intents(relay) == [] and relay.cache.capacity.sessions == 1
    session.abort("upstream_failed")  # resolved already: no poison for a generation never made
    assert not poisoned(relay, FOLLOW) and relay.cache.capacity.sessions == 0
    assert counted(relay, "resent") == 0
    assert replayed(relay, FOLLOW) == ([], [Reason.UPSTREAM_REJECTED])


def test_an_error_without_a_message_is_passed_on_as_it_is(
    replaying: CacheSession,
) -> None:
    bare = UpstreamHTTPError(400, {"error": {"type": "invalid_request_error", "param": None,
                                             "code": "invalid_encrypted_content"}})  # fmt: skip
    refusal = replaying.refused(bare)
    assert refusal is not None and refusal.error is bare


def test_the_planner_s_view_is_bound_to_one_scope(relay: Relay) -> None:
    answer(relay, FIRST, "one", 1)
    scope_id = relay.scope_id()
    assert scope_id is not None
    end = relay.digests((*FIRST, said("one"))).boundaries[-1]
    assert ScopedSource(relay.store, scope_id).ends_with_records([end]) == {end}
    assert ScopedSource(relay.store, scope_id + 1).ends_with_records([end]) == set()
    found = ScopedSource(relay.store, scope_id).observations_ending_at([end])
    (record,) = found[end]
    stored = ScopedSource(relay.store, scope_id).load_payloads([record.id], max_bytes=1 << 20)
    payload = stored[record.id]
    assert isinstance(payload, StoredPayload)
    assert json.loads(payload.output_json)[0]["id"] == "rs_1"
