"""Both predicted spellings of an answer's tool-call arguments, through the real session,
planner and SQLite store (issue 16).

A generation whose arguments are not already compact (``{"path": "a.py"}``) is recorded
once per spelling a client may send back: as sent, and respelled. Each record is a whole
identity, so the safety rules hold per spelling, and a conflict between two generations
that differ only in spelling makes every spelling of both ambiguous.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from relay.cache.replay_cache import ReplayCache
from relay.clock import ManualClock
from relay.core.capture import CaptureResult, ClientProjection
from relay.core.planner import Plan
from relay.core.receipts import Reason
from relay.core.records import Observation
from relay.settings.config import Config
from relay.settings.model_alias import ModelAlias
from relay.storage.replay_store import ReasoningStore
from relay.translate.request import translate_request
from relay.translate.responses_to_chat import response_to_chat_completion
from tests.support.replay_driver import captured
from tests.support.sqlite_store import sqlite_store

GPT5 = ModelAlias("gpt-5", "gpt-5")
TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
Message = dict[str, Any]


class Relay:
    """ReplayCache → CacheSession → ReasoningStore, as the chat handler drives them."""

    def __init__(self, path: Path) -> None:
        self.clock = ManualClock()
        self.count = 0
        config = Config(reasoning_cache_enabled=True, reasoning_cache_path=path)
        self.cache = ReplayCache.open(
            config, self.clock, upstream_url="https://api.openai.com/v1/responses",
            upstream_credential="sk-test", relay_token="relay-token", new_id=self.new_id,
        )  # fmt: skip

    def new_id(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    @property
    def store(self) -> ReasoningStore:
        return sqlite_store(self.cache.store)

    def generate(
        self, messages: Sequence[Message], output: Sequence[Message] | None
    ) -> tuple[Plan, CaptureResult]:
        """One request: plan and dispatch, then ``output`` completed (``None``: failed)."""
        body = {"model": "gpt-5", "messages": list(messages), "tools": TOOLS}
        request = translate_request(body, GPT5, reasoning_summaries=False)
        session = self.cache.begin(request, body, self.new_id("req_"))
        assert session is not None
        session.dispatch()
        if output is None:
            failed = ("response.failed", {"response": {"status": "failed", "output": []}})
            result = session.complete(captured(session, [failed], ClientProjection()))
        else:
            events: list[tuple[str, dict[str, Any]]] = [
                ("response.output_item.done", {"output_index": index, "item": copy.deepcopy(item)})
                for index, item in enumerate(output)
            ]
            response = {"status": "completed", "model": "gpt-5", "output": list(output)}
            events.append(("response.completed", {"response": copy.deepcopy(response)}))
            completion = response_to_chat_completion(
                response, completion_id="c", created=0, model="gpt-5", reasoning_summaries=False
            )
            sent = ClientProjection.from_completion(completion)
            result = session.complete(captured(session, events, sent))
        session.delivered()
        self.clock.advance(1)
        return session.plan, result

    def plan(self, messages: Sequence[Message]) -> Plan:
        """What the next request with this history replays (it is then answered)."""
        plan, _ = self.generate(messages, [reasoning(), text_item("ok")])
        return plan

    def observations(self) -> list[Observation]:
        """Every observation, oldest first (one scope: every request here has one)."""
        summaries = self.store.recent_records(model=None, limit=1000)
        found = [self.store.observation(summary.id) for summary in reversed(summaries)]
        return [o for o in found if o is not None]

    def conflicted(self, ends: Sequence[str]) -> set[str]:
        scope_id = self.observations()[0].scope_id
        return self.store.conflicted_ends(scope_id, ends)


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    relay = Relay(tmp_path / "cache.sqlite")
    yield relay
    relay.cache.close()


def reasoning() -> Message:
    return {"type": "reasoning", "id": "rs_x", "summary": [], "encrypted_content": "gAAAAAx"}


def text_item(text: str) -> Message:
    return {"type": "message", "id": "msg_x", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip


def call_output(step: int, arguments: str) -> list[Message]:
    """A reasoning item and one call (ids unique per step, as the model mints them)."""
    return [
        {**reasoning(), "id": f"rs_{step}", "encrypted_content": f"gAAAAA{step}"},
        {"type": "function_call", "id": f"fc_{step}", "call_id": f"call_{step}",
         "name": "read", "arguments": arguments, "status": "completed"},
    ]  # fmt: skip


def echo(step: int, arguments: str) -> list[Message]:
    """The client's assistant message with these arguments, and the tool's result."""
    call = {"id": f"call_{step}", "type": "function",
            "function": {"name": "read", "arguments": arguments}}  # fmt: skip
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{step}", "content": f"result {step}"},
    ]


USER = {"role": "user", "content": "read the files"}
SPACED, COMPACT = '{"path": "a.py"}', '{"path":"a.py"}'


def test_arguments_not_compact_are_recorded_in_both_spellings(relay: Relay) -> None:
    _, result = relay.generate([USER], call_output(1, SPACED))
    assert result.kind == "admit" and result.envelopes is not None
    assert len(result.envelopes) == 2
    respelled, as_sent = relay.observations()
    assert respelled.replayable and as_sent.replayable
    assert respelled.start_digest == as_sent.start_digest
    assert respelled.end_digest != as_sent.end_digest
    assert respelled.envelope_fingerprint != as_sent.envelope_fingerprint
    assert (respelled.payload_fingerprint, respelled.intent_id, respelled.prior_plan) == (
        as_sent.payload_fingerprint, as_sent.intent_id, as_sent.prior_plan,
    )  # fmt: skip
    # Each echo replays the record of its own spelling; a third spelling matches nothing.
    verbatim = relay.plan([USER, *echo(1, SPACED)])
    assert [b.observation.id for b in verbatim.blocks] == [as_sent.id]
    assert verbatim.unmatched == 0
    compact = relay.plan([USER, *echo(1, COMPACT)])
    assert [b.observation.id for b in compact.blocks] == [respelled.id]
    other = relay.plan([USER, *echo(1, '{"path":  "a.py"}')])
    assert (other.blocks, other.rejections, other.unmatched) == ((), (), 1)


def test_compact_arguments_are_recorded_once(relay: Relay) -> None:
    _, result = relay.generate([USER], call_output(1, COMPACT))
    assert result.envelopes is not None and len(result.envelopes) == 1
    assert len(relay.observations()) == 1
    assert len(relay.plan([USER, *echo(1, COMPACT)]).blocks) == 1


@pytest.mark.parametrize("spelling", ["verbatim", "respelled"])
def test_a_chain_replays_whole_in_the_spelling_it_was_echoed_in(
    relay: Relay, spelling: str
) -> None:
    history: list[Message] = [USER]
    for step in range(1, 5):
        arguments = json.dumps({"path": f"f{step}.py", "n": step})  # spaced, as Python writes
        plan, _ = relay.generate(history, call_output(step, arguments))
        assert len(plan.blocks) == step - 1
        history += echo(step, arguments if spelling == "verbatim" else arguments.replace(" ", ""))
    plan = relay.plan(history)
    assert [b.observation.position for b in plan.blocks] == [1, 3, 5, 7]
    # Each step recorded its respelled record, then its as-sent one: the plan is made of
    # the records of the spelling this history carries, each the ancestor of the next.
    records = relay.observations()[:8]
    chosen = records[1::2] if spelling == "verbatim" else records[0::2]
    assert [b.observation.id for b in plan.blocks] == [o.id for o in chosen]
    assert [o.prior_plan.count for o in chosen] == [0, 1, 2, 3]


def test_a_history_mixing_spellings_replays_only_what_was_generated_on_it(
    relay: Relay,
) -> None:
    history: list[Message] = [USER]
    for step in (1, 2):
        arguments = json.dumps({"path": f"f{step}.py"})
        relay.generate(history, call_output(step, arguments))
        history += echo(step, arguments)
    mixed = [USER, *echo(1, '{"path":"f1.py"}'), *history[3:]]
    plan = relay.plan(mixed)
    # Step 2 was generated on the verbatim step 1: nothing ends at the mixed history's step 2.
    assert [b.observation.position for b in plan.blocks] == [1]
    assert plan.unmatched == 1


@pytest.mark.parametrize("spaced_first", [True, False])
def test_generations_differing_only_in_spelling_conflict_in_every_spelling(
    relay: Relay, spaced_first: bool
) -> None:
    spellings = [SPACED, COMPACT] if spaced_first else [COMPACT, SPACED]
    results = [relay.generate([USER], call_output(1, s))[1] for s in spellings]
    assert [r.kind for r in results] == ["admit", "admit"]
    ends = [o.end_digest for o in relay.observations()]
    assert len(set(ends)) == 2  # the spaced spelling and the compact one
    assert relay.conflicted(ends) == set(ends)
    for arguments in (SPACED, COMPACT):
        plan = relay.plan([USER, *echo(1, arguments)])
        assert plan.blocks == ()
        # The later generation was not admitted (its spellings conflicted); the earlier
        # one was, and its conflict marker stops it.
        reasons = {r.reason for r in plan.rejections}
        assert reasons and reasons <= {Reason.END_CONFLICT, Reason.NOT_REPLAYABLE}
        assert plan.unmatched == 0


def test_different_values_at_one_position_do_not_conflict(relay: Relay) -> None:
    first, second = '{"path": "a.py"}', '{"path": "b.py"}'
    relay.generate([USER], call_output(1, first))
    relay.generate([USER], call_output(2, second))
    assert relay.conflicted([o.end_digest for o in relay.observations()]) == set()
    for step, arguments in ((1, first), (2, second)):
        for spelled in (arguments, arguments.replace(" ", "")):
            plan = relay.plan([USER, *echo(step, spelled)])
            assert [b.observation.position for b in plan.blocks] == [1]
            assert json.loads(plan.blocks[0].text)[1]["call_id"] == f"call_{step}"


def test_a_repeated_identical_answer_is_a_repeat_in_both_spellings(relay: Relay) -> None:
    relay.generate([USER], call_output(1, SPACED))
    relay.generate([USER], call_output(1, SPACED))  # byte for byte the same output
    assert len(relay.observations()) == 2
    assert len(relay.plan([USER, *echo(1, SPACED)]).blocks) == 1


def test_a_poisoned_position_covers_both_spellings(relay: Relay) -> None:
    _, failed = relay.generate([USER], None)
    assert failed.kind == "poison"
    relay.generate([USER], call_output(1, SPACED))
    for arguments in (SPACED, COMPACT):
        plan = relay.plan([USER, *echo(1, arguments)])
        assert plan.blocks == ()
        assert [r.reason for r in plan.rejections] == [Reason.START_POISONED]


def test_an_unsure_respelling_poisons_whatever_the_echo(relay: Relay) -> None:
    _, result = relay.generate([USER], call_output(1, '{"n": 1.0}'))
    assert (result.kind, result.reason) == ("poison", Reason.UNKNOWN_PREDICTION)
    stats = relay.store.stats()
    assert (stats["observations"], stats["markers"]) == (0, 1)  # the position's poison
    for arguments in ('{"n": 1.0}', '{"n":1.0}', '{"n":1}'):
        assert relay.plan([USER, *echo(1, arguments)]).blocks == ()
