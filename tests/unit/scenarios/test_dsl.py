"""The scenario DSL and its pure helpers (no processes): steps, placeholders, matchers,
seeds, launch mods, log parsing, the raw client's decoders, the visible projection."""

from __future__ import annotations

import inspect
import json
import math
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.settings.crashpoints import REQUEST_POINTS
from scenarios import launch
from scenarios.answer import ChatAnswer, parse_sse_data
from scenarios.client import _Body
from scenarios.core import (
    AtLeast,
    AtMost,
    Contains,
    InRange,
    Matches,
    Placeholder,
    Turn,
    matches,
    resolve,
)
from scenarios.dsl import (
    Branch,
    Chat,
    ClientGot,
    Ctx,
    EchoAs,
    RelayAlive,
    ReplayOf,
    Scenario,
    StoreIntegrity,
    Upstream,
    UpstreamReceived,
    reply,
    toxics,
)
from scenarios.history import History
from scenarios.launch import LaunchMod
from scenarios.library import REGISTRY, load_all
from scenarios.library.lifecycle import SSE_ONLY, lifecycle_cases
from scenarios.relaylog import parse_relay_events
from scenarios.seed import Seed, replay_command, seed_from_env
from scenarios.visible import segments
from scenarios.wait import WaitTimeout, wait_until

# --- scenario building ---------------------------------------------------------------------


def test_transcript_reads_like_the_playbook() -> None:
    s = Scenario("demo")
    s >> Upstream(reply("hi", cut_after_events=3)) >> Chat("hello", name="t1")
    s << ClientGot(outcome="error") << RelayAlive()
    lines = s.transcript(upto=2, mark="!!").splitlines()
    assert lines[0].startswith("  >> Upstream(")
    assert lines[1].startswith("  >> Chat(text='hello'")
    assert lines[2] == "!!<< ClientGot(outcome='error')"
    assert lines[3] == "  << RelayAlive()"


def test_operators_keep_actions_and_expectations_apart() -> None:
    s = Scenario("demo")
    with pytest.raises(TypeError, match="takes an action"):
        s >> ClientGot()  # type: ignore[operator]
    with pytest.raises(TypeError, match="takes an expectation"):
        s << Chat("x")  # type: ignore[operator]


def test_huge_values_are_shortened_in_transcripts() -> None:
    s = Scenario("demo")
    s >> Chat("x" * 100_000)
    assert len(s.transcript()) < 200


def test_toxics_reject_typos() -> None:
    with pytest.raises(ValueError, match="unknown toxics"):
        toxics(cut_after_event=3)
    assert reply("a", latency_ms=5)["toxics"] == {"latency_ms": 5}


# --- placeholders and matchers ---------------------------------------------------------------


def test_placeholder_captures_then_compares() -> None:
    call_id = Placeholder("call_id")
    assert matches(call_id, "call_1")
    assert call_id.value == "call_1"
    assert matches(call_id, "call_1")
    assert not matches(call_id, "call_2")
    assert resolve([{"tool_call_id": call_id}]) == [{"tool_call_id": "call_1"}]


def test_unbound_placeholder_in_a_request_fails_clearly() -> None:
    with pytest.raises(AssertionError, match="before it captured"):
        resolve({"id": Placeholder("resp")})


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        (Contains("lo w"), "hello world", True),
        (Contains("x"), None, False),
        (Matches(r"^(cut|error)$"), "cut", True),
        (Matches("^cut$"), "success", False),
        (AtLeast(3), 3, True),
        (AtLeast(3), 2, False),
        (AtMost(2), 2, True),
        (InRange(400, 499), 413, True),
        (InRange(400, 499), 500, False),
        (5, 5, True),
    ],
)
def test_matchers(expected: object, actual: object, ok: bool) -> None:
    assert matches(expected, actual) is ok


# --- seeds -------------------------------------------------------------------------------------


def test_named_streams_are_stable_and_independent() -> None:
    a, b = Seed(42), Seed(42)
    first = [a.randint("cut", 1, 1000) for _ in range(5)]
    b.randint("something_new", 1, 10)  # a new choice elsewhere must not shift "cut"
    assert [b.randint("cut", 1, 1000) for _ in range(5)] == first
    assert [Seed(43).randint("cut", 1, 1000) for _ in range(5)] != first


def test_clock_jumps_cover_both_directions_and_many_scales() -> None:
    seed = Seed(7)
    jumps = [seed.clock_jump("wall", 0.001, 86_400) for _ in range(2000)]
    assert all(0.001 <= abs(j) <= 86_400 for j in jumps)
    assert 0.4 < sum(j > 0 for j in jumps) / len(jumps) < 0.6
    decades = {math.floor(math.log10(abs(j))) for j in jumps}
    assert decades >= set(range(-3, 4))  # milliseconds to hours all occur


