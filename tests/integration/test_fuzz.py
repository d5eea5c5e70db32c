"""Fuzzing one long-lived relay (cache on) in front of the fake upstream.

Hypothesis draws structure-aware adversarial input (:mod:`tests.support.fuzz_inputs`):
Chat Completions and Responses bodies with mutated fields, types, Unicode, numbers and
depth; cache-API queries; raw HTTP/1.1 with broken request lines, headers and framing;
chunked uploads framed with bare LFs or CRs (each refused at once with a 400); bodies declaring
a Content-Encoding, really compressed or not (415 unless ``identity``).
For every answer:

- never a 5xx: the relay's own faults are 500s and the fake, which validates like
  OpenAI, answers bad input with a 400, which the relay passes on;
- an error (4xx) carries the OpenAI envelope; a 200 is well-formed JSON or SSE;
- a whole request always gets an answer, and nothing the relay logs is an error.

Afterwards the relay still answers ``/healthz`` and the store passes ``PRAGMA
integrity_check``. The seed is printed (``RELAY_FUZZ_SEED`` replays it), and so are the
request count and the status histogram. The fast suite sends half the examples below
(5,000 requests, a new seed each run); ``RELAY_SCENARIO_BUDGET=long`` (``nox -s
scenarios``) five times them all (50,000); ``RELAY_FUZZ_SCALE=0.1`` a tenth of them
(1,000), for a quick local look.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import random
import re
import shutil
import socket
import sqlite3
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from relay.tunnel.output import LineSplitter, public_origin, public_url
from tests.support.fuzz_inputs import (
    BodyCase,
    CacheCase,
    RawCase,
    cache_cases,
    chat_cases,
    encoding_cases,
    lf_framing_cases,
    raw_cases,
    responses_cases,
)
from tests.support.fuzz_lines import TunnelCase, admin_lines, tunnel_cases
from tests.support.raw_http import Answer, ProtocolViolation, converse, read_answers
from tests.support.stack import Stack, running_stack

ADMIN = "admin-token-fuzz-0123456789"
ENV = {
    "REASONING_CACHE_ENABLED": "1",
    "RELAY_ADMIN_TOKEN": ADMIN,
    "RELAY_MAX_REQUEST_BYTES": str(1024 * 1024),
}
LONG = os.environ.get("RELAY_SCENARIO_BUDGET") == "long"
EXAMPLES = {
    "chat": 2600,
    "responses": 2300,
    "cache": 1300,
    "raw": 2600,
    "lf_framing": 600,
    "encoding": 600,
}
# Half in the fast suite: one test, the longest a worker runs (a minute for all of them);
# the long budget is the one that digs deep.
SCALE = 5.0 if LONG else float(os.environ.get("RELAY_FUZZ_SCALE") or 0.5)
EXAMPLES = {name: max(1, round(count * SCALE)) for name, count in EXAMPLES.items()}
SEED = int(os.environ.get("RELAY_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
ENVELOPE_KEYS = {"message", "type", "param", "code"}


class Tally:
    def __init__(self) -> None:
        self.statuses: Counter[tuple[str, str]] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.requests = 0

    def count(self, target: str, status: int | str) -> None:
        self.statuses[(target, str(status))] += 1

    def timed(self, target: str, seconds: float) -> None:
        self.seconds[target] += seconds

    def histogram(self) -> str:
        targets = sorted({target for target, _ in self.statuses})
        lines = []
        for target in targets:
            row = {s: n for (t, s), n in sorted(self.statuses.items()) if t == target}
            seconds = self.seconds[target]
            lines.append(f"  {target:<10} {sum(row.values()):>6} in {seconds:5.1f} s  {row}")
        overall = Counter[str]()
        for (_, status), n in self.statuses.items():
            overall[status] += n
        seconds = sum(self.seconds.values())
        lines.append(
            f"  {'all':<10} {sum(overall.values()):>6} in {seconds:5.1f} s  "
            f"{dict(sorted(overall.items()))}"
        )
        return "\n".join(lines)


class Errors(logging.Handler):
    """Every ERROR record any logger emits while the fuzz runs (both threads)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def collecting_errors() -> Iterator[Errors]:
    handler = Errors()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


