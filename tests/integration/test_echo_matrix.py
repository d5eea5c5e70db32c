"""Replay for every echo (issue 16): each kind of client resends a 10-step tool chain the
way it really does, and the fake's continuity probe judges every request's replay.

Clients: the official Python SDK resending ``message.model_dump()`` (compact and
non-compact arguments), a curl user resending the JSON answer's message as received
(``refusal: null``), a plain hand-written ``{"role", "content", "tool_calls"}``, Cursor's
recorded shape (streamed, ``index`` on each call, arguments respelled, tool ``name``), and
the ``openai`` npm package under node (the message object as received, and a streamed one
with the arguments respelled by ``JSON.stringify(JSON.parse(...))``), installed into the
pytest cache from the npm registry when node is present. A client that writes a third
spelling (Python's ``json.dumps(json.loads(...))``) gets no replay, and the log says why.

Request k of a chain must replay its k earlier blocks, each intact. The matrix (client x
replayed blocks / continuity) is shown after the run's tests, under pytest-xdist too
(tests/support/summary_tables.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.stack import Stack, running_stack
from tests.support.summary_tables import RecordProperty, record_rows

STEPS = 10
CACHE_ON = {"REASONING_CACHE_ENABLED": "1"}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"target": {"type": "string"}}},
        },
    }
]
USER = {"role": "user", "content": "work through the files"}
NPM_OPENAI = "openai@7"
Message = dict[str, Any]


def non_compact(step: int) -> str:
    """Arguments as a model may emit them: spaced, a raw non-ASCII letter, an escape."""
    return f'{{"target": "src/caf\u00e9_{step}.py", "lines": [1, {step}], "why": "a \\"q\\""}}'


def compact(step: int) -> str:
    """The same value as JSON.stringify writes it."""
    return respelled(non_compact(step))


def respelled(arguments: str) -> str:
    """``JSON.stringify(JSON.parse(arguments))`` for these arguments (strings, integers,
    keys in insertion order that are not array indexes): the stdlib's compact dump is
    exactly that. The JavaScript rows run the real thing."""
    return json.dumps(json.loads(arguments), ensure_ascii=False, separators=(",", ":"))


def script(step: int, arguments: Callable[[int], str]) -> dict[str, Any]:
    return {
        "output": [
            {"type": "reasoning", "summary": [f"step {step}"]},
            {"type": "function_call", "name": "read_file", "arguments": arguments(step),
             "call_id": f"call_step{step}"},
        ]
    }  # fmt: skip


def tool_result(call_id: str, **extra: Any) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": f"contents of {call_id}", **extra}


# --- the Python clients: (stack, history) -> the messages they append -------------------------


def sdk_model_dump(stack: Stack, messages: list[Message]) -> list[Message]:
    with stack.openai() as client:
        answer = client.chat.completions.create(model="gpt-5", messages=messages, tools=TOOLS)
    message = answer.choices[0].message
    return [message.model_dump(), *(tool_result(call.id) for call in message.tool_calls or [])]


def json_answer(stack: Stack, messages: list[Message]) -> Message:
    response = requests.post(
        f"{stack.base_url}/chat/completions",
        json={"model": "gpt-5", "messages": messages, "tools": TOOLS},
        headers=stack.headers(),
        timeout=30,
    )
    response.raise_for_status()
    message: Message = response.json()["choices"][0]["message"]
    return message


def curl_as_received(stack: Stack, messages: list[Message]) -> list[Message]:
    message = json_answer(stack, messages)
    return [message, *(tool_result(call["id"]) for call in message.get("tool_calls") or [])]


def plain(stack: Stack, messages: list[Message]) -> list[Message]:
    received = json_answer(stack, messages)
    calls = [
        {"id": call["id"], "type": "function", "function": dict(call["function"])}
        for call in received.get("tool_calls") or []
    ]
    message: Message = {"role": "assistant", "content": received["content"]}
    if calls:
        message["tool_calls"] = calls
    return [message, *(tool_result(call["id"]) for call in calls)]


def cursor(stack: Stack, messages: list[Message]) -> list[Message]:
    """Cursor's recorded shape: streamed, content a string, each call with its index and
    the arguments respelled, tool results with the tool's name."""
    text: list[str] = []
    calls: dict[int, Message] = {}
    with stack.openai() as client:
        stream = client.chat.completions.create(
            model="gpt-5", messages=messages, tools=TOOLS, stream=True
        )
        for chunk in stream:
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
                for delta in choice.delta.tool_calls or []:
                    call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] += delta.id or ""
                    if delta.function is not None:
                        call["name"] += delta.function.name or ""
                        call["arguments"] += delta.function.arguments or ""
    tool_calls = [
        {"type": "function", "id": call["id"], "index": index,
         "function": {"name": call["name"], "arguments": respelled(call["arguments"])}}
        for index, call in sorted(calls.items())
    ]  # fmt: skip
    message: Message = {"role": "assistant", "content": "".join(text)}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return [message, *(tool_result(c["id"], name=c["function"]["name"]) for c in tool_calls)]


