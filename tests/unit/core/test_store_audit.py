"""relay.core.store_audit: what verify concludes from rows (pure). A block and its digests
come from the real capture (what a relay admits must pass), links from
``Observation.chain_plan`` (what the planner compares); each damage is one change."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from relay.core.capture import ClientProjection, OutputCapture, finish_capture
from relay.core.records import EMPTY_PLAN, RETIRED_CHAIN, Observation, PriorPlan
from relay.core.responses_events import decode
from relay.core.store_audit import (
    EXAMPLES_PER_CODE,
    AuditTally,
    Damage,
    Note,
    StoredRecord,
    audit_block,
    audit_link,
    audit_payload,
    audit_record,
)
from relay.translate.responses_to_chat import project_output, response_to_chat_completion

BEFORE_V6 = -1.0


def h(n: int) -> str:
    return f"{n:064x}"


def captured(items: list[dict[str, Any]]) -> tuple[bytes, str, str]:
    """(stored bytes, payload fingerprint, output hash) of an admitted output."""
    capture = OutputCapture(project=project_output)
    for index, item in enumerate(items):
        capture.feed(
            decode(
                "response.output_item.done", {"output_index": index, "item": copy.deepcopy(item)}
            )
        )
    capture.feed(decode("response.completed", {"response": {"status": "completed", "model": "gpt-5",
                                                     "output": copy.deepcopy(items)}}))  # fmt: skip
    completion = response_to_chat_completion(
        {"status": "completed", "output": items}, completion_id="c", created=0, model="gpt-5",
        reasoning_summaries=False,
    )  # fmt: skip
    result = finish_capture(capture, ClientProjection.from_completion(completion))
    assert result.kind == "admit", result
    assert result.output_json is not None and result.payload_fingerprint and result.output_hash
    return result.output_json.encode(), result.payload_fingerprint, result.output_hash


REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB-sealed"}
CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read",
        "arguments": '{"path":"a.py"}', "status": "completed"}  # fmt: skip
MESSAGE = {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
           "content": [{"type": "output_text", "text": "hello", "annotations": []}]}  # fmt: skip
PAYLOAD, PAYLOAD_FP, OUTPUT_HASH = captured([REASONING, MESSAGE])


def record(
    id_: int, *, position: int = 1, scope_id: int = 1, parent: Observation | None = None,
    plan: PriorPlan | None = None, replayable: bool = True,
) -> Observation:  # fmt: skip
    prior = plan if plan is not None else (parent.chain_plan if parent else EMPTY_PLAN)
    return Observation(
        id_, scope_id, 1, position, h(100 + id_), h(200 + id_), h(300), PAYLOAD_FP,
        OUTPUT_HASH, prior, f"intent_{id_}", None, replayable, 1.0,
    )  # fmt: skip


# --- links -------------------------------------------------------------------------------


def test_a_chain_of_links_made_by_chain_plan_is_clean() -> None:
    a = record(1, position=1)
    b = record(2, position=3, parent=a)
    c = record(3, position=5, parent=b)
    assert audit_link(a, None) == []
    assert audit_link(b, a) == []
    assert audit_link(c, b) == []


@pytest.mark.parametrize(
    ("change", "codes"),
    [
        ({"scope_id": 2}, [Damage.PARENT_OTHER_SCOPE]),
        ({"position": 7}, [Damage.PARENT_NOT_BELOW]),
        ({"end_digest": h(999)}, [Damage.CHAIN_MISMATCH]),  # the ref folded in differs
        ({"payload_fingerprint": h(998)}, [Damage.CHAIN_MISMATCH]),
    ],
)  # fmt: skip
def test_each_broken_link_has_its_code(change: dict[str, Any], codes: list[Damage]) -> None:
    parent = record(1, position=1)
    child = record(2, position=3, parent=parent)
    assert audit_link(child, parent._replace(**change)) == codes


def test_a_link_to_no_row_or_a_newer_one() -> None:
    parent = record(5, position=1)
    child = record(2, position=3, parent=parent)
    assert audit_link(child, None) == [Damage.PARENT_MISSING]
    assert audit_link(child, parent) == [Damage.PARENT_NOT_OLDER]


def test_a_changed_count_or_chain_digest_is_a_chain_mismatch() -> None:
    parent = record(1, position=1)
    good = parent.chain_plan
    for plan in (PriorPlan(1, good.count + 1, good.chain), PriorPlan(1, good.count, h(7))):
        assert audit_link(record(2, position=3, plan=plan), parent) == [Damage.CHAIN_MISMATCH]


def test_plans_without_a_link() -> None:
    assert audit_link(record(1, plan=PriorPlan(None, 0, h(1))), None) == [Damage.CHAIN_MISMATCH]
    unlinked = record(1, plan=PriorPlan(None, 2, h(1)))  # as the v5 migration may leave one
    assert audit_link(unlinked, None) == [Note.PLAN_UNLINKED]
    damaged = record(1, plan=PriorPlan(None, 2, "not a digest"))
    assert audit_link(damaged, None) == [Damage.CHAIN_MISMATCH]


def test_what_the_v5_migration_retired_is_a_note_and_only_then() -> None:
    retired = record(1, plan=PriorPlan(None, 0, RETIRED_CHAIN), replayable=False)
    assert audit_link(retired, None) == [Note.PLAN_RETIRED]
    # Linked onto a retired record: the chain was cut on purpose.
    assert audit_link(record(2, position=3, plan=PriorPlan(1, 1, h(5))), retired) == [
        Note.PLAN_RETIRED
    ]
    # The same empty digest on a replayable record is damage.
    damaged = record(1, plan=PriorPlan(None, 0, RETIRED_CHAIN))
    assert audit_link(damaged, None) == [Damage.CHAIN_MISMATCH]


# --- payloads ----------------------------------------------------------------------------


def test_an_admitted_block_passes() -> None:
    assert audit_payload(record(1), PAYLOAD, len(PAYLOAD)) == []
    payload, fp, digest = captured([REASONING, MESSAGE, CALL])
    tool = record(1)._replace(payload_fingerprint=fp, output_hash=digest)
    assert audit_payload(tool, payload, len(payload)) == []


def test_one_changed_byte_or_size_is_found() -> None:
    flipped = PAYLOAD.replace(b"sealed", b"sealee")
    assert audit_payload(record(1), flipped, len(flipped)) == [Damage.PAYLOAD_DIGEST_MISMATCH]
    assert audit_payload(record(1), PAYLOAD, len(PAYLOAD) + 1) == [Damage.PAYLOAD_SIZE_MISMATCH]


def block(*items: dict[str, Any]) -> bytes:
    return json.dumps(list(items)).encode()


@pytest.mark.parametrize(
    "payload",
    [
        b"[{", b"{}", b"[]", b'"text"', block({"type": "web_search_call"}),
        block(MESSAGE),  # no reasoning
        block({**REASONING, "encrypted_content": ""}, MESSAGE),
        block(MESSAGE, REASONING),  # ends in a reasoning item
        block(REASONING, "not an item"),  # type: ignore[arg-type]
    ],
)  # fmt: skip
def test_what_capture_would_not_admit_is_malformed(payload: bytes) -> None:
    assert audit_block(payload) == [Damage.PAYLOAD_MALFORMED]


@pytest.mark.parametrize(
    "calls",
    [
        [{**CALL, "call_id": ""}],
        [{**CALL, "call_id": None}],
        [{**CALL, "name": ""}],
        [{**CALL, "arguments": {"path": "a.py"}}],
        [CALL, {**CALL, "id": "fc_2"}],  # one call id twice
    ],
)  # fmt: skip
def test_calls_that_cannot_pair_with_one_tool_result(calls: list[dict[str, Any]]) -> None:
    assert audit_block(block(REASONING, *calls)) == [Damage.CALL_PAIRING_BROKEN]


def test_one_item_id_twice() -> None:
    assert audit_block(block(REASONING, MESSAGE, MESSAGE)) == [Damage.DUPLICATE_ITEM]


# --- a whole record ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replayable", "reclaimed_at", "marks", "codes"),
    [
        (True, None, True, [Damage.PAYLOAD_MISSING]),
        (True, 5.0, True, [Note.PAYLOAD_RECLAIMED]),
        (False, 5.0, True, [Note.PAYLOAD_RECLAIMED]),
        (True, BEFORE_V6, True, [Note.PAYLOAD_GONE_BEFORE_V6]),
        (True, None, False, [Note.PAYLOAD_GONE_BEFORE_V6]),  # a v5 store: no marks at all
        (False, None, True, []),  # observed only: never had one
    ],
)  # fmt: skip
def test_a_record_without_its_payload(
    replayable: bool, reclaimed_at: float | None, marks: bool, codes: list[Any]
) -> None:
    stored = StoredRecord(record(1, replayable=replayable), reclaimed_at, reclaim_marks=marks)
    assert audit_record(stored, None, before_v6=BEFORE_V6) == codes


def test_a_record_reports_its_link_and_its_payload() -> None:
    parent = record(1, position=1)
    child = record(2, position=3, plan=PriorPlan(1, 1, h(9)))
    flipped = PAYLOAD.replace(b"hello", b"jello")
    stored = StoredRecord(child, payload=flipped, payload_size=len(flipped))
    assert audit_record(stored, parent, before_v6=BEFORE_V6) == [
        Damage.CHAIN_MISMATCH, Damage.PAYLOAD_DIGEST_MISMATCH,
    ]  # fmt: skip


def test_the_tally_counts_by_code_and_keeps_a_few_ids() -> None:
    tally = AuditTally()
    for n in range(EXAMPLES_PER_CODE + 5):
        tally.add_all([Damage.PAYLOAD_MISSING, Note.PAYLOAD_RECLAIMED], n)
    tally.add(Note.OPEN_INTENT, 3)
    assert tally.damage == {"payload_missing": EXAMPLES_PER_CODE + 5}
    assert tally.notes == {"payload_reclaimed": EXAMPLES_PER_CODE + 5, "open_intent": 3}
    assert tally.examples["payload_missing"] == list(range(EXAMPLES_PER_CODE))
    assert tally.damaged
    assert not AuditTally(counts=tally.counts.__class__(tally.notes)).damaged


def test_the_docs_name_every_code() -> None:
    docs = Path(__file__).resolve().parents[3] / "docs" / "replay-cache.md"
    reference = docs.read_text(encoding="utf-8")
    section = reference[reference.index("## Backup, restore and verify") :].split("\n## ", 1)[0]
    for code in [*Damage, *Note]:
        assert f"`{code.value}`" in section, f"add {code.value} to docs/replay-cache.md's codes"