def test_chunk_sizes_sum_to_total() -> None:
    sizes = Seed(1).chunk_sizes("slices", 10_000, 1, 64)
    assert sum(sizes) == 10_000 and all(1 <= s <= 64 for s in sizes)


def test_seed_from_env_and_replay_command() -> None:
    assert seed_from_env({"RELAY_SCENARIO_SEED": "0x10"}) == (16, True)
    value, from_env = seed_from_env({})
    assert not from_env and 0 <= value < 2**32
    with pytest.raises(ValueError, match="RELAY_SCENARIO_SEED"):
        seed_from_env({"RELAY_SCENARIO_SEED": "abc"})
    node = "tests/scenarios/test_scenario_library.py::test_scenario[malformed_sse]"
    assert replay_command(9, node) == f"RELAY_SCENARIO_SEED=9 python -m pytest '{node}'"
    assert replay_command(9, "malformed_sse") == (
        "RELAY_SCENARIO_SEED=9 python -m scenarios run malformed_sse"
    )


# --- launch mods, logs, waiting ------------------------------------------------------------------


def test_launch_mods_stack_preloads_and_refuse_conflicts() -> None:
    clock = LaunchMod("faketime", {"FAKETIME_NO_CACHE": "1"}, ("/lib/faketime.so",))
    fiu = LaunchMod("libfiu", {"FIU_ENABLE": ""}, ("/lib/a.so", "/lib/b.so"))
    strace = LaunchMod("strace", argv_prefix=("strace", "-f"))
    argv, env = launch.apply([clock, fiu, strace], ["python", "-m", "relay"], {"A": "1"})
    assert argv == ["strace", "-f", "python", "-m", "relay"]
    assert env["LD_PRELOAD"] == "/lib/faketime.so /lib/a.so /lib/b.so"
    assert env["A"] == "1" and env["FAKETIME_NO_CACHE"] == "1"
    with pytest.raises(ValueError, match="both set"):
        launch.apply([clock, LaunchMod("other", {"FAKETIME_NO_CACHE": "0"})], [], {})


def test_relay_log_lines_parse() -> None:
    text = (
        "2026-01-01 10:00:00,000 INFO relay chat_request request_id=req_1 stream=True\n"
        "Traceback (most recent call last):\n"
        "2026-01-01 10:00:00,001 INFO relay stream_failed code=upstream_timeout note='a b'\n"
        "2026-01-01 10:00:00,002 ERROR tornado.access 504 POST /v1/chat/completions\n"
    )
    assert parse_relay_events(text) == [
        ("chat_request", {"level": "INFO", "request_id": "req_1", "stream": "True"}),
        ("stream_failed", {"level": "INFO", "code": "upstream_timeout", "note": "a b"}),
    ]


def test_wait_until_returns_the_value_or_names_what_it_waited_for() -> None:
    values = iter([None, False, 7])
    assert wait_until(lambda: next(values), timeout=1, what="seven") == 7
    with pytest.raises(WaitTimeout, match="waiting for the impossible"):
        wait_until(lambda: None, timeout=0.02, what="the impossible")


@pytest.mark.parametrize("answer", [0, 0.0, "", [], {}, True, 7])
def test_wait_until_returns_a_falsy_answer_at_once(answer: object) -> None:
    """Only None and False mean "not yet": a count of 0 or an empty list is the value,
    returned at the first call (a second call would fail the test)."""
    answers = iter([answer])
    assert wait_until(lambda: next(answers), timeout=1, what="an answer") == answer


@pytest.mark.parametrize("not_yet", [None, False])
def test_wait_until_keeps_waiting_on_none_and_false_only(not_yet: object) -> None:
    answers = iter([not_yet, not_yet, 0])
    assert wait_until(lambda: next(answers), timeout=1, what="zero") == 0
    with pytest.raises(WaitTimeout, match="waiting for nothing"):
        wait_until(lambda: not_yet, timeout=0.02, what="nothing")


def test_history_rejects_unknown_kinds() -> None:
    with pytest.raises(ValueError, match="unknown history event kind"):
        History().record("client_reqest")


# --- the raw client's decoders --------------------------------------------------------------------