def python_round_trip(stack: Stack, messages: list[Message]) -> list[Message]:
    """A client that re-serializes the arguments with Python's defaults: a third spelling."""
    appended = sdk_model_dump(stack, messages)
    for call in appended[0].get("tool_calls") or []:
        call["function"]["arguments"] = json.dumps(json.loads(call["function"]["arguments"]))
    return appended


# --- the JavaScript client ----------------------------------------------------------------

JS_CLIENT = r"""
const [prefix, baseURL, apiKey, mode, steps] = process.argv.slice(1);  // node -e: no script path
const { OpenAI } = require(require.resolve("openai", { paths: [prefix] }));
const tools = JSON.parse(process.env.ECHO_TOOLS);

async function turn(client, messages) {
  if (mode === "message-as-received") {
    const completion = await client.chat.completions.create({ model: "gpt-5", messages, tools });
    return completion.choices[0].message;  // the object exactly as received
  }
  // "stream-respelled": accumulate the deltas, respell each call's arguments.
  const stream = await client.chat.completions.create({ model: "gpt-5", messages, tools, stream: true });
  let content = "";
  const calls = [];
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      content += choice.delta.content || "";
      for (const delta of choice.delta.tool_calls || []) {
        const call = (calls[delta.index] ||= { id: "", type: "function", function: { name: "", arguments: "" } });
        call.id += delta.id || "";
        call.function.name += (delta.function && delta.function.name) || "";
        call.function.arguments += (delta.function && delta.function.arguments) || "";
      }
    }
  }
  for (const call of calls) call.function.arguments = JSON.stringify(JSON.parse(call.function.arguments));
  const message = { role: "assistant", content: content || null };
  if (calls.length) message.tool_calls = calls;
  return message;
}

async function main() {
  const client = new OpenAI({ apiKey, baseURL, maxRetries: 0 });
  const messages = [{ role: "user", content: "work through the files" }];
  for (let step = 0; step <= Number(steps); step++) {
    const message = await turn(client, messages);
    if (step === Number(steps)) break;
    messages.push(message);
    for (const call of message.tool_calls || []) {
      messages.push({ role: "tool", tool_call_id: call.id, content: `contents of ${call.id}` });
    }
  }
  process.stdout.write(JSON.stringify(messages[1]) + "\n");  // the first echo, for the report
}
main().catch((error) => { console.error(String((error && error.stack) || error)); process.exit(1); });
"""


def _has_openai(prefix: Path) -> bool:
    return (prefix / "node_modules" / "openai" / "package.json").is_file()


