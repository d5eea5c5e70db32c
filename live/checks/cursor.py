"""Cursor's real request shape, and a Responses-shaped body on the Chat path.

The recorded body (``live/fixtures/cursor_request.json``, see the README there) keeps its
shape: ``temperature: 0``, a ``user`` value, eleven tools, ``tool_choice: "auto"``,
streaming, ``reasoning: {"effort": "minimal"}`` and Cursor's model name ``gpt-5``, which
the relay maps to the run's model through ``RELAY_MODEL_ALIASES``. Only the redacted
texts and tool names are filled in.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from live.checks import check
from live.context import CheckContext
from live.conversation import expect_word
from live.fake_replies import say
from live.verdict import Verdict, expect, passed
from scenarios.httpjson import request_json

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "cursor_request.json"
CURSOR_MODEL = "gpt-5"
# Cursor's tool names, told apart by their parameters (the recording redacted the names).
TOOL_NAMES = {
    ("explanation", "query", "search_only_prs", "target_directories"): "codebase_search",
    ("command", "explanation", "is_background"): "run_terminal_cmd",
    ("-A", "-B", "-C", "-i", "glob", "head_limit", "multiline", "output_mode", "path",
     "pattern", "type"): "grep",
    ("explanation", "target_file"): "delete_file",
    ("paths",): "read_lints",
    ("cell_idx", "cell_language", "is_new_cell", "new_string", "old_string",
     "target_notebook"): "edit_notebook",
    ("merge", "todos"): "todo_write",
    ("code_edit", "instructions", "target_file"): "edit_file",
    ("limit", "offset", "target_file"): "read_file",
    ("ignore_globs", "target_directory"): "list_dir",
    ("glob_pattern", "target_directory"): "glob_file_search",
}  # fmt: skip
TEXTS = {
    "system": "You are a coding assistant working in the user's editor.",
    "user": ["<user_info>\nOS Version: linux\n</user_info>", "Reply with exactly the word: pong"],
}


def cursor_request() -> dict[str, Any]:
    """The recorded body with its redacted message texts and tool names filled in."""
    body: dict[str, Any] = copy.deepcopy(json.loads(FIXTURE.read_text(encoding="utf-8")))
    users = iter(TEXTS["user"])
    for message in body["messages"]:
        message["content"] = TEXTS["system"] if message["role"] == "system" else next(users)
    for index, tool in enumerate(body["tools"]):
        parameters = tuple(sorted(tool["function"]["parameters"].get("properties", {})))
        tool["function"]["name"] = TOOL_NAMES.get(parameters, f"tool_{index}")
    return body


@check("cursor_request_shape", "Cursor's recorded request shape, through a model alias")
def cursor_request_shape(ctx: CheckContext) -> Verdict:
    aliases = {CURSOR_MODEL: {"model": ctx.model}}
    relay = ctx.relay(env={"RELAY_MODEL_ALIASES": json.dumps(aliases)})
    chat = ctx.client(relay)
    _, listing = request_json(
        "GET", f"{relay.base_url}/models",
        headers={"Authorization": f"Bearer {relay.relay_token}"},
    )  # fmt: skip
    listed = [m.get("id") for m in (listing or {}).get("data", [])]
    expect(CURSOR_MODEL in listed, f"GET /v1/models lists {listed}, not the alias")
    body = cursor_request()
    first = chat.post("cursor", body, script=say("pong"))
    expect_word(first, "pong")
    expect(first.finish_reason == "stop", f"cursor: finish={first.finish_reason}")
    requested = [
        f.get("model") for e, f in relay.events_for(first.request_id) if e == "chat_request"
    ]
    expect(requested == [ctx.model], f"cursor: the relay resolved the alias to {requested}")
    if ctx.offline:
        sent = ctx.calls()[0].get("body") or {}
        expect(sent.get("model") == ctx.model, f"upstream model {sent.get('model')!r}")
        expect("temperature" not in sent, "temperature 0 was forwarded to a reasoning model")
        expect(sent.get("user") == body["user"], "the user value was not forwarded")
        expect(len(sent.get("tools") or []) == len(body["tools"]), "tools were lost")
    # Cursor's next turn: the answer echoed back, one more user message.
    body["messages"] += [
        first.message(),
        {"role": "user", "content": "Reply with exactly the word: again"},
    ]
    observed = ctx.wait_event(relay, "cache_observed", first.request_id)
    second = chat.post("cursor-2", body, script=say("again"))
    expect_word(second, "again")
    if observed.get("outcome") == "admitted":
        replayed = ctx.expect_replay(relay, second)
        note = f"the next turn replayed {replayed} block(s)"
    else:  # minimal effort may answer without encrypted reasoning: nothing to replay
        ctx.expect_no_replay(relay, second)
        note = f"turn 1 was not admitted ({observed.get('reason')}), so no replay"
    return passed(f"alias {CURSOR_MODEL} → {ctx.model}, temperature 0 dropped, 200 pong; {note}")


@check("responses_shape_on_chat", "a Responses-shaped body on /v1/chat/completions")
def responses_shape_on_chat(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    body = {
        "model": ctx.model,
        "instructions": "You answer tersely.",
        "input": [
            {
                "role": "user",
                "content": [{"type": "input_text", "text": "Reply with exactly the word: pong"}],
            }
        ],
        "reasoning": {"effort": "low"},
        "max_output_tokens": ctx.settings.max_completion_tokens,
    }
    turn = ctx.client(relay).post("responses-shaped", body, script=say("pong"))
    expect_word(turn, "pong")
    shapes = [f.get("shape") for e, f in relay.events_for(turn.request_id) if e == "chat_request"]
    expect(shapes == ["responses"], f"the relay took it as shape {shapes}")
    return passed("answered as a chat.completion (strictly validated), shape=responses")