@contextmanager
def quiet_access_log() -> Iterator[None]:
    """Tornado logs every 4xx at WARNING: ten thousand records for pytest to keep."""
    access = logging.getLogger("tornado.access")
    level = access.level
    access.setLevel(logging.ERROR)  # 5xx still reach the error collector
    try:
        yield
    finally:
        access.setLevel(level)


def check_envelope(body: bytes, where: str) -> None:
    try:
        value = json.loads(body)
    except ValueError:
        raise AssertionError(f"{where}: an error answer that is not JSON: {body[:300]!r}") from None
    error = value.get("error") if isinstance(value, dict) else None
    assert isinstance(error, dict), f"{where}: no error envelope: {body[:300]!r}"
    assert set(error) == ENVELOPE_KEYS, f"{where}: envelope keys {sorted(error)}"
    assert isinstance(error["message"], str) and error["message"], f"{where}: no message"
    assert isinstance(error["type"], str) and error["type"], f"{where}: no type"


def check_success(content_type: str, body: bytes, where: str) -> None:
    if content_type.startswith("text/event-stream"):
        # SSE lines end at CR, LF or CRLF only (str.splitlines() also splits at U+2028).
        for line in re.split(r"\r\n|\r|\n", body.decode("utf-8")):
            if line.startswith("data: ") and line != "data: [DONE]":
                json.loads(line[len("data: ") :])
        return
    json.loads(body)


def check_answer(status: int, content_type: str, body: bytes, where: str) -> None:
    assert status < 500, f"{where}: {status} {body[:500]!r}"
    if status >= 400:
        assert content_type.startswith("application/json"), f"{where}: {content_type!r}"
        check_envelope(body, where)
    elif status == 200:
        check_success(content_type, body, where)


def drive(
    tally: Tally,
    target: str,
    strategy: st.SearchStrategy[Any],
    examples: int,
    check: Callable[[Any], None],
) -> None:
    started = time.monotonic()
    try:
        _drive(strategy, examples, check)
    finally:
        tally.timed(target, time.monotonic() - started)


def _drive(strategy: st.SearchStrategy[Any], examples: int, check: Callable[[Any], None]) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
    )
    @seed(SEED)
    @given(strategy)
    def one(case: Any) -> None:
        check(case)

    one()


