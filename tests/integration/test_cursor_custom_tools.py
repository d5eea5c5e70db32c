"""Custom (freeform / grammar) tools end to end over loopback, with the cache on.

Cursor's Responses-shaped bodies (raw HTTP, streamed and JSON) with its ApplyPatch grammar
tool; the official SDK with Chat Completions custom tools; and a 22-step Cursor agent
session mixing ApplyPatch, a function tool, user turns and a screenshot, where the fake's continuity
probe must find every earlier block replayed, intact, at every step, whichever way the
client echoes the custom calls back, across a relay restart halfway. The session's table is
shown after the run's tests, under pytest-xdist too (tests/support/summary_tables.py).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat.chat_completion_message_custom_tool_call import (
    ChatCompletionMessageCustomToolCall,
)

from scenarios.cursor_steps import screenshot_part, user_item
from tests.support.cursor_client import (
    Echo,
    Turn,
    cursor_body,
    echo_items,
    post,
    result_item,
    turn,
)
from tests.support.stack import TOKEN, Stack, running_stack
from tests.support.summary_tables import RecordProperty, record_rows

CACHE_ON = {"REASONING_CACHE_ENABLED": "1"}
# A patch as the model writes it: not JSON; quotes, a backslash, a tab, CRLF, non-ASCII.
PATCH = (
    '*** Begin Patch\n*** Update File: src/caf\u00e9.py\n@@ def f():\n-    return "old"\n'
    '+    return "new\\n"\t# \u2713\r\n*** End Patch\n'
)


def patch(step: int) -> str:
    return PATCH.replace("new", f"new {step}")


def script(step: int, kind: str) -> dict[str, Any]:
    """The model's output at one step: one reasoning item, then a patch, a read or text."""
    reasoning = {"type": "reasoning", "summary": [f"step {step}"]}
    if kind == "patch":
        item = {"type": "custom_tool_call", "name": "ApplyPatch", "input": patch(step),
                "call_id": f"call_patch{step}"}  # fmt: skip
    elif kind == "read":
        item = {"type": "function_call", "name": "read_file",
                "arguments": f'{{"path":"src/mod_{step}.py"}}', "call_id": f"call_read{step}"}  # fmt: skip
    else:
        item = {"type": "message", "text": f"Step {step} is done; what next?"}
    return {"output": [reasoning, item]}


def probes(stack: Stack) -> list[dict[str, Any]]:
    found = [r.continuity for r in stack.fake.requests if r.path == "/v1/responses"]
    assert all(p is not None for p in found)
    return [p for p in found if p is not None]


# --- one ApplyPatch turn, Cursor's shape ----------------------------------------------------

USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "edit"}]}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("form", ["function", "custom"])
def test_an_applypatch_call_reaches_cursor_byte_for_byte(
    tmp_path: Path, stream: bool, form: str
) -> None:
    env = {**CACHE_ON, "RELAY_CUSTOM_TOOL_CALLS": form}
    with running_stack(tmp_path / "data", env) as stack:
        stack.script(script(1, "patch"))
        answer = turn(stack, cursor_body([USER], stream=stream))
        sent = stack.fake.requests[-1].body
    assert answer.finish_reason == "tool_calls"
    (call,) = answer.calls
    assert (call.id, call.type, call.name, call.text) == ("call_patch1", form, "ApplyPatch",
                                                          patch(1))  # fmt: skip
    assert sent["tools"] == cursor_body([], stream=stream)["tools"]  # custom tools pass through
    assert "stream_options" not in sent  # the Responses API rejects include_usage


def test_the_default_applypatch_call_needs_no_script(tmp_path: Path) -> None:
    """The fake's CALL_CUSTOM directive: its freeform patch comes through unparsed."""
    user = {"role": "user", "content": "CALL_CUSTOM add a line"}
    with running_stack(tmp_path / "data", CACHE_ON) as stack:
        answer = turn(stack, cursor_body([user], stream=True))
    assert answer.calls[0].name == "ApplyPatch"
    assert answer.calls[0].text.startswith("*** Begin Patch\n") and "\t" in answer.calls[0].text


