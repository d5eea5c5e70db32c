"""The fake's continuity probe across real generations (FakeUpstream.answer, no socket).

A reasoning item is ``intact`` only when it comes back right before its own items *and*
after the same visible history it was generated after -- whether the earlier turns come
back as replayed original items or in their plain visible form (as a relay without the
original items would send them).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from fakeupstream.fake import FakeUpstream
from fakeupstream.scripts import parse_script

KEY = "sk-test-continuity"
TOOLS = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]
BASE: dict[str, Any] = {
    "model": "gpt-5",
    "instructions": "You read files.",
    "tools": TOOLS,
    "include": ["reasoning.encrypted_content"],
    "store": False,
}
USER_1 = {"role": "user", "content": "Read a.txt"}
USER_3 = {"role": "user", "content": "Thanks. And c.txt?"}

TURN_1 = {  # a preamble, then a call
    "output": [
        {"type": "reasoning", "summary": ["look"]},
        {"type": "message", "text": "Let me look.", "phase": "commentary"},
        {"type": "function_call", "name": "read", "arguments": '{"path": "a.txt"}'},
    ]
}
TURN_2 = {  # two reasoning items in one response
    "output": [
        {"type": "reasoning", "summary": ["a.txt points at b.txt"]},
        {"type": "message", "text": "It points elsewhere. "},
        {"type": "reasoning", "summary": ["follow it"]},
        {"type": "function_call", "name": "read", "arguments": '{"path": "b.txt"}'},
    ]
}
TURN_3 = {"output": [{"type": "message", "text": "b.txt says hi."}]}


class Upstream:
    def __init__(self) -> None:
        self.fake = FakeUpstream(seed=11, secret=b"c" * 32)

    def send(
        self, items: list[Any], script: dict[str, Any] | None = None, **overrides: Any
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The generated output and the continuity report of one request."""
        body = {**BASE, "input": items, **overrides}
        answer, report = self.fake.answer(body, KEY, parse_script(script or {}))
        assert answer.status == 200, answer.parsed
        return answer.parsed[0]["output"], report