class Client:
    """Sends cases to the relay, checks every answer and counts it."""

    def __init__(self, stack: Stack, tally: Tally) -> None:
        self.stack = stack
        self.tally = tally
        self.origin = f"http://127.0.0.1:{stack.relay.port}"
        self.connection: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        """One request on a kept-alive connection (http.client: requests costs as much as
        the relay here); a new connection when the relay closed the last one."""
        self.tally.requests += 1
        while True:
            reused = self.connection is not None
            if self.connection is None:
                port = self.stack.relay.port
                self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                self.connection.request(method, path, body=body, headers=headers)
                resp = self.connection.getresponse()
                data = resp.read()
            except (http.client.HTTPException, OSError):
                self.close()
                if reused:
                    # The relay closed it after its last answer (it does after refusing a
                    # body it did not read) before we noticed: send again on a new one.
                    continue
                raise  # a new connection the relay dropped: that is a failure
            if resp.will_close:
                self.close()
            return resp.status, resp.getheader("Content-Type") or "", data

    def body(self, target: str) -> Callable[[BodyCase], None]:
        def send(case: BodyCase) -> None:
            headers = {} if case.content_type is None else {"Content-Type": case.content_type}
            if case.authorized:
                headers["Authorization"] = f"Bearer {self.stack.token}"
            if case.content_encoding is not None:
                headers["Content-Encoding"] = case.content_encoding
            status, content_type, body = self.request("POST", case.path, case.body, headers)
            self.tally.count(target, status)
            where = f"{target} {case!r:.600}"
            check_answer(status, content_type, body, where)
            if case.compressed and case.authorized:  # refused from the head, never decoded
                assert status == 415, where
                assert json.loads(body)["error"]["code"] == "unsupported_content_encoding", where

        return send

    def cache(self, case: CacheCase) -> None:
        headers = {"Authorization": f"Bearer {ADMIN if case.authorized else 'wrong-admin'}"}
        path = f"/api/cache/reasoning?{case.query}"
        status, content_type, body = self.request(case.method, path, None, headers)
        self.tally.count("cache", status)
        check_answer(status, content_type, body, f"cache {case!r:.600}")

    def raw_as(self, target: str) -> Callable[[RawCase], None]:
        return lambda case: self.raw(case, target)

    def raw(self, case: RawCase, target: str = "raw") -> None:
        self.tally.requests += 1
        where = f"raw {case.data[:600]!r}"
        port = self.stack.relay.port
        assert port is not None
        received = converse(port, case.data, answer_due=case.complete, head_only=case.head_only)
        try:
            answers = read_answers(received, head_only=case.head_only)
        except ProtocolViolation as exc:
            if case.complete:
                raise AssertionError(f"{where}: {exc}") from None
            answers = []  # cut off by our own wait, not by the relay
        final = [a for a in answers if a.status >= 200]
        if case.complete:
            assert final, f"{where}: no answer: {received[:300]!r}"
        if not final:
            self.tally.count(target, "none")
        for answer in final:
            self.tally.count(target, answer.status)
            self.check_raw(answer, where, head_only=case.head_only)
        if case.expected is not None:
            status, code = case.expected
            assert final[0].status == status, f"{where}: {final[0]}"
            assert json.loads(final[0].body)["error"]["code"] == code, f"{where}: {final[0]}"

    @staticmethod
    def check_raw(answer: Answer, where: str, *, head_only: bool) -> None:
        if head_only and not answer.body:  # a HEAD answer: only its head to look at
            assert answer.status < 500, f"{where}: {answer.status}"
            return
        check_answer(answer.status, answer.header("content-type") or "", answer.body, where)


def integrity(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("PRAGMA integrity_check")]


# A failing case may hold a 70 kB header or string; its repr is still what to report.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
def test_the_relay_survives_adversarial_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with capsys.disabled():
        print(f"\nfuzz: seed {SEED} (RELAY_FUZZ_SEED={SEED} replays it), examples {EXAMPLES}")
    tally = Tally()
    with (
        quiet_access_log(),
        collecting_errors() as errors,
        running_stack(tmp_path / "data", ENV) as stack,
    ):
        client = Client(stack, tally)
        try:
            drive(tally, "chat", chat_cases, EXAMPLES["chat"], client.body("chat"))
            drive(
                tally, "responses", responses_cases, EXAMPLES["responses"], client.body("responses")
            )
            drive(tally, "cache", cache_cases, EXAMPLES["cache"], client.cache)
            drive(tally, "raw", raw_cases(stack.token, ADMIN), EXAMPLES["raw"], client.raw)
            drive(
                tally,
                "lf_framing",
                lf_framing_cases(stack.token),
                EXAMPLES["lf_framing"],
                client.raw_as("lf_framing"),
            )
            drive(tally, "encoding", encoding_cases, EXAMPLES["encoding"], client.body("encoding"))
        finally:
            with capsys.disabled():
                print(f"fuzz: {tally.requests} requests; answers by target:\n{tally.histogram()}")
        assert requests.get(f"{client.origin}/healthz", timeout=5).json() == {"status": "ok"}
        cache_path = stack.config.cache_path
        client.close()
    assert integrity(cache_path) == ["ok"]
    with sqlite3.connect(cache_path) as conn:  # the fuzz did reach the store
        assert conn.execute("SELECT count(*) FROM observations").fetchone()[0] > 0
    assert not errors.records, "\n".join(f"{r.name}: {r.getMessage()}" for r in errors.records[:10])
    assert tally.requests >= sum(EXAMPLES.values())