@given(
    st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=12),
    st.lists(st.integers(min_value=1, max_value=17), min_size=1, max_size=50),
)
def test_chunked_decoder_survives_any_split(chunks: list[bytes], cuts: list[int]) -> None:
    wire = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    body, out, position = _Body("chunked"), bytearray(), 0
    for cut in cuts * (len(wire) // sum(cuts) + 1):
        out += body.feed(wire[position : position + cut])
        position += cut
        if position >= len(wire):
            break
    assert bytes(out) == b"".join(chunks)
    assert body.finished


def test_stream_answer_folds_deltas_and_tool_calls() -> None:
    answer = ChatAnswer(status=200)
    frames = [
        {"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "He"}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"content": "llo"}}]},
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "read_file", "arguments": '{"pa'},
                            }
                        ]
                    },
                }
            ],
        },
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'th": 1}'}}]},
                    "finish_reason": "tool_calls",
                }
            ],
        },
    ]
    for frame in frames:
        parse_sse_data(answer, json.dumps(frame))
    parse_sse_data(answer, "[DONE]")
    assert answer.outcome == "success"
    assert answer.text == "Hello"
    assert answer.tool_calls == [{"id": "call_1", "name": "read_file", "arguments": '{"path": 1}'}]
    assert answer.assistant_message()["tool_calls"][0]["id"] == "call_1"


def test_stream_outcomes() -> None:
    cut = ChatAnswer(status=200)
    parse_sse_data(cut, json.dumps({"choices": [{"delta": {"content": "x"}}]}))
    assert cut.outcome == "cut"
    failed = ChatAnswer(status=200)
    parse_sse_data(failed, json.dumps({"error": {"code": "upstream_timeout"}}))
    assert failed.outcome == "error"
    assert ChatAnswer(status=None).outcome == "cut"
    assert ChatAnswer(status=413).outcome == "error"


# --- the visible projection -------------------------------------------------------------------------


def test_a_replayed_block_looks_like_the_plain_message() -> None:
    user = {"role": "user", "content": "hi"}
    plain = [
        user,
        {"role": "assistant", "content": "Let me look.The answer."},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    ]
    replayed = [
        user,
        {"type": "reasoning", "id": "rs_1", "encrypted_content": "T"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Let me look."}],
        },
        {"type": "reasoning", "id": "rs_2", "encrypted_content": "U"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "The answer."}],
        },
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    ]
    assert segments(plain) == segments(replayed)
    assert len(segments(replayed)) == 2


# --- the library ---------------------------------------------------------------------------------


def test_every_scenario_builds_and_fits_a_screen() -> None:
    load_all()
    assert REGISTRY, "no scenarios registered"
    for name, entry in REGISTRY.items():
        scenario = entry.build(Seed(1))
        assert scenario.name == name
        assert entry.doc, f"{name} needs a docstring saying what it shows"
        lines = len(inspect.getsource(entry.build).splitlines())
        assert lines <= 40, f"{name} is {lines} lines; split it (a scenario fits a screen)"


# --- replay expectations on recorded upstream calls -------------------------------------------


class _StubFake:
    def __init__(self, exchanges: list[dict[str, object]]) -> None:
        self._exchanges = exchanges

    def exchanges(self) -> list[dict[str, object]]:
        return self._exchanges


class _StubHarness:
    def __init__(self, exchanges: list[dict[str, object]]) -> None:
        self.fake = _StubFake(exchanges)


def _call(index: int, items: list[dict[str, str]], output: list[object]) -> dict[str, object]:
    return {"index": index, "path": "/v1/responses", "body": {"input": items},
            "continuity": {"replayed": sum(1 for i in items if "encrypted_content" in i)},
            "output": output, "events": []}  # fmt: skip


def _ctx_with_replay(token: str) -> Ctx:
    user = {"role": "user", "content": "hi"}
    said = {"type": "message", "role": "assistant", "content": "Hello"}
    calls = [
        _call(0, [user], [{"type": "reasoning", "id": "rs_1", "encrypted_content": "T1"}, said]),
        _call(1, [user, {"type": "reasoning", "id": "rs_1", "encrypted_content": token}, said,
                  {"role": "user", "content": "more"}], [said]),
    ]  # fmt: skip
    ctx = Ctx(harness=_StubHarness(calls), seed=Seed(1))  # type: ignore[arg-type]
    ctx.turns["t1"] = Turn("t1", "main", {"messages": [user]}, upstream_from=0, upstream_to=1)
    ctx.turns["t2"] = Turn("t2", "main", {"messages": []}, upstream_from=1)
    return ctx


def test_upstream_received_checks_exact_replays() -> None:
    ctx = _ctx_with_replay("T1")
    UpstreamReceived("t2", replayed=[ReplayOf("t1", at=1)], continuity={"replayed": 1}).check(ctx)
    with pytest.raises(AssertionError, match="expected replayed items at \\[2\\]"):
        UpstreamReceived("t2", replayed=[ReplayOf("t1", at=2)]).check(ctx)
    with pytest.raises(AssertionError, match="expected replayed items at \\[\\]"):
        UpstreamReceived("t2", replayed=[]).check(ctx)
    with pytest.raises(AssertionError, match="minted in \\['t1'\\]"):
        UpstreamReceived("t2", replayed=[ReplayOf("t1", at=1)]).check(_ctx_with_replay("T9"))