@pytest.mark.parametrize(
    ("items", "fragment"),
    [
        ([USER, {"type": "function_call_output", "call_id": "call_9", "output": "x"}],
         "'input[1]' (function_call_output) answers call_id 'call_9'"),
        ([USER, {"type": "custom_tool_call", "call_id": "call_1", "name": "ApplyPatch",
                 "input": "p"}, USER],
         "'input[1]' is a call of custom tool 'ApplyPatch'"),
    ],
)  # fmt: skip
def test_an_unresolvable_pairing_is_a_400_before_anything_goes_upstream(
    tmp_path: Path, items: list[Any], fragment: str
) -> None:
    with running_stack(tmp_path / "data", CACHE_ON) as stack:
        response = post(stack, cursor_body(items, stream=False))
        assert response.status_code == 400
        assert fragment in response.json()["error"]["message"]
        assert not [r for r in stack.fake.requests if r.path == "/v1/responses"]


# --- the SDK with Chat Completions custom tools ---------------------------------------------

CHAT_TOOLS: list[Any] = [
    {"type": "custom", "custom": {"name": "ApplyPatch", "description": "Edit files",
                                  "format": {"type": "grammar", "grammar": {
                                      "syntax": "lark", "definition": "start: /.+/s"}}}},
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
]  # fmt: skip


def test_the_sdk_gets_a_custom_tool_call_and_its_echo_replays(tmp_path: Path) -> None:
    with running_stack(tmp_path / "data", CACHE_ON) as stack:
        stack.script(script(1, "patch"), script(2, "text"))
        messages: list[Any] = [{"role": "user", "content": "edit"}]
        client = stack.openai()  # strict validation of every answer
        choice: Any = {"type": "custom", "custom": {"name": "ApplyPatch"}}
        answer = client.chat.completions.create(model="gpt-5", messages=messages, tools=CHAT_TOOLS,
                                                tool_choice=choice)  # fmt: skip
        message = answer.choices[0].message
        (call,) = message.tool_calls or []
        assert isinstance(call, ChatCompletionMessageCustomToolCall)
        assert (call.custom.name, call.custom.input) == ("ApplyPatch", patch(1))
        assert answer.choices[0].finish_reason == "tool_calls"
        upstream = stack.fake.requests[-1].body
        assert upstream["tools"][0] == {
            "type": "custom", "name": "ApplyPatch", "description": "Edit files",
            "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/s"},
        }  # fmt: skip
        assert upstream["tool_choice"] == {"type": "custom", "name": "ApplyPatch"}
        messages += [message.model_dump(), {"role": "tool", "tool_call_id": call.id,
                                            "content": "Done!"}]  # fmt: skip
        client.chat.completions.create(model="gpt-5", messages=messages, tools=CHAT_TOOLS,
                                       tool_choice=choice)  # the same scope  # fmt: skip
        sent = stack.fake.requests[-1].body["input"]
        assert [item.get("type") for item in sent[1:]] == [
            "reasoning", "custom_tool_call", "custom_tool_call_output",
        ]  # fmt: skip
        assert probes(stack)[-1]["intact"] == 1


def test_the_sdk_streams_a_custom_tool_call(tmp_path: Path) -> None:
    with running_stack(tmp_path / "data", CACHE_ON) as stack:
        stack.script(script(1, "patch"))
        # The SDK's chunk type knows only function deltas: its default (lenient) client
        # keeps the custom ones as sent.
        client = openai.OpenAI(base_url=stack.base_url, api_key=TOKEN, max_retries=0)
        stack.clients.append(client)
        stream = client.chat.completions.create(
            model="gpt-5", messages=[{"role": "user", "content": "edit"}], tools=CHAT_TOOLS,
            stream=True,
        )  # fmt: skip
        pieces, header, finish = [], None, None
        for chunk in stream:
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                for delta in choice.delta.tool_calls or []:
                    extra = delta.model_extra or {}
                    if delta.id is not None:
                        header = (delta.id, delta.type, extra["custom"]["name"])
                    pieces.append(extra["custom"]["input"])
    assert header == ("call_patch1", "custom", "ApplyPatch")
    assert "".join(pieces) == patch(1) and finish == "tool_calls"


