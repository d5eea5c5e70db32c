"""A scripted Cursor-like agent session, played through the relay against the fake.

The session has Cursor's shape (see ``tests/fixtures/cursor-recordings``): a long system
prompt and tool list (together past OpenAI's 1,024-token caching threshold), then user
requests, each worked through by a few tool rounds (an assistant turn with one function
call, its result) and closed by a text answer. Every assistant turn is scripted on the
fake (a reasoning item first, as a reasoning model answers), so the session is the same
with the relay's cache on or off; only what the relay sends back differs. The client
streams with ``stream_options.include_usage`` and keeps each turn's Chat ``usage``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tests.support.stack import Stack

MODEL = "gpt-5"
TURNS = 20
ROUNDS_PER_REQUEST = 4  # tool rounds before each text answer

_RULES = [
    "Read the relevant files before you change them; never guess at code you have not seen.",
    "Prefer the smallest edit that fixes the problem, and keep the existing style.",
    "Run the tests that cover a change after you make it, and report what they say.",
    "When a command fails, read its output and fix the cause instead of retrying blindly.",
    "Explain what you are about to do in one sentence before each tool call.",
    "Never print secrets, tokens or credentials, even when a file you read contains them.",
    "Use the search tool to find definitions instead of opening files one after another.",
    "Keep answers short: what changed, why, and what the user should check.",
]
SYSTEM_PROMPT = "You are a powerful agentic AI coding assistant, working in the user's IDE.\n\n" + (
    "\n".join(
        f"<rule id={n}> {rule} This applies to every file in the workspace, including "
        f"generated code, configuration and documentation ({n}). </rule>"
        for n, rule in enumerate(_RULES * 12)
    )
)


def _tool(name: str, description: str, **properties: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    key: {"type": "string", "description": text} for key, text in properties.items()
                },
                "required": list(properties),
            },
        },
    }


TOOLS = [
    _tool(
        "read_file",
        "Read the contents of a file. The output is the file's lines with their numbers; "
        "ask for a range when the file is long, and read more when the range was not enough.",
        target_file="The path of the file to read, relative to the workspace root.",
        explanation="One sentence explaining why this tool is being used.",
    ),
    _tool(
        "edit_file",
        "Propose an edit to an existing file. Give only the lines that change, with enough "
        "context around them to place the edit unambiguously; unchanged code is elided.",
        target_file="The path of the file to modify.",
        instructions="A single sentence describing the edit.",
        code_edit="The changed lines, with '// ... existing code ...' for unchanged spans.",
    ),
    _tool(
        "run_terminal_cmd",
        "Run a terminal command on the user's machine and return its output. Commands that "
        "need user interaction are not allowed; append '| cat' to commands that page.",
        command="The command to run.",
        explanation="One sentence explaining why this command needs to run.",
    ),
    _tool(
        "grep_search",
        "Fast exact-text or regex search over the workspace, with ripgrep semantics. Results "
        "are capped at 50 matches; narrow the pattern or the include glob when capped.",
        query="The regex pattern to search for.",
        include_pattern="A glob of the files to include, for example '*.py'.",
    ),
]


def _code(turn: int, lines: int) -> str:
    """A slice of plausible Python source, different for every turn."""
    body = []
    for n in range(lines):
        body.append(
            f"{n + 1:4d}  def handle_{turn}_{n}(request, store):  "
            f"# returns the record for key {turn * 100 + n}\n"
        )
        body.append(f"{n + 1:4d}      return store.get(request.key, default=None)\n")
    return "".join(body)


def user_request(index: int) -> str:
    return (
        f"Request {index}: the test suite fails in module_{index}.py after the last refactor. "
        "Find out why, fix it with a minimal edit, and run the tests again."
    )


def assistant_script(turn: int) -> dict[str, Any]:
    """What the model generates at ``turn``: reasoning, then a tool call or the answer."""
    summary = (
        f"**Turn {turn}**\n\nThe last result shows where module_{turn // 5}.py goes wrong; "
        "next I check the call site and the store before editing anything. " * 3
    )
    reasoning = {"type": "reasoning", "summary": [summary]}
    if turn % (ROUNDS_PER_REQUEST + 1) == ROUNDS_PER_REQUEST:
        text = f"Fixed: handle_{turn} now returns the stored record. " * 8
        return {"output": [reasoning, {"type": "message", "text": text}]}
    if turn % 2:
        name = "edit_file"
        arguments = {
            "target_file": f"src/module_{turn // 5}.py",
            "instructions": "Return the stored record instead of None.",
            "code_edit": _code(turn, 6),
        }
    else:
        name = "read_file"
        arguments = {
            "target_file": f"src/module_{turn // 5}.py",
            "explanation": "See the function the failing test calls.",
        }
    call = {
        "type": "function_call",
        "name": name,
        "arguments": json.dumps(arguments, separators=(",", ":")),
        "call_id": f"call_turn{turn:02d}",
    }
    return {"output": [reasoning, call]}


def tool_result(turn: int) -> str:
    return f"Contents of src/module_{turn // 5}.py (lines 1-{12 + turn}):\n" + _code(
        turn, 12 + turn
    )


@dataclasses.dataclass(frozen=True)
class TurnUsage:
    """One Chat answer's usage."""

    turn: int
    prompt_tokens: int
    cached_tokens: int
    reasoning_tokens: int

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def run_session(stack: Stack, turns: int = TURNS) -> list[TurnUsage]:
    """Play ``turns`` assistant turns through the relay; each turn's usage, in order."""
    client = stack.openai()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user_request(0)},
    ]
    usages = []
    for turn in range(turns):
        stack.script(assistant_script(turn))
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage = None
        with client.chat.completions.create(
            model=MODEL,
            messages=messages,
            tools=TOOLS,
            tool_choice="auto",
            stream=True,
            stream_options={"include_usage": True},
        ) as chunks:
            for chunk in chunks:
                usage = chunk.usage or usage
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                text.append(delta.content or "")
                for piece in delta.tool_calls or []:
                    call = calls.setdefault(
                        piece.index, {"type": "function", "function": {"arguments": ""}}
                    )
                    call["id"] = piece.id or call.get("id")
                    if piece.function is not None:
                        if piece.function.name:
                            call["function"]["name"] = piece.function.name
                        call["function"]["arguments"] += piece.function.arguments or ""
        assert usage is not None, f"turn {turn}: no usage chunk"
        details = usage.prompt_tokens_details
        reasoning = usage.completion_tokens_details
        usages.append(
            TurnUsage(
                turn=turn + 1,
                prompt_tokens=usage.prompt_tokens,
                cached_tokens=(details.cached_tokens or 0) if details else 0,
                reasoning_tokens=(reasoning.reasoning_tokens or 0) if reasoning else 0,
            )
        )
        assistant: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
        if calls:
            assistant["tool_calls"] = [calls[index] for index in sorted(calls)]
        messages.append(assistant)
        for call in assistant.get("tool_calls", []):
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": tool_result(turn)}
            )
        if not calls:
            messages.append({"role": "user", "content": user_request(turn + 1)})
    return usages