# --- the line protocols: admin socket request lines, tunnel output ---------------------

LINE_EXAMPLES = {"admin": max(1, round(700 * SCALE)), "tunnel": max(1, round(700 * SCALE))}
ADMIN_REFUSALS = {"bad_request", "unknown_command", "too_large"}


def admin_exchange(sock: Path, line: bytes) -> bytes:
    """Send one line, read the one answer line (a refused oversized line may be cut short
    by the relay closing: the answer is there to read all the same)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect(str(sock))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            client.sendall(line)
        return client.makefile("rb").readline()


def check_admin(sock: Path, tally: Tally) -> Callable[[bytes], None]:
    def send(line: bytes) -> None:
        tally.requests += 1
        where = f"admin {line[:300]!r}"
        raw = admin_exchange(sock, line)
        assert raw.endswith(b"\n"), f"{where}: no answer line: {raw[:300]!r}"
        answer = json.loads(raw)
        assert isinstance(answer, dict) and isinstance(answer.get("ok"), bool), where
        if answer["ok"]:
            assert "relay" in answer or "text" in answer, f"{where}: {raw[:300]!r}"
            tally.count("admin", "ok")
            return
        error = answer["error"]
        assert error["code"] in ADMIN_REFUSALS, f"{where}: {raw[:300]!r}"
        assert isinstance(error["message"], str) and error["message"], where
        tally.count("admin", error["code"])

    return send


def check_tunnel_output(tally: Tally) -> Callable[[TunnelCase], None]:
    def feed(case: TunnelCase) -> None:
        tally.requests += 1
        splitter = LineSplitter()
        lines = [line for chunk in case.chunks for line in splitter.feed(chunk)]
        found = [url for line in [*lines, *splitter.close()] if (url := public_url(line))]
        assert case.url in found, f"tunnel {case!r:.600}: {found}"
        assert all(public_origin(url) == url for url in found), found
        tally.count("tunnel", "found")

    return feed


def test_the_admin_socket_and_the_tunnel_parser_survive_adversarial_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every admin request line gets one answer (an error frame unless it is a valid
    command) and logs no error; every tunnel output still yields the URL printed last."""
    with capsys.disabled():
        print(f"\nfuzz lines: seed {SEED}, examples {LINE_EXAMPLES}")
    tally = Tally()
    private = Path(tempfile.mkdtemp(prefix="relay-fuzz-"))  # a Unix socket path is short
    sock = private / "admin.sock"
    env = {**ENV, "RELAY_ADMIN_SOCKET": str(sock), "RELAY_ADMIN_SNAPSHOT_DIR": str(tmp_path)}
    try:
        with collecting_errors() as errors, running_stack(tmp_path / "data", env) as stack:
            try:
                drive(tally, "admin", admin_lines, LINE_EXAMPLES["admin"], check_admin(sock, tally))
                drive(
                    tally,
                    "tunnel",
                    tunnel_cases,
                    LINE_EXAMPLES["tunnel"],
                    check_tunnel_output(tally),
                )
            finally:
                with capsys.disabled():
                    print(f"fuzz lines: {tally.requests} cases:\n{tally.histogram()}")
            assert json.loads(admin_exchange(sock, b'{"command": "status"}\n'))["ok"]
            health = requests.get(f"http://127.0.0.1:{stack.relay.port}/healthz", timeout=5)
            assert health.json() == {"status": "ok"}
    finally:
        shutil.rmtree(private, ignore_errors=True)
    assert not errors.records, "\n".join(f"{r.name}: {r.getMessage()}" for r in errors.records[:10])
    assert tally.requests >= sum(LINE_EXAMPLES.values())