# --- client-side history steps (no processes) ----------------------------------------------


def _ctx_with_history(*messages: dict[str, object]) -> Ctx:
    ctx = Ctx(harness=None, seed=Seed(1))  # type: ignore[arg-type]
    ctx.conversations["main"] = [dict(m) for m in messages]
    return ctx


@pytest.mark.parametrize(
    ("form", "split", "content"),
    [
        ("string", None, "Hello"),
        ("parts", None, [{"type": "text", "text": "Hello"}]),
        ("parts", 2, [{"type": "text", "text": "He"}, {"type": "text", "text": "llo"}]),
        ("parts", 99, [{"type": "text", "text": "Hello"}, {"type": "text", "text": ""}]),
    ],
)
def test_echo_as_rewrites_text_forms(form: str, split: int | None, content: object) -> None:
    ctx = _ctx_with_history(
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}
    )
    EchoAs(form, split=split).run(ctx)
    assert ctx.history_of("main")[-1] == {"role": "assistant", "content": content}


def test_echo_as_rewrites_empty_content_of_tool_calls() -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    ctx = _ctx_with_history({"role": "assistant", "content": None, "tool_calls": calls})
    EchoAs("empty").run(ctx)
    assert ctx.history_of("main")[-1] == {"role": "assistant", "content": "", "tool_calls": calls}
    EchoAs("absent").run(ctx)
    assert ctx.history_of("main")[-1] == {"role": "assistant", "tool_calls": calls}
    EchoAs("null").run(ctx)
    assert ctx.history_of("main")[-1]["content"] is None


def test_echo_as_refuses_to_drop_text() -> None:
    ctx = _ctx_with_history({"role": "assistant", "content": "Hello"})
    with pytest.raises(AssertionError, match="drop the answer's text"):
        EchoAs("null").run(ctx)
    with pytest.raises(ValueError, match="form must be one of"):
        EchoAs("xml").run(ctx)


def test_branch_continues_from_a_turn_answer_partial_text_included() -> None:
    ctx = _ctx_with_history({"role": "user", "content": "later"})
    asked = [{"role": "user", "content": "hi"}]
    ctx.turns["cut"] = Turn("cut", "main", {"messages": asked}, upstream_from=0)
    ctx.turns["cut"].answer = ChatAnswer(status=200, text="Hel")  # no [DONE]: a cut
    Branch("cut", conv="copy").run(ctx)
    assert ctx.history_of("copy") == [*asked, {"role": "assistant", "content": "Hel"}]
    assert ctx.history_of("main") == [{"role": "user", "content": "later"}]
    ctx.history_of("copy").append({"role": "user", "content": "more"})
    assert ctx.turns["cut"].body["messages"] == asked  # a copy, not the turn's own list
    Branch("cut").run(ctx)
    assert ctx.history_of("main")[-1] == {"role": "assistant", "content": "Hel"}


# --- store integrity and the lifecycle cases --------------------------------------------------


class _StoreHarness:
    """Just what StoreIntegrity reads: whether a relay runs, the cache path, the history."""

    def __init__(self, path: Path, running: bool) -> None:
        self.cache_path = path
        self.running = running
        self.history = History()

    def poll_relay(self) -> bool:
        return self.running


def test_store_integrity_needs_the_relay_down_and_counts_intents(tmp_path: Path) -> None:
    path = tmp_path / "reasoning-cache.sqlite"
    db = sqlite3.connect(path)
    db.execute("create table intents(id)")
    db.execute("insert into intents values ('intent_1')")
    db.commit()
    db.close()
    ctx = Ctx(harness=_StoreHarness(path, running=True), seed=Seed(1))  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="needs the relay down"):
        StoreIntegrity().check(ctx)
    ctx.harness.running = False  # type: ignore[attr-defined]
    StoreIntegrity(intents=1).check(ctx)
    with pytest.raises(AssertionError, match="intents: expected 0, got 1"):
        StoreIntegrity(intents=0).check(ctx)
    assert ctx.harness.history.of("note")[0]["integrity"] == "ok"


def test_lifecycle_cases_cover_every_point_in_both_modes() -> None:
    cases = lifecycle_cases(Seed(5))
    assert sorted(cases) == sorted(
        [(p, True) for p in REQUEST_POINTS]
        + [(p, False) for p in REQUEST_POINTS if p not in SSE_ONLY]
    )
    assert cases != lifecycle_cases(Seed(6))  # the order comes from the seed
