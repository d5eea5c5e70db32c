"""Chat messages from a Responses-shaped body (relay.core.responses_history).

Cursor sends some models a Responses-shaped body (``input``, ``instructions``); its
visible history is derived as the Chat messages the same conversation would have been,
or not at all (``None``) when the items are not exactly such a conversation.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core.history_digest import history_digests
from relay.core.rendered_messages import RenderedMessages
from relay.core.responses_history import (
    REASON_TEXT,
    Underivable,
    custom_tool_names,
    derive_responses_history,
    visible_history_from_responses_input,
    visible_messages_from_responses_input,
)
from relay.errors import InvalidRequest
from relay.translate.responses_input import resolve_tool_calls
from tests.support.identity_cases import make_scope

FUNCTION_CALL = {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "ok"}


def chat_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "read", "arguments": "{}"}}


def assistant_item(text: str, **extra: Any) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, **extra}
    return {"type": "message", "role": "assistant", "content": [part]}


def test_a_responses_shaped_history_maps_to_chat_envelopes() -> None:
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        assistant_item("reading", annotations=[]),
        FUNCTION_CALL,
        {**FUNCTION_CALL, "call_id": "c2"},
        OUTPUT,
        {**OUTPUT, "call_id": "c2"},
        FUNCTION_CALL,
        OUTPUT,
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
        {"role": "user", "content": "thanks"},
    ]
    tool_call = chat_call("c1")
    assert visible_messages_from_responses_input(items, "be brief") == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": "reading", "tool_calls": [tool_call, chat_call("c2")]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
        {"role": "assistant", "content": "", "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "developer", "content": [{"type": "text", "text": "d"}]},
        {"role": "user", "content": "thanks"},
    ]


def test_a_string_input_is_one_user_message() -> None:
    assert visible_messages_from_responses_input("hi", None) == [{"role": "user", "content": "hi"}]


def test_instructions_never_collide_with_an_input_system_message() -> None:
    with_instructions = visible_messages_from_responses_input("hi", "rules")
    system_item = {"role": "system", "content": [{"type": "input_text", "text": "rules"}]}
    as_item = visible_messages_from_responses_input(
        [system_item, {"role": "user", "content": "hi"}], None
    )
    assert with_instructions != as_item
    string_item = visible_messages_from_responses_input(
        [{"role": "system", "content": "rules"}, {"role": "user", "content": "hi"}], None
    )
    assert string_item is not None
    assert string_item != with_instructions


IMAGE_URL = {"type": "input_image", "image_url": "https://example.com/shot.png"}
IMAGE_DATA = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=",
              "detail": "high"}  # fmt: skip
IMAGE_FILE = {"type": "input_image", "file_id": "file-abc", "detail": "low"}
FILE_PART = {"type": "input_file", "file_id": "file-pdf"}
FILE_DATA = {
    "type": "input_file",
    "filename": "a.pdf",
    "file_data": "data:application/pdf;base64,JVBE",
}


@pytest.mark.parametrize("part", [IMAGE_URL, IMAGE_DATA, IMAGE_FILE, FILE_PART, FILE_DATA])
def test_image_and_file_parts_are_hashed_as_sent(part: dict[str, Any]) -> None:
    text = {"type": "input_text", "text": "what is this?"}
    items = [{"role": "user", "content": [text, part]}]
    assert visible_messages_from_responses_input(items, None) == [
        {"role": "user", "content": [{"type": "text", "text": "what is this?"}, part]}
    ]
    output = {"type": "function_call_output", "call_id": "c1", "output": [part]}
    assert visible_messages_from_responses_input([FUNCTION_CALL, output], None) == [
        {"role": "assistant", "content": "", "tool_calls": [chat_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": [part]},
    ]


def test_images_that_differ_in_anything_map_apart() -> None:
    variants = [
        IMAGE_URL,
        {**IMAGE_URL, "detail": "auto"},  # the API's default, yet not shown to be equal
        {**IMAGE_URL, "detail": "low"},
        {**IMAGE_URL, "image_url": "https://example.com/other.png"},
        IMAGE_DATA,
        IMAGE_FILE,
        {"type": "input_text", "text": "https://example.com/shot.png"},
        {"type": "input_text", "text": "x", "extra": 1},
    ]
    mapped = [
        visible_messages_from_responses_input([{"role": "user", "content": [v]}], None)
        for v in variants
    ]
    assert None not in mapped
    assert len({json.dumps(m, sort_keys=True) for m in mapped}) == len(variants)


@pytest.mark.parametrize(
    ("items", "instructions", "code"),
    [
        ([{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"}], None,
         "item_type_reasoning"),
        ([{"type": "item_reference", "id": "msg_1"}], None, "item_type_item_reference"),
        ([{"type": "web_search_call", "id": "ws_1"}], None, "item_type_web_search_call"),
        ([{"type": "made_up_call", "id": "x"}], None, "item_type_unknown"),
        ([{"role": "critic", "content": "x"}], None, "message_role"),
        ([{"content": "no role"}], None, "message_role"),
        (["not an item"], None, "item_not_object"),
        ([{"role": "user", "content": [{"type": "text", "text": "chat's part"}]}], None,
         "content_part"),
        ([{"role": "user", "content": ["bare"]}], None, "content_part"),
        ([{"role": "user", "content": [{"type": "input_text", "text": 1}]}], None, "field_type"),
        ([{**FUNCTION_CALL, "arguments": {}}], None, "field_type"),
        ([{**FUNCTION_CALL, "id": 7}], None, "field_type"),
        ([{**OUTPUT, "output": {"text": "ok"}}], None, "field_type"),
        ([{**FUNCTION_CALL, "parsed": {}}], None, "item_field"),
        ([{**OUTPUT, "extra": 1}], None, "item_field"),
        ([{**FUNCTION_CALL, "status": "done"}], None, "item_status"),
        ({"role": "user"}, None, "input_type"),
        (None, None, "input_type"),
        ("hi", ["rules"], "instructions_type"),
    ],
)  # fmt: skip
def test_what_stays_underivable_says_why(items: Any, instructions: Any, code: str) -> None:
    derived = derive_responses_history(items, instructions)
    assert isinstance(derived, Underivable)
    assert derived.code == code
    assert derived.text == REASON_TEXT[code]
    assert visible_messages_from_responses_input(items, instructions) is None


@pytest.mark.parametrize(
    "item",
    [
        {"role": "assistant", "content": "plain string"},
        {"role": "assistant", "content": []},
        assistant_item(""),
        assistant_item("x", annotations=[{"type": "url_citation"}]),
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
        {"role": "assistant", "content": [
            {"type": "output_text", "text": "a"}, {"type": "output_text", "text": "b"}]},
        {**assistant_item("x"), "id": "msg_1"},
        {**assistant_item("x"), "phase": "final_answer"},
        {"role": "system", "content": "collides with instructions"},
        {"role": "user", "content": [{"type": "input_text", "text": "x"}], "id": "m1"},
        {"role": "user", "content": []},
    ],
)  # fmt: skip
def test_other_message_forms_are_kept_whole_and_apart(item: dict[str, Any]) -> None:
    """Form 7: derivable (no fence), exact, never equal to a translation form."""
    messages = visible_messages_from_responses_input([item, FUNCTION_CALL], None)
    assert messages is not None
    kept = {k: v for k, v in item.items() if k not in ("type", "status")}
    if item["role"] == "assistant":
        assert messages == [{"role": "assistant", "item": kept, "tool_calls": [chat_call("c1")]}]
    elif item["content"] == []:
        assert messages[0] == {"role": "user", "content": []}  # form 3, an empty list
    else:
        assert messages[0] == {"role": item["role"], "item": kept}


def test_the_declared_equivalences() -> None:
    """The only places two inputs share envelopes: status, type "message", empty
    annotations/logprobs, a string input."""
    plain = [{"role": "user", "content": "hi"}, assistant_item("ok"), FUNCTION_CALL, OUTPUT]
    echoed = [
        {"type": "message", "role": "user", "content": "hi", "status": "completed"},
        {**assistant_item("ok", annotations=[], logprobs=[]), "status": "completed"},
        {**FUNCTION_CALL, "status": "completed"},
        {**OUTPUT, "status": "incomplete"},
    ]
    assert visible_messages_from_responses_input(plain, "r") == (
        visible_messages_from_responses_input(echoed, "r")
    )
    assert visible_messages_from_responses_input("hi", None) == (
        visible_messages_from_responses_input(plain[:1], None)
    )


def test_a_developer_string_is_its_own_form() -> None:
    assert visible_messages_from_responses_input([{"role": "developer", "content": "d"}], "d") == [
        {"role": "system", "content": "d"},
        {"role": "developer", "content": "d"},
    ]


def test_a_call_id_keeps_the_call_apart() -> None:
    with_id = visible_messages_from_responses_input([{**FUNCTION_CALL, "id": "fc_1"}], None)
    assert with_id == [
        {"role": "assistant", "content": "",
         "tool_calls": [{**chat_call("c1"), "item": {"id": "fc_1"}}]},
    ]  # fmt: skip
    output = visible_messages_from_responses_input([{**OUTPUT, "id": "fco_1"}], None)
    assert output == [{"role": "tool", "tool_call_id": "c1", "content": "ok",
                       "item": {"id": "fco_1"}}]  # fmt: skip


def test_non_string_instructions_are_underivable() -> None:
    assert visible_messages_from_responses_input("hi", ["rules"]) is None


def test_responses_input_spans_cover_each_visible_message() -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "t"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "r1"},
        {"type": "function_call_output", "call_id": "c2", "output": "r2"},
        {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c3", "output": "r3"},
    ]
    history = visible_history_from_responses_input(items, "rules")
    assert history is not None
    messages, spans = history
    assert [m["role"] for m in messages] == [
        "system", "user", "assistant", "tool", "tool", "assistant", "tool",
    ]  # fmt: skip
    assert spans == (None, (0, 1), (1, 4), (4, 5), (5, 6), (6, 7), (7, 8))
    assert visible_history_from_responses_input("hi", None) == (
        [{"role": "user", "content": "hi"}],
        (None,),
    )


# --- injectivity: distinct inputs give distinct identities, or none ----------------------

_TEXTS = ("", "a", "b")
_PARTS: tuple[dict[str, Any], ...] = (
    *({"type": "input_text", "text": t} for t in _TEXTS),
    {"type": "input_text", "text": "a", "x": 1},
    IMAGE_URL, {**IMAGE_URL, "detail": "auto"}, IMAGE_DATA, IMAGE_FILE, FILE_PART,
    {"type": "text", "text": "a"},
)  # fmt: skip
_OUTPUT_PARTS: tuple[dict[str, Any], ...] = (
    *({"type": "output_text", "text": t} for t in _TEXTS),
    {"type": "output_text", "text": "a", "annotations": []},
    {"type": "output_text", "text": "a", "logprobs": []},
    {"type": "output_text", "text": "a", "annotations": [{"type": "url_citation"}]},
    {"type": "refusal", "refusal": "a"},
)  # fmt: skip
_EXTRAS: tuple[dict[str, Any], ...] = ({}, {"type": "message"}, {"status": "completed"}, {"id": "m1"},
           {"type": "message", "status": "incomplete"})  # fmt: skip


def _contents(parts: tuple[dict[str, Any], ...]) -> list[Any]:
    return [*_TEXTS, [], *([p] for p in parts), *([p, q] for p in parts for q in parts)]


def _universe() -> list[dict[str, Any]]:
    """Every item of the small alphabets (a few thousand)."""
    items: list[dict[str, Any]] = []
    for extra in _EXTRAS:
        for role in ("user", "system", "developer"):
            items += [{"role": role, "content": c, **extra} for c in _contents(_PARTS)]
        items += [{"role": "assistant", "content": c, **extra} for c in _contents(_OUTPUT_PARTS)]
    for call_id in ("c1", "c2"):
        for extra in ({}, {"status": "completed"}, {"id": "fc_1"}):
            for arguments in _TEXTS:
                items.append({**FUNCTION_CALL, "call_id": call_id, "arguments": arguments,
                              **extra})  # fmt: skip
            for output in (*_TEXTS, *([p] for p in _PARTS)):
                items.append({**OUTPUT, "call_id": call_id, "output": output, **extra})
        # ApplyPatch (declared custom): both spellings of a call, and both output kinds
        for extra in ({}, {"status": "completed"}, {"id": "ctc_1"}):
            for text in _TEXTS:
                items.append({"type": "custom_tool_call", "call_id": call_id,
                              "name": "ApplyPatch", "input": text, **extra})  # fmt: skip
                items.append({**FUNCTION_CALL, "call_id": call_id, "name": "ApplyPatch",
                              "arguments": text, **extra})  # fmt: skip
            items.append({"type": "custom_tool_call_output", "call_id": call_id,
                          "output": "a", **extra})  # fmt: skip
    items.append({"type": "reasoning", "id": "rs_1", "summary": []})
    return items


UNIVERSE = _universe()
# The tools every judged body is sent with (tools are scope: one setting for all).
JUDGED_TOOLS = [{"type": "function", "name": "read", "parameters": {}},
                {"type": "custom", "name": "ApplyPatch"}]  # fmt: skip


def _as_the_model_reads_it(input_value: Any, instructions: Any) -> Any:
    """What goes upstream (the relay's own rewriting of custom calls and their outputs),
    up to the declared equivalences only: a string input is its user message;
    ``type: "message"``, ``status`` and empty ``annotations``/``logprobs`` carry nothing.
    ``None``: the relay refuses the body (nothing goes upstream)."""
    if isinstance(input_value, str):
        input_value = [{"role": "user", "content": input_value}]
    try:
        input_value = resolve_tool_calls(list(input_value), custom_tool_names(JUDGED_TOOLS))
    except InvalidRequest:
        return None
    out = []
    for sent in input_value:
        item = {k: v for k, v in sent.items() if k != "status"}
        if item.get("type") == "message":
            del item["type"]
        if item.get("role") == "assistant" and isinstance(item["content"], list):
            item["content"] = [
                {k: v for k, v in part.items()
                 if not (k in ("annotations", "logprobs") and v == [])}
                for part in item["content"]
            ]  # fmt: skip
        out.append(item)
    return instructions, out


class _Judge:
    """Hashes bodies with the real scope and digests; two bodies that share a final digest
    must be the same input up to the declared equivalences. The digests are computed with
    one memo of renderings for all bodies too (relay.core.rendered_messages), and must be
    the same: the derived messages share no key unless they render alike."""

    def __init__(self) -> None:
        self.scope = make_scope(body_shape="responses")
        self.seen: dict[str, Any] = {}
        self.memo = RenderedMessages()

    def check(self, input_value: Any, instructions: Any) -> None:
        derived = derive_responses_history(input_value, instructions, JUDGED_TOOLS)
        if isinstance(derived, Underivable):
            assert derived.code in REASON_TEXT
            return
        reads = _as_the_model_reads_it(input_value, instructions)
        if reads is None:
            return  # refused before anything is cached
        digests = history_digests(self.scope, derived[0])
        assert history_digests(self.scope, derived[0], memo=self.memo) == digests
        digest = digests.boundaries[-1]
        assert self.seen.setdefault(digest, reads) == reads, (input_value, instructions)


def test_every_small_body_has_its_own_identity() -> None:
    """Exhaustive over one-item bodies (every form, with and without instructions, and
    string inputs): no two distinct model inputs share an identity."""
    judge = _Judge()
    for instructions in (None, "a"):
        for text in _TEXTS:
            judge.check(text, instructions)
        judge.check([], instructions)
        for item in UNIVERSE:
            judge.check([item], instructions)
    assert len(judge.seen) > 1000  # thousands of distinct derivable inputs


_ITEMS = st.sampled_from(UNIVERSE)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_ITEMS, min_size=1, max_size=4),
    st.data(),
    st.sampled_from([None, "a"]),
)
def test_neighbouring_histories_have_their_own_identities(
    base: list[dict[str, Any]], data: st.DataObject, instructions: str | None
) -> None:
    """Sequences (where function calls group into envelopes): a history and its
    neighbours -- one item replaced, inserted or removed -- share an identity only when
    they are the same input."""
    judge = _Judge()
    judge.check(base, instructions)
    at = data.draw(st.integers(0, len(base)))
    other = data.draw(_ITEMS)
    for neighbour in (
        [*base[:at], other, *base[at + 1 :]],
        [*base[:at], other, *base[at:]],
        [*base[:at], *base[at + 1 :]],
    ):
        judge.check(neighbour, instructions)
        judge.check(neighbour, None if instructions else "a")
