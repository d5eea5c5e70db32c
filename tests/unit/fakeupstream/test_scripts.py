"""fakeupstream.scripts: the script format parses, refuses nonsense clearly, and the default reply."""

from __future__ import annotations

import json

import pytest

from fakeupstream.ciphertext import ContinuityReport, ReplayedReasoning
from fakeupstream.scripts import (
    CustomToolCall,
    ErrorEvent,
    Failure,
    FunctionCall,
    HttpError,
    Message,
    Reasoning,
    Refusal,
    Script,
    ScriptError,
    custom_input,
    default_output,
    parse_script,
    parse_scripts,
)
from fakeupstream.toxics import Toxics


def test_empty_script_is_the_default_behaviour():
    assert parse_script({}) == Script()
    assert Script().output is None


def test_full_script_parses_every_key(tmp_path):
    sse = tmp_path / "stream.sse"
    sse.write_bytes(b"event: x\ndata: {}\n\n")
    script = parse_script(
        {
            "output": [
                {"type": "reasoning", "summary": ["a", "b"]},
                {"type": "message", "text": "pre", "phase": "commentary"},
                {"type": "function_call", "name": "f", "arguments": {"x": 1}, "call_id": "call_1"},
                {"type": "refusal", "text": "no"},
            ],
            "status": "incomplete",
            "incomplete_reason": "content_filter",
            "error": {"code": "rate_limit_exceeded", "message": "slow down"},
            "error_event": {"message": "boom", "after_events": 3},
            "http_error": {"status": 429, "message": "busy", "headers": {"retry-after": "1"}},
            "delta_size": 1,
            "ciphertext": "differ",
            "usage": {"input_tokens": 5, "cached_tokens": 2},
            "raw_sse_file": str(sse),
            "validate": False,
            "toxics": {
                "latency_ms": 5,
                "latency_after_events": 6,
                "slice_bytes": 3,
                "cut_after_events": 4,
                "cut_mode": "close",
            },
        },
        files_dir=tmp_path,
    )
    assert script.output == (
        Reasoning(("a", "b")),
        Message("pre", "commentary"),
        FunctionCall("f", '{"x": 1}', "call_1"),
        Refusal("no"),
    )
    assert (script.status, script.incomplete_reason) == ("incomplete", "content_filter")
    assert script.error == Failure("rate_limit_exceeded", "slow down")
    assert script.error_event == ErrorEvent("boom", "server_error", None, 3)
    assert script.http_error == HttpError(
        429, "busy", "invalid_request_error", None, None, (("retry-after", "1"),)
    )
    assert (script.delta_size, script.ciphertext, script.validate) == (1, "differ", False)
    assert script.usage == {"input_tokens": 5, "cached_tokens": 2}
    assert script.raw_sse == b"event: x\ndata: {}\n\n"
    assert script.toxics == Toxics(
        latency_ms=5.0, latency_after_events=6, slice_bytes=3, cut_after_events=4, cut_mode="close"
    )


def test_raw_sse_file_reads_only_under_the_files_dir(tmp_path):
    files = tmp_path / "files"
    (files / "sub").mkdir(parents=True)
    (files / "sub" / "ok.sse").write_bytes(b"data: 1\n\n")
    secret = tmp_path / "secret"
    secret.write_bytes(b"not for the fake")
    (files / "link.sse").symlink_to(secret)

    def read(path: object) -> bytes | None:
        return parse_script({"raw_sse_file": str(path)}, files_dir=files).raw_sse

    assert read("sub/ok.sse") == b"data: 1\n\n"  # relative to the files dir
    assert read(files / "sub" / "ok.sse") == b"data: 1\n\n"  # or absolute, inside it
    for outside in (secret, "../secret", "sub/../../secret", files / "link.sse", "/etc/passwd"):
        with pytest.raises(ScriptError, match="is not under the fake's files directory"):
            read(outside)
    with pytest.raises(ScriptError, match="cannot be read"):
        read("missing.sse")
    with pytest.raises(ScriptError, match=r"script 1: 'raw_sse_file' '\.\./secret' is not under"):
        parse_scripts([{}, {"raw_sse_file": "../secret"}], files_dir=files)


