"""``python -m fakeupstream`` as a subprocess, driven over HTTP and by the official openai SDK.

The SDK client validates strictly (``_strict_response_validation=True``), so every JSON
body and every streamed event the fake sends is checked against the SDK's own types; the
stream helper (``client.responses.stream``) must accept the streams as they come.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-sdk-test-key"
TOOLS: list[Any] = [
    {"type": "function", "name": "read_file", "parameters": {"type": "object"}, "strict": False},
    {"type": "function", "name": "grep", "parameters": {"type": "object"}, "strict": False},
]


class Fake:
    def __init__(self, root: str) -> None:
        self.root = root
        self.client = openai.OpenAI(
            base_url=root + "/v1", api_key=KEY, max_retries=0, _strict_response_validation=True
        )

    def script(self, *scripts: dict[str, Any]) -> None:
        answer = requests.post(self.root + "/__fake/scripts", json=list(scripts), timeout=5)
        assert answer.status_code == 200, answer.text

    def records(self, wait_for: int = 0) -> list[dict[str, Any]]:
        params = {"wait_for": wait_for, "timeout": 5}
        records: list[dict[str, Any]] = requests.get(
            self.root + "/__fake/requests", params=params, timeout=10
        ).json()
        return records


@pytest.fixture(scope="module")
def process() -> Iterator[tuple[subprocess.Popen[str], str]]:
    command = [sys.executable, "-m", "fakeupstream", "--port", "0", "--seed", "11"]
    command += ["--api-key", KEY, "--api-key", "sk-second"]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            line = child.stdout.readline().strip()
            prefix = "fakeupstream listening on http://127.0.0.1:"
            assert line.startswith(prefix), line
            assert int(line.removeprefix(prefix)) > 0
            yield child, line.removeprefix("fakeupstream listening on ")
        finally:
            child.terminate()
            child.wait(10)


@pytest.fixture
def fake(process: tuple[subprocess.Popen[str], str]) -> Iterator[Fake]:
    _, root = process
    requests.post(root + "/__fake/reset", timeout=5).raise_for_status()
    fake = Fake(root)
    with fake.client:
        yield fake


REASONING = {"effort": "low", "summary": "auto"}
ENCRYPTED: Any = ["reasoning.encrypted_content"]


def create(fake: Fake, **kw: Any) -> Any:
    arguments: dict[str, Any] = {
        "model": "gpt-5",
        "input": "hello",
        "reasoning": REASONING,
        "include": ENCRYPTED,
        "store": False,
    }
    return fake.client.responses.create(**{**arguments, **kw})


def test_json_response_is_strictly_valid(fake):
    response = create(fake)
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.output[0].encrypted_content.startswith("gAAAAAB")
    assert response.output_text == "Echo: hello\ncontinuity: replayed=0 intact=0 misplaced=0"
    assert response.usage.input_tokens_details.cache_write_tokens == 0


def test_continuity_through_the_sdk(fake):
    first = create(fake)
    history: list[Any] = [{"role": "user", "content": "hello"}]
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history += [{"role": "user", "content": "again"}]
    second = create(fake, input=history)
    assert second.output_text.endswith("continuity: replayed=1 intact=1 misplaced=0")
    records = fake.records(wait_for=2)
    assert records[1]["continuity"]["intact"] == 1
    assert records[1]["headers"]["Authorization"] == "REDACTED"


def test_raw_stream_events_are_strictly_valid(fake):
    fake.script({"output": [{"type": "message", "text": "x" * 300}], "delta_size": 1})
    events = list(create(fake, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds.count("response.output_text.delta") == 300
    assert kinds[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))


SCRIPTS = {
    "default": {},
    "reasoning+text": {
        "output": [{"type": "reasoning", "summary": ["a", "b"]}, {"type": "message", "text": "hi"}]
    },
    "preamble+answer": {
        "output": [
            {"type": "reasoning", "summary": ["a"]},
            {"type": "message", "text": "Checking.", "phase": "commentary"},
            {"type": "message", "text": "Done.", "phase": "final_answer"},
        ]
    },
    "parallel-calls": {
        "output": [
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "name": "read_file", "arguments": '{"p": 1}'},
            {"type": "function_call", "name": "grep", "arguments": "{}"},
        ]
    },
    "refusal": {"output": [{"type": "refusal", "text": "No."}]},
    "ciphertext-differ": {"ciphertext": "differ"},
    "ciphertext-completed-only": {"ciphertext": "completed_only"},
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_stream_helper_accepts_every_completed_stream(fake, name):
    fake.script(SCRIPTS[name])
    with fake.client.responses.stream(
        model="gpt-5", input="hello", tools=TOOLS, reasoning=REASONING, include=ENCRYPTED
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[-1] == "response.completed"
    assert final.status == "completed"
    assert final.id.startswith("resp_")


@pytest.mark.parametrize(
    ("script", "terminal"),
    [
        ({"status": "incomplete"}, "response.incomplete"),
        ({"status": "failed"}, "response.failed"),
        ({"error_event": {"message": "overloaded", "after_events": 3}}, "error"),
    ],
)
def test_stream_helper_sees_unsuccessful_endings(fake, script, terminal):
    fake.script(script)
    with fake.client.responses.stream(model="gpt-5", input="hello") as stream:
        kinds = [event.type for event in stream]
    assert kinds[-1] == terminal


def test_sdk_raises_its_exception_classes(fake):
    with pytest.raises(openai.BadRequestError, match="does not support 0 with this model"):
        create(fake, temperature=0)
    unknown = {"type": "reasoning", "id": "rs_1", "summary": []}
    with pytest.raises(openai.NotFoundError, match="Items are not persisted"):
        create(
            fake,
            input=[
                {"role": "user", "content": "x"},
                unknown,
                {"role": "assistant", "content": "y"},
            ],
        )
    fake.script(
        {
            "http_error": {
                "status": 429,
                "message": "Rate limit reached.",
                "code": "rate_limit_exceeded",
            }
        },
        {"http_error": {"status": 503, "message": "Overloaded."}},
    )
    with pytest.raises(openai.RateLimitError, match="Rate limit reached"):
        create(fake)
    with pytest.raises(openai.InternalServerError, match="Overloaded"):
        create(fake)
    stranger = openai.OpenAI(base_url=fake.root + "/v1", api_key="sk-nope-000000", max_retries=0)
    with stranger, pytest.raises(openai.AuthenticationError, match="Incorrect API key provided"):
        stranger.responses.create(model="gpt-5", input="hi")


def test_second_configured_key_works_and_binds_its_own_ciphertext(fake):
    other = openai.OpenAI(
        base_url=fake.root + "/v1", api_key="sk-second", _strict_response_validation=True
    )
    first = create(fake)
    history: list[Any] = [{"role": "user", "content": "hello"}]
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history += [{"role": "user", "content": "again"}]
    with other, pytest.raises(openai.BadRequestError) as caught:
        other.responses.create(model="gpt-5", input=history, include=ENCRYPTED, store=False)
    assert caught.value.code == "invalid_encrypted_content"


def test_health_and_sigterm_exit_cleanly():
    command = [sys.executable, "-m", "fakeupstream", "--port", "0"]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        root = child.stdout.readline().strip().removeprefix("fakeupstream listening on ")
        health = requests.get(root + "/__fake/health", timeout=5).json()
        assert health == {"ok": True, "queued": 0, "requests": 0}
        child.terminate()
        assert child.wait(10) == 0


def test_the_process_keeps_its_controls_and_reads_only_its_files_dir(tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    (files / "canned.sse").write_text('data: {"type": "x"}\n\n')
    (tmp_path / "private.txt").write_text("not for the fake\n")
    command = [sys.executable, "-m", "fakeupstream", "--port", "0", "--quiet"]
    command += ["--files-dir", str(files)]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            root = child.stdout.readline().strip().removeprefix("fakeupstream listening on ")
            scripts = root + "/__fake/scripts"
            inside = requests.post(scripts, json={"raw_sse_file": "canned.sse"}, timeout=5)
            assert inside.status_code == 200 and inside.json() == {"queued": 1}
            for path in (str(tmp_path / "private.txt"), "../private.txt"):
                outside = requests.post(scripts, json={"raw_sse_file": path}, timeout=5)
                assert outside.status_code == 400
                assert (
                    "is not under the fake's files directory" in outside.json()["error"]["message"]
                )
            assert requests.get(root + "/__fake/health", timeout=5).json()["queued"] == 1
        finally:
            child.terminate()
            child.wait(10)


def test_taken_port_is_one_clear_line(process):
    _, root = process
    port = root.rsplit(":", 1)[1]
    command = [sys.executable, "-m", "fakeupstream", "--port", port]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=20, check=False
    )
    assert done.returncode == 1
    assert done.stderr.strip().startswith(f"fakeupstream: cannot listen on 127.0.0.1:{port}:")


def test_api_keys_can_be_listed_or_repeated():
    from fakeupstream.__main__ import parse_args

    assert parse_args(["--port", "0", "--api-key", "a", "b"]).api_keys == ["a", "b"]
    assert parse_args(["--port", "0", "--api-key", "a", "--api-key", "b"]).api_keys == ["a", "b"]
    assert parse_args(["--port", "0"]).api_keys is None