# --- the agent session ----------------------------------------------------------------------

# 22 steps: what the model does at each (a patch, a read, or text that ends the user's turn).
KINDS = (
    "patch", "read", "patch", "text", "patch", "patch", "read", "text", "read", "patch", "text",
    "patch", "read", "patch", "patch", "text", "patch", "read", "text", "patch", "patch", "text",
)  # fmt: skip
RESTART_AT = 11
SCREENSHOT_AFTER = 7  # the user turn after this step carries an input_image
TABLE_HEADER = (
    "  step | request ends with                  | model answers | blocks replayed (intact)",
)


def plan_unmatched(caplog: pytest.LogCaptureFixture) -> list[int]:
    return [int(v) for v in re.findall(r"cache_plan .*unmatched=(\d+)", caplog.text)]


@pytest.mark.parametrize(
    ("echo", "form"),
    [("function_call", "function"), ("custom_tool_call", "function"),
     ("custom_tool_call", "custom")],
)  # fmt: skip
def test_a_cursor_agent_session_replays_every_earlier_block_at_every_step(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    record_property: RecordProperty,
    echo: Echo,
    form: str,
) -> None:
    caplog.set_level(logging.INFO, logger="relay")
    items: list[dict[str, Any]] = [user_item("Refactor the module.")]
    rows: list[tuple[int, str, str, int, int]] = []
    before = "user turn"
    env = {**CACHE_ON, "RELAY_CUSTOM_TOOL_CALLS": form}
    with running_stack(tmp_path / "data", env) as stack:
        stack.script(*(script(step, kind) for step, kind in enumerate(KINDS)))
        for step, kind in enumerate(KINDS):
            if step == RESTART_AT:
                stack.restart_relay()  # the cache is on disk: replay goes on
                before += ", relay restarted"
            answer: Turn = turn(stack, cursor_body(items, stream=step % 2 == 0))
            report = probes(stack)[-1]
            said = {"patch": "ApplyPatch", "read": "read_file", "text": "text"}[kind]
            rows.append((step, before, said, report["replayed"], report["intact"]))
            assert report["replayed"] == report["intact"] == step, (step, report)
            assert report["misplaced"] == report["invalid"] == 0
            items += echo_items(answer, echo)
            if kind == "text":
                assert not answer.calls and answer.finish_reason == "stop"
                if step == SCREENSHOT_AFTER:  # Cursor attaches a screenshot to the turn
                    items.append(user_item(f"Go on ({step}); the screen:", screenshot_part()))
                    before = "user turn + screenshot"
                else:
                    items.append(user_item(f"Good. Go on ({step})."))
                    before = "user turn"
            else:
                (call,) = answer.calls
                assert call.text == (patch(step) if kind == "patch" else
                                     f'{{"path":"src/mod_{step}.py"}}')  # fmt: skip
                items.append(result_item(call, f"ok {step}", echo))
                before = "ApplyPatch result" if kind == "patch" else "read_file result"
        sent = stack.fake.requests[-1].body["input"]
    lines = [f"  {step:>4} | {before:<34} | {kind:<13} | {replayed} ({intact})"
             for step, before, kind, replayed, intact in rows]  # fmt: skip
    title = f"agent session, echo as {echo} (relay form {form}):"
    record_rows(record_property, title, TABLE_HEADER, lines)
    # Upstream always got the custom calls and their results as custom items.
    kinds = [item.get("type") for item in sent]
    patches = KINDS[:-1].count("patch")  # the last request carries every earlier step
    assert kinds.count("custom_tool_call") == kinds.count("custom_tool_call_output") == patches
    assert "function_call" in kinds and kinds.count("reasoning") == len(KINDS) - 1
    parts = [p for item in sent if isinstance(item.get("content"), list) for p in item["content"]]
    assert screenshot_part() in parts  # the screenshot went up as sent
    assert plan_unmatched(caplog) == [0] * len(KINDS)