def visible(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One response as a Chat client sees it: one assistant message (text + tool calls)."""
    text = "".join(
        part["text"] for item in output if item["type"] == "message" for part in item["content"]
    )
    calls = [
        {
            "type": "function_call",
            "call_id": item["call_id"],
            "name": item["name"],
            "arguments": json.dumps(json.loads(item["arguments"]), separators=(",", ":")),
        }
        for item in output
        if item["type"] == "function_call"
    ]
    return ([{"role": "assistant", "content": text}] if text else []) + calls


def replayed(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The original items, as a relay replays them (output ids dropped, reasoning kept)."""
    return [
        item if item["type"] == "reasoning" else {k: v for k, v in item.items() if k != "id"}
        for item in output
    ]


def result(output: list[dict[str, Any]], text: str) -> dict[str, Any]:
    call = next(item for item in output if item["type"] == "function_call")
    return {"type": "function_call_output", "call_id": call["call_id"], "output": text}


def counts(report: dict[str, Any]) -> tuple[int, int, int, int]:
    return report["replayed"], report["intact"], report["misplaced"], report["invalid"]


def reasons(report: dict[str, Any]) -> list[str | None]:
    return [item["reason"] for item in report["items"]]


FORMS = {"replayed": replayed, "visible": visible}


@pytest.mark.parametrize(
    ("turn_1_in_request_2", "turn_1_in_request_3"),
    list(itertools.product(FORMS, FORMS)),
)
def test_three_turn_tool_chain_mixing_replayed_and_visible_blocks_is_intact(
    turn_1_in_request_2, turn_1_in_request_3
):
    upstream = Upstream()
    out_1, report = upstream.send([USER_1], TURN_1)
    assert counts(report) == (0, 0, 0, 0)
    result_1 = result(out_1, "see b.txt")

    form_2 = FORMS[turn_1_in_request_2]
    out_2, report = upstream.send([USER_1, *form_2(out_1), result_1], TURN_2)
    replays_2 = int(turn_1_in_request_2 == "replayed")
    assert counts(report) == (replays_2, replays_2, 0, 0)
    result_2 = result(out_2, "hi")

    form_3 = FORMS[turn_1_in_request_3]
    request_3 = [USER_1, *form_3(out_1), result_1, *replayed(out_2), result_2, USER_3]
    _, report = upstream.send(request_3, TURN_3)
    replays_3 = 2 + int(turn_1_in_request_3 == "replayed")  # turn 2 has two reasoning items
    assert counts(report) == (replays_3, replays_3, 0, 0)
    assert reasons(report) == [None] * replays_3


def chain(upstream: Upstream) -> tuple[list[Any], list[Any], dict[str, Any], dict[str, Any]]:
    out_1, _ = upstream.send([USER_1], TURN_1)
    result_1 = result(out_1, "see b.txt")
    out_2, _ = upstream.send([USER_1, *replayed(out_1), result_1], TURN_2)
    return out_1, out_2, result_1, result(out_2, "hi")


def test_same_history_replay_is_intact():
    upstream = Upstream()
    out_1, out_2, result_1, result_2 = chain(upstream)
    items = [USER_1, *replayed(out_1), result_1, *replayed(out_2), result_2, USER_3]
    assert counts(upstream.send(items, TURN_3)[1]) == (3, 3, 0, 0)


def test_edited_earlier_user_message_makes_every_later_block_misplaced():
    upstream = Upstream()
    out_1, out_2, result_1, result_2 = chain(upstream)
    edited = {"role": "user", "content": "Read z.txt"}
    items = [edited, *replayed(out_1), result_1, *replayed(out_2), result_2, USER_3]
    _, report = upstream.send(items, TURN_3)
    assert counts(report) == (3, 0, 3, 0)
    assert reasons(report) == ["history"] * 3
    assert len(report["secrets"]) == 3  # they verify; they are just in the wrong place


def test_a_different_earlier_tool_result_misplaces_only_the_blocks_after_it():
    upstream = Upstream()
    out_1, out_2, result_1, result_2 = chain(upstream)
    other_result = {**result_1, "output": "see q.txt"}
    items = [USER_1, *replayed(out_1), other_result, *replayed(out_2), result_2, USER_3]
    _, report = upstream.send(items, TURN_3)
    # Turn 1's block came before that result: its own history is unchanged.
    assert counts(report) == (3, 1, 2, 0)
    assert reasons(report) == [None, "history", "history"]


def test_dropped_earlier_turn_is_misplaced():
    upstream = Upstream()
    out_1, _ = upstream.send([USER_1], {"output": [{"type": "message", "text": "Which one?"}]})
    user_2 = {"role": "user", "content": "a.txt, please"}
    history = [USER_1, *visible(out_1), user_2]
    out_2, _ = upstream.send(history, TURN_1)
    result_2 = result(out_2, "text")
    kept = [*history, *replayed(out_2), result_2]
    assert counts(upstream.send(kept, TURN_3)[1]) == (1, 1, 0, 0)
    dropped = [user_2, *replayed(out_2), result_2]  # the first exchange left out
    _, report = upstream.send(dropped, TURN_3)
    assert counts(report) == (1, 0, 1, 0)
    assert reasons(report) == ["history"]


def test_other_instructions_misplace_the_replay():
    upstream = Upstream()
    out_1, _ = upstream.send([USER_1], TURN_1)
    items = [USER_1, *replayed(out_1), result(out_1, "x")]
    assert counts(upstream.send(items, TURN_3)[1]) == (1, 1, 0, 0)
    _, report = upstream.send(items, TURN_3, instructions="You write files.")
    assert reasons(report) == ["history"]


def test_followers_still_win_over_history_as_the_reason():
    upstream = Upstream()
    out_1, _ = upstream.send([USER_1], TURN_1)
    reasoning, message, call = replayed(out_1)
    edited = {"role": "user", "content": "Read z.txt"}
    _, report = upstream.send([edited, reasoning, call, message, result(out_1, "x")], TURN_3)
    assert reasons(report) == ["followers"]


@pytest.mark.parametrize("mode", ["normal", "differ"])
def test_both_tokens_of_a_differ_response_carry_the_history(mode):
    upstream = Upstream()
    script = {**TURN_1, "ciphertext": mode}
    body = {**BASE, "input": [USER_1], "stream": True}
    answer, _ = upstream.fake.answer(body, KEY, parse_script(script))
    events = answer.parsed
    done = next(
        e["item"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "reasoning"
    )
    final = events[-1]["response"]["output"]
    assert (done["encrypted_content"] == final[0]["encrypted_content"]) is (mode == "normal")
    rest = [*replayed(final)[1:], result(final, "x")]
    for token in (done["encrypted_content"], final[0]["encrypted_content"]):
        reasoning = {**final[0], "encrypted_content": token}
        assert counts(upstream.send([USER_1, reasoning, *rest])[1]) == (1, 1, 0, 0)
        edited = {"role": "user", "content": "Read z.txt"}
        assert counts(upstream.send([edited, reasoning, *rest])[1]) == (1, 0, 1, 0)


def test_each_replayed_token_is_opened_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe and the rules see the same opened tokens, and a token replayed again in a
    later request is remembered: one real opening per token per key."""
    upstream = Upstream()
    opened: list[str] = []
    real = upstream.fake.cipher._open

    def counting(token: str, **binding: str) -> Any:
        opened.append(binding["item_id"])
        return real(token, **binding)

    monkeypatch.setattr(upstream.fake.cipher, "_open", counting)
    out_1, out_2, result_1, result_2 = chain(upstream)  # replays out_1 once already
    request = [USER_1, *replayed(out_1), result_1, *replayed(out_2), result_2, USER_3]
    for _ in range(2):
        _, report = upstream.send(request, {**TURN_3, "validate": True})
        assert counts(report) == (3, 3, 0, 0)
    ids = [item["id"] for item in request if item.get("type") == "reasoning"]
    assert sorted(opened) == sorted(ids)  # three tokens, three opens in three requests


PATCH_TOOLS = [*TOOLS, {"type": "custom", "name": "ApplyPatch", "format": {"type": "text"}}]
PATCH_TURN = {
    "output": [
        {"type": "reasoning", "summary": ["patch it"]},
        {"type": "custom_tool_call", "name": "ApplyPatch", "input": "*** Begin Patch\n+x\n"},
    ]
}


def test_custom_tool_call_blocks_replay_intact_and_a_changed_input_misplaces():
    upstream = Upstream()
    out_1, _ = upstream.send([USER_1], PATCH_TURN, tools=PATCH_TOOLS)
    call = {k: v for k, v in out_1[1].items() if k != "id"}  # visible: no output id
    answer = {"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "Done"}
    _, report = upstream.send([USER_1, *replayed(out_1), answer, USER_3], tools=PATCH_TOOLS)
    assert counts(report) == (1, 1, 0, 0)
    # The same call in visible form (no reasoning) digests the same for a later block.
    turn = {"output": [{"type": "reasoning", "summary": []}, {"type": "message", "text": "ok"}]}
    out_2, _ = upstream.send([USER_1, call, answer, USER_3], turn, tools=PATCH_TOOLS)
    request = [USER_1, *replayed(out_1), answer, USER_3, *replayed(out_2), USER_1]
    _, report = upstream.send(request, tools=PATCH_TOOLS)
    assert counts(report) == (2, 2, 0, 0)
    # Another input, or the call sent as a function call, is another history.
    edited = {**call, "input": "*** Begin Patch\n+y\n"}
    request = [USER_1, edited, answer, USER_3, *replayed(out_2), USER_1]
    _, report = upstream.send(request, tools=PATCH_TOOLS, store=False)
    assert reasons(report) == ["history"]