@pytest.fixture(scope="session")
def npm_openai(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory whose node_modules holds the openai npm package: installed from the npm
    registry once, into a cache directory beside pytest's numbered temporary directories
    (which pytest never removes), and reused by later sessions."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are not installed: the JavaScript client rows need them")
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker's is a directory of the run's own
        base = base.parent
    cached = base.parent / f"npm-{NPM_OPENAI.replace('@', '-')}"
    if _has_openai(cached):
        return cached
    staging = tmp_path_factory.mktemp("npm")
    done = subprocess.run(
        [npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund", "--silent",
         "--prefer-offline", NPM_OPENAI],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if done.returncode != 0 or not _has_openai(staging):
        pytest.skip(f"npm could not install {NPM_OPENAI}: {done.stderr.strip()[-300:]}")
    try:
        staging.rename(cached)  # atomic: a concurrent session may have been first
    except OSError:
        return cached if _has_openai(cached) else staging
    return cached


def javascript(prefix: Path, mode: str) -> Callable[[Stack], Message]:
    def run(stack: Stack) -> Message:
        node = shutil.which("node")
        assert node is not None
        done = subprocess.run(
            [node, "-e", JS_CLIENT, str(prefix), stack.base_url, stack.token, mode, str(STEPS)],
            capture_output=True, text=True, timeout=120, check=False,
            env={"PATH": "/usr/bin:/bin", "ECHO_TOOLS": json.dumps(TOOLS)},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        first: Message = json.loads(done.stdout)
        return first

    return run


# --- the chain, and the matrix ---------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    client: str
    arguments: str
    replayed: tuple[int, ...]  # per request of the chain, from the fake's continuity probe
    intact: tuple[int, ...]
    misplaced: int
    unmatched: int  # the last request's cache_plan unmatched
    first_echo: Message


MATRIX_TITLE = "echo matrix: 10-step tool chain, request k must replay k blocks intact"
MATRIX_HEADER = (f"{'client':<52} {'arguments':<12} {'last request':<22} every request",)


def record_row(record_property: RecordProperty, row: Row) -> None:
    """The row's line in the matrix shown after the run (tests/support/summary_tables.py)."""
    pairs = list(zip(row.replayed, row.intact, strict=True))
    last = f"{row.replayed[-1]} replayed, {row.intact[-1]} intact"
    if all(r == i == k for k, (r, i) in enumerate(pairs)):
        verdict = "k of k at request k, all intact"
    elif not any(row.replayed):
        verdict = "nothing replayed"
    else:
        verdict = f"replayed {list(row.replayed)}, intact {list(row.intact)}"
    line = (f"{row.client:<52} {row.arguments:<12} {last:<22} {verdict}"
            f" (misplaced {row.misplaced}, unmatched {row.unmatched})")  # fmt: skip
    record_rows(record_property, MATRIX_TITLE, MATRIX_HEADER, [line])


def plan_unmatched(caplog: pytest.LogCaptureFixture) -> list[int]:
    found = re.findall(r"cache_plan .*unmatched=(\d+)", caplog.text)
    return [int(value) for value in found]


def run_chain(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    arguments: Callable[[int], str],
    drive: Callable[[Stack], Message],
) -> tuple[Row, list[int]]:
    caplog.set_level(logging.INFO, logger="relay")
    with running_stack(tmp_path / "data", CACHE_ON) as stack:
        stack.script(*(script(step, arguments) for step in range(1, STEPS + 1)))
        first = drive(stack)
        probes = [r.continuity for r in stack.fake.requests if r.path == "/v1/responses"]
    assert len(probes) == STEPS + 1 and all(p is not None for p in probes)
    row = Row(
        client="",
        arguments="compact" if arguments is compact else "non-compact",
        replayed=tuple(p["replayed"] for p in probes if p is not None),
        intact=tuple(p["intact"] for p in probes if p is not None),
        misplaced=sum(p["misplaced"] + p["invalid"] for p in probes if p is not None),
        unmatched=plan_unmatched(caplog)[-1],
        first_echo=first,
    )
    return row, plan_unmatched(caplog)


def python_driver(
    client: Callable[[Stack, list[Message]], list[Message]],
) -> Callable[[Stack], Message]:
    def drive(stack: Stack) -> Message:
        messages: list[Message] = [USER]
        for _ in range(STEPS):
            messages += client(stack, messages)
        client(stack, messages)  # the final request: it replays all ten
        return messages[1]

    return drive


PYTHON_ROWS = [
    ("python sdk: message.model_dump()", sdk_model_dump, compact),
    ("python sdk: message.model_dump()", sdk_model_dump, non_compact),
    ("curl: the JSON answer's message as received", curl_as_received, non_compact),
    ('plain {"role", "content", "tool_calls"}', plain, non_compact),
    ("cursor: recorded shape (stream, index, respelled)", cursor, non_compact),
]


@pytest.mark.parametrize(
    ("client", "drive", "arguments"),
    PYTHON_ROWS,
    ids=[f"{name}-{args.__name__}" for name, _, args in PYTHON_ROWS],
)
def test_python_clients_replay_every_block(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    record_property: RecordProperty,
    client: str,
    drive: Callable[[Stack, list[Message]], list[Message]],
    arguments: Callable[[int], str],
) -> None:
    row, unmatched = run_chain(tmp_path, caplog, arguments, python_driver(drive))
    row = dataclasses.replace(row, client=client)
    record_row(record_property, row)
    assert row.replayed == row.intact == tuple(range(STEPS + 1)), row
    assert row.misplaced == 0
    assert unmatched == [0] * (STEPS + 1)
    echoed = row.first_echo["tool_calls"][0]["function"]["arguments"]
    assert echoed == (compact if drive is cursor else arguments)(1)


def test_the_sdk_echo_carries_the_null_fields(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What made the SDK row fail before: model_dump() sends every field, unset ones null."""
    row, _ = run_chain(tmp_path, caplog, non_compact, python_driver(sdk_model_dump))
    nulls = {key for key, value in row.first_echo.items() if value is None}
    assert nulls == {"content", "refusal", "annotations", "audio", "function_call"}


@pytest.mark.parametrize("mode", ["message-as-received", "stream-respelled"])
@pytest.mark.parametrize("arguments", [non_compact, compact], ids=["non-compact", "compact"])
def test_the_javascript_client_replays_every_block(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    record_property: RecordProperty,
    npm_openai: Path,
    mode: str,
    arguments: Callable[[int], str],
) -> None:
    row, unmatched = run_chain(tmp_path, caplog, arguments, javascript(npm_openai, mode))
    client = f"javascript openai ({NPM_OPENAI}): {mode}"
    row = dataclasses.replace(row, client=client)
    record_row(record_property, row)
    assert row.replayed == row.intact == tuple(range(STEPS + 1)), row
    assert row.misplaced == 0
    assert unmatched == [0] * (STEPS + 1)
    echoed = row.first_echo["tool_calls"][0]["function"]["arguments"]
    assert echoed == (arguments(1) if mode == "message-as-received" else compact(1))
    if mode == "message-as-received":
        assert row.first_echo["refusal"] is None  # resent as received, null fields included


def test_a_third_spelling_replays_nothing_and_the_log_says_why(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    record_property: RecordProperty,
) -> None:
    row, unmatched = run_chain(tmp_path, caplog, compact, python_driver(python_round_trip))
    client = "python json.dumps(json.loads(...)) (a 3rd spelling)"
    row = dataclasses.replace(row, client=client)
    record_row(record_property, row)
    assert row.replayed == row.intact == (0,) * (STEPS + 1)
    # Request k carries k assistant messages, none of them predicted.
    assert unmatched == list(range(STEPS + 1))