def test_http_error_type_defaults_by_status():
    http_error = parse_script({"http_error": {"status": 503, "message": "x"}}).http_error
    assert http_error is not None
    assert http_error.type == "server_error"


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"outputs": []}, "unknown script key(s) 'outputs'; allowed: output, status"),
        ({"output": {}}, "'output' must be a list"),
        ({"output": [{"type": "image"}]}, "output[0]: 'type' must be reasoning, message"),
        ({"output": [{"type": "message"}]}, "output[0]: 'text' must be a string"),
        ({"output": [{"type": "message", "text": "x", "role": "user"}]}, "unknown output[0] key(s) 'role'"),
        ({"output": [{"type": "reasoning", "summary": "x"}]}, "'summary' must be a list of strings"),
        ({"status": "done"}, "'status' must be one of completed, incomplete, failed"),
        ({"error": {"code": "teapot", "message": "x"}}, "'error.code' must be a code the SDK accepts"),
        ({"http_error": {"status": 200, "message": "x"}}, "'http_error.status' must be an integer 400..599"),
        ({"delta_size": 0}, "'delta_size' must be an integer >= 1"),
        ({"delta_size": 1, "deltas": 2}, "either 'delta_size' or 'deltas'"),
        ({"ciphertext": "weird"}, "'ciphertext' must be one of normal, differ, completed_only"),
        ({"usage": {"tokens": 1}}, "unknown usage key(s) 'tokens'"),
        ({"raw_sse_file": "/nonexistent/x.sse"}, "'raw_sse_file': this fake reads no files"),
        ({"toxics": {"slow": 1}}, "unknown toxics key(s) 'slow'"),
        ({"toxics": {"latency_ms": -1}}, "'toxics.latency_ms' must be a number >= 0"),
        ({"toxics": {"latency_after_events": -1}}, "'toxics.latency_after_events' must be an integer >= 0"),
        ({"toxics": {"slice_bytes": 0}}, "'toxics.slice_bytes' must be an integer >= 1"),
        ({"toxics": {"cut_after_events": True}}, "'toxics.cut_after_events' must be an integer"),
        ({"validate": "no"}, "'validate' must be true or false"),
    ],
)  # fmt: skip
def test_bad_scripts_say_what_to_fix(raw, fragment):
    with pytest.raises(ScriptError) as caught:
        parse_script(raw)
    assert fragment in str(caught.value)


def test_parse_scripts_takes_one_or_many_and_names_the_bad_one():
    assert len(parse_scripts({})) == 1
    assert len(parse_scripts([{}, {"status": "failed"}])) == 2
    with pytest.raises(ScriptError, match="script 1: 'status'"):
        parse_scripts([{}, {"status": "nope"}])
    with pytest.raises(ScriptError, match="must be a JSON object"):
        parse_scripts([1])


# --- default reply -------------------------------------------------------------------

REPORT = ContinuityReport(
    (
        ReplayedReasoning(1, "rs_1", "intact", "a"),
        ReplayedReasoning(5, "rs_2", "misplaced", "b"),
    )
)
TOOLS = [{"type": "web_search"}, {"type": "function", "name": "read_file", "parameters": {}}]


def test_default_reply_echoes_and_states_continuity():
    items = [{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}]
    out = default_output({"model": "gpt-5"}, items, REPORT, reasoning=True)
    assert out == (
        Reasoning(("Thinking about: hello",)),
        Message("Echo: hello\ncontinuity: replayed=2 intact=1 misplaced=1"),
    )


def test_default_reply_without_reasoning_for_ordinary_models():
    items = [{"role": "user", "content": "hi"}]
    assert default_output({}, items, ContinuityReport(), reasoning=False) == (
        Message("Echo: hi\ncontinuity: replayed=0 intact=0 misplaced=0"),
    )


def test_default_reply_calls_the_first_function_tool_on_call_tool():
    items = [{"role": "user", "content": "please CALL_TOOL now"}]
    out = default_output({"tools": TOOLS}, items, ContinuityReport(), reasoning=False)
    assert out == (FunctionCall("read_file", "{}"),)
    # No tools, or the word not in the last user message: an ordinary answer.
    assert isinstance(default_output({}, items, ContinuityReport(), reasoning=False)[0], Message)


@pytest.mark.parametrize(
    ("choice", "name"),
    [("required", "read_file"), ({"type": "function", "name": "grep"}, "grep")],
)
def test_default_reply_obeys_a_forced_tool_choice(choice, name):
    body = {"tools": [*TOOLS, {"type": "function", "name": "grep"}], "tool_choice": choice}
    out = default_output(
        body, [{"role": "user", "content": "hi"}], ContinuityReport(), reasoning=False
    )
    assert out == (FunctionCall(name, "{}"),)


def test_default_reply_reports_tool_output():
    items = [
        {"role": "user", "content": "CALL_TOOL"},
        {"type": "function_call", "call_id": "c", "name": "read_file", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "42"},
    ]
    out = default_output({"tools": TOOLS}, items, ContinuityReport(), reasoning=False)
    assert out == (Message("Tool output: 42\ncontinuity: replayed=0 intact=0 misplaced=0"),)


CUSTOM = {"type": "custom", "name": "ApplyPatch", "format": {"type": "text"}}


@pytest.mark.parametrize(
    ("tools", "choice", "text", "expected"),
    [
        ([*TOOLS, CUSTOM], None, "CALL_CUSTOM please", "ApplyPatch"),
        ([*TOOLS, CUSTOM], {"type": "custom", "name": "ApplyPatch"}, "hi", "ApplyPatch"),
        ([CUSTOM], "required", "hi", "ApplyPatch"),
        ([*TOOLS, CUSTOM], None, "CALL_TOOL", "read_file"),  # CALL_TOOL: functions only
        ([*TOOLS], None, "CALL_CUSTOM", None),  # no custom tool: an ordinary answer
    ],
)
def test_default_reply_calls_a_custom_tool_with_a_freeform_patch(tools, choice, text, expected):
    body = {"tools": tools, "tool_choice": choice}
    out = default_output(
        body, [{"role": "user", "content": text}], ContinuityReport(), reasoning=False
    )
    if expected is None:
        assert isinstance(out[0], Message)
    elif expected == "read_file":
        assert out == (FunctionCall("read_file", "{}"),)
    else:
        assert out == (CustomToolCall(expected, custom_input(text)),)
        patch = custom_input(text)
        assert patch.startswith("*** Begin Patch\n") and text in patch
        with pytest.raises(ValueError):
            json.loads(patch)  # freeform: never JSON


def test_default_reply_reports_custom_tool_output():
    items = [
        {"role": "user", "content": "CALL_CUSTOM"},
        {"type": "custom_tool_call", "call_id": "c", "name": "ApplyPatch", "input": "p"},
        {"type": "custom_tool_call_output", "call_id": "c", "output": "Done!"},
    ]
    out = default_output({"tools": [CUSTOM]}, items, ContinuityReport(), reasoning=False)
    assert out == (Message("Tool output: Done!\ncontinuity: replayed=0 intact=0 misplaced=0"),)


def test_a_script_makes_the_model_call_a_custom_tool():
    raw = {"output": [{"type": "custom_tool_call", "name": "ApplyPatch", "input": "x y"}]}
    assert parse_script(raw).output == (CustomToolCall("ApplyPatch", "x y"),)
    with pytest.raises(ScriptError, match="'input' must be a string"):
        parse_script({"output": [{"type": "custom_tool_call", "name": "ApplyPatch"}]})
