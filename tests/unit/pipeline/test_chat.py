"""relay.pipeline.chat as transcripts: inputs in, the exact actions out, no sockets.

Each test drives a ChatPipeline the way the chat handler's shell does and compares the
actions with the expected list (mitmproxy's Playbook style). The orders that matter are
spelt out: the cache's decision (Begin) first and any fence or poison it requires before
anything is forwarded, a failure there forwarding nothing; the intent before the send, the observation before the terminal frame, the
resolve after the client took the end, a failure's abort before its answer, and the one
resend after a refusal of replayed state. A property test then drives random event
splits and failure points and checks those orders on every transcript.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.errors import StoreFull, UpstreamError, UpstreamHTTPError
from relay.pipeline.actions import (
    Abort,
    Accepted,
    Action,
    Begin,
    CheckRefusal,
    Commit,
    Dispatch,
    Fail,
    Fence,
    Finish,
    Flush,
    Log,
    Poison,
    Queue,
    Resolve,
    Respond,
    SendUpstream,
    StartDelivery,
)
from relay.pipeline.base import Phase, PipelineStateError
from relay.pipeline.chat import ChatPipeline
from relay.settings.model_alias import ModelAlias
from relay.translate.chat_sse import DONE, encode_error
from relay.translate.request import translate_request

GPT5 = ModelAlias("gpt-5", "gpt-5")
USAGE = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}


CAPTURE_BYTES = 1 << 20  # the capture's bound in a cached pipeline (RELAY_MAX_ENTRY_BYTES)


def fresh(*, stream: bool) -> ChatPipeline:
    body = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    request = translate_request(body, GPT5, reasoning_summaries=False)
    return ChatPipeline(request, request_id="req_1", model="gpt-5",
                        completion_id="chatcmpl-1", created=7,
                        reasoning_summaries=False)  # fmt: skip


def begun(*, stream: bool, cached: bool) -> tuple[ChatPipeline, list[Action]]:
    """A pipeline past its Begin (the cache's decision: cached or not, no guard), and the
    actions that decision returned."""
    p = fresh(stream=stream)
    assert p.start() == [Begin()]
    return p, p.began(CAPTURE_BYTES if cached else None, None)


def pipeline(*, stream: bool, cached: bool) -> ChatPipeline:
    return begun(stream=stream, cached=cached)[0]


def ev(event_type: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return event_type, {"type": event_type, "sequence_number": 0, **fields}


MESSAGE = {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
           "content": [{"type": "output_text", "text": "Hello", "annotations": []}]}  # fmt: skip
REASONING = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAAA-x"}


def response(status: str, *output: dict[str, Any]) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "created_at": 1, "status": status,
            "model": "gpt-5-2025-08-07", "output": list(output), "usage": USAGE}  # fmt: skip


EVENTS = [
    ev("response.created", response=response("in_progress")),
    ev("response.output_item.added", output_index=0, item={**REASONING, "encrypted_content": None}),
    ev("response.output_item.done", output_index=0, item=REASONING),
    ev("response.output_item.added", output_index=1,
       item={**MESSAGE, "status": "in_progress", "content": []}),
    ev("response.output_text.delta", item_id="msg_1", output_index=1, content_index=0,
       delta="Hel", logprobs=[]),
    ev("response.output_text.delta", item_id="msg_1", output_index=1, content_index=0,
       delta="lo", logprobs=[]),
    ev("response.output_item.done", output_index=1, item=MESSAGE),
    ev("response.completed", response=response("completed", REASONING, MESSAGE)),
]  # fmt: skip
BODY = {"model": "gpt-5", "input": [], "stream": True}
REFUSED = UpstreamHTTPError(
    400,
    {"error": {"message": "The encrypted content <redacted> could not be verified.",
               "type": "invalid_request_error", "param": None,
               "code": "invalid_encrypted_content"}},
)  # fmt: skip


def chunks_of(actions: list[Action]) -> list[bytes]:
    return [a.frame for a in actions if isinstance(a, Queue)]


def kinds(actions: list[Action]) -> list[str]:
    return [type(a).__name__ for a in actions]


def feed_all(p: ChatPipeline, events: list[tuple[str, dict[str, Any]]]) -> list[Action]:
    actions: list[Action] = []
    for event_type, data in events:
        actions += p.upstream_event(event_type, data)
    return actions


# --- the happy paths ----------------------------------------------------------------------


def test_uncached_stream() -> None:
    p, start = begun(stream=True, cached=False)
    assert start[0] == Log("chat_request", {"request_id": "req_1", "model": "gpt-5",
                                            "stream": True, "shape": "chat"})  # fmt: skip
    assert isinstance(start[1], SendUpstream) and not start[1].buffered
    assert start[1].body == dict(p.request.upstream_body)
    assert kinds(p.upstream_event(*EVENTS[0])) == ["StartStream", "Queue"]  # the role chunk
    assert p.upstream_event(*EVENTS[1]) == []
    assert p.upstream_event(*EVENTS[2]) == []
    assert p.upstream_event(*EVENTS[3]) == []
    first = p.upstream_event(*EVENTS[4])
    assert kinds(first) == ["Queue", "Flush"]  # the first output goes out at once
    assert kinds(p.upstream_event(*EVENTS[5])) == ["Queue"]
    assert p.batch_done() == [Flush()]
    assert p.upstream_event(*EVENTS[6]) == []
    terminal = p.upstream_event(*EVENTS[7])
    assert kinds(terminal) == ["StartDelivery", "Queue", "Flush"]
    done = p.upstream_done()
    assert done == [
        Queue(DONE),
        Flush(crash_point="after_done_frame"),
        Log("chat_done", {"request_id": "req_1", "finish": "stop"}),
        Finish(),
    ]
    assert p.phase is Phase.DONE


def test_uncached_terminal_frames_carry_their_crash_points() -> None:
    p = pipeline(stream=True, cached=False)
    feed_all(p, EVENTS[:-1])
    terminal = p.upstream_event(*EVENTS[-1])
    assert terminal[0] == StartDelivery()
    queued = terminal[-2]
    assert isinstance(queued, Queue)
    assert terminal[-2:] == [
        Queue(queued.frame, crash_point="before_terminal_frame"),
        Flush(crash_point="after_terminal_frame"),
    ]
    assert b'"finish_reason":"stop"' in chunks_of(terminal)[-1]


def test_cached_stream_commits_before_any_terminal_frame() -> None:
    p, start = begun(stream=True, cached=True)
    assert kinds(start) == ["Log", "Dispatch"]
    assert p.dispatched(BODY) == [SendUpstream(BODY, buffered=False)]
    actions = feed_all(p, EVENTS[:-1])
    assert [a for a in actions if isinstance(a, Accepted)] == [Accepted()]  # once per send
    assert actions[0] == Accepted()
    final = p.upstream_event(*EVENTS[-1])
    assert kinds(final) == ["Commit"]  # nothing queued before the commit
    commit = final[-1]
    assert isinstance(commit, Commit)
    # The pipeline's own capture decided it: the reasoning and message, admitted.
    assert commit.result.kind == "admit"
    assert commit.result.output == (REASONING, MESSAGE)
    terminal = p.committed()
    assert kinds(terminal) == ["StartDelivery", "Queue", "Flush"]
    assert terminal[-1] == Flush(crash_point="after_terminal_frame")
    assert p.upstream_done() == [
        Queue(DONE),
        Flush(crash_point="after_done_frame"),
        Resolve(),  # only after the client took [DONE]
        Log("chat_done", {"request_id": "req_1", "finish": "stop"}),
        Finish(),
    ]


def test_cached_json_commits_then_responds_then_resolves() -> None:
    p = pipeline(stream=False, cached=True)
    assert p.dispatched(BODY) == [SendUpstream(BODY, buffered=True)]
    actions = feed_all(p, EVENTS)
    assert actions == [Accepted()]  # a JSON answer is not streamed
    assert p.batch_done() == []
    commit = p.upstream_done()
    assert kinds(commit) == ["Commit"]
    assert commit[0].result.kind == "admit"  # type: ignore[union-attr]
    respond = p.committed()
    assert kinds(respond) == ["Respond"]
    answer = respond[0].answer  # type: ignore[union-attr]
    assert answer["choices"][0]["message"]["content"] == "Hello"
    assert answer["id"] == "chatcmpl-1" and answer["created"] == 7
    assert p.responded() == [
        Finish(),
        Resolve(),
        Log("chat_done", {"request_id": "req_1", "finish": "stop"}),
    ]


def test_uncached_json_responds_without_a_commit() -> None:
    p = pipeline(stream=False, cached=False)
    assert feed_all(p, EVENTS) == []
    assert kinds(p.upstream_done()) == ["Respond"]
    assert kinds(p.responded()) == ["Finish", "Log"]


# --- failures -------------------------------------------------------------------------------


def test_a_failed_commit_aborts_and_sends_no_terminal_frame() -> None:
    p = pipeline(stream=True, cached=True)
    p.dispatched(BODY)
    feed_all(p, EVENTS)
    error = StoreFull("reasoning cache x: commit failed (SQLITE_FULL)")
    assert p.failed(error) == [
        Abort("cache_unavailable"),
        Fail(error, encode_error(error.envelope())),
    ]
    assert p.upstream_done() == []  # later inputs are ignored
    assert p.failed(error) == []


@pytest.mark.parametrize("after", [0, 1, 5], ids=["before_any_event", "after_role", "mid_text"])
def test_an_upstream_cut_aborts_then_fails(after: int) -> None:
    p = pipeline(stream=True, cached=True)
    p.dispatched(BODY)
    feed_all(p, EVENTS[:after])
    cut = UpstreamError("the upstream connection closed mid-stream")
    # The shell sends the frame only when the answer's headers are already on the wire.
    assert p.failed(cut) == [Abort("bad_gateway"), Fail(cut, encode_error(cut.envelope()))]
    assert p.phase is Phase.DONE


def test_a_json_failure_has_no_frame() -> None:
    p = pipeline(stream=False, cached=False)
    cut = UpstreamError("unreachable")
    assert p.failed(cut) == [Fail(cut, None)]


def test_client_gone_before_the_terminal_frame() -> None:
    p = pipeline(stream=True, cached=True)
    p.dispatched(BODY)
    feed_all(p, EVENTS[:5])
    assert p.client_gone(2) == [
        Log("client_disconnected", {"request_id": "req_1", "frames": 2}),
        Abort("client_disconnected"),
    ]
    assert p.upstream_done() == [] and p.failed(UpstreamError("x")) == []
    assert p.client_gone(2) == []


def json_committed() -> ChatPipeline:
    """A cached JSON answer whose observation was just committed."""
    p = pipeline(stream=False, cached=True)
    p.dispatched(BODY)
    feed_all(p, EVENTS)
    p.upstream_done()
    p.committed()
    return p


def test_a_json_answer_the_client_left_before_taking() -> None:
    p = json_committed()
    # Committed: the cache resolves the intent without poisoning (CacheSession.abort).
    assert p.client_gone(0) == [
        Log("client_disconnected", {"request_id": "req_1", "frames": 0}),
        Abort("client_disconnected", poison=False),
    ]


# --- a refused replay -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["sse", "json"])
def test_a_refusal_is_checked_then_resent_once(stream: bool) -> None:
    p = pipeline(stream=stream, cached=True)
    p.dispatched(BODY)
    assert p.failed(REFUSED) == [CheckRefusal(REFUSED)]
    plain = {"model": "gpt-5", "input": [{"role": "user", "content": "hi"}]}
    assert p.refusal(plain, REFUSED) == [SendUpstream(plain, buffered=not stream)]
    # The resend is an ordinary request: its own failure is the answer.
    again = UpstreamHTTPError(400, REFUSED.envelope())
    frame = encode_error(again.envelope()) if stream else None
    assert p.failed(again) == [Abort("invalid_encrypted_content"), Fail(again, frame)]


def test_a_resend_that_succeeds_is_delivered_as_usual() -> None:
    p = pipeline(stream=True, cached=True)
    p.dispatched(BODY)
    p.failed(REFUSED)
    p.refusal({"input": []}, REFUSED)
    feed_all(p, EVENTS[:-1])
    assert kinds(p.upstream_event(*EVENTS[-1])) == ["Commit"]
    assert kinds(p.committed())[-1] == "Flush"
    assert Resolve() in p.upstream_done()


def test_not_a_refusal_fails_with_the_original_error() -> None:
    p = pipeline(stream=True, cached=True)
    p.dispatched(BODY)
    p.failed(REFUSED)
    assert p.refusal(None, REFUSED) == [
        Abort("invalid_encrypted_content"),
        Fail(REFUSED, encode_error(REFUSED.envelope())),
    ]


def test_an_error_after_output_or_without_a_cache_is_never_checked() -> None:
    answered = pipeline(stream=True, cached=True)
    answered.dispatched(BODY)
    answered.upstream_event(*EVENTS[0])
    assert kinds(answered.failed(REFUSED)) == ["Abort", "Fail"]
    uncached = pipeline(stream=True, cached=False)
    assert kinds(uncached.failed(REFUSED)) == ["Fail"]


def test_a_resend_is_accepted_on_its_own_first_event() -> None:
    p = pipeline(stream=True, cached=True)
    p.dispatched(BODY)
    p.failed(REFUSED)
    p.refusal({"input": []}, REFUSED)
    assert p.upstream_event(*EVENTS[0])[0] == Accepted()
    assert Accepted() not in p.upstream_event(*EVENTS[1])


def test_a_store_failure_at_dispatch_sends_nothing() -> None:
    p = pipeline(stream=True, cached=True)
    error = StoreFull("reasoning cache x: record the dispatch intent failed (SQLITE_FULL)")
    assert kinds(p.failed(error)) == ["Abort", "Fail"]


@pytest.mark.parametrize(
    "misuse",
    [
        lambda p: p.dispatched(BODY),  # not dispatching
        lambda p: p.committed(),
        lambda p: p.responded(),
        lambda p: p.refusal(None, REFUSED),
        lambda p: p.upstream_event(*EVENTS[0]),
    ],
)
def test_inputs_out_of_order_are_refused(misuse: Any) -> None:
    with pytest.raises(PipelineStateError, match="phase new"):
        misuse(fresh(stream=True))


def test_inputs_before_the_cache_decided_are_refused() -> None:
    p = fresh(stream=True)
    p.start()
    with pytest.raises(PipelineStateError, match="phase beginning"):
        p.dispatched(BODY)
    with pytest.raises(PipelineStateError, match="phase beginning"):
        p.guarded()
    p.began(None, None)
    with pytest.raises(PipelineStateError, match="phase upstream"):
        p.began(None, None)


# --- the cache's decision, before anything is forwarded ------------------------------------


@pytest.mark.parametrize("guard", [Fence(), Poison()], ids=["fence", "poison"])
@pytest.mark.parametrize("stream", [True, False], ids=["sse", "json"])
def test_a_guard_is_written_before_anything_is_forwarded(
    guard: Fence | Poison, stream: bool
) -> None:
    p = fresh(stream=stream)
    assert p.start() == [Begin()]
    assert p.began(None, guard) == [guard]  # alone: nothing follows until it is durable
    assert p.phase is Phase.GUARDING
    assert p.guarded() == [
        Log("chat_request", {"request_id": "req_1", "model": "gpt-5", "stream": stream,
                             "shape": "chat"}),
        SendUpstream(dict(p.request.upstream_body), buffered=not stream),
    ]  # fmt: skip


@pytest.mark.parametrize("at", ["begin", "guard"])
def test_a_failed_decision_or_guard_forwards_nothing(at: str) -> None:
    p = fresh(stream=True)
    p.start()
    if at == "guard":
        p.began(None, Fence())
    error = StoreFull("reasoning cache x: the fence could not be written (SQLITE_FULL)")
    # Nothing was sent and nothing is cached: the error is the answer, and the end.
    assert p.failed(error) == [Fail(error, encode_error(error.envelope()))]
    assert p.phase is Phase.DONE
    assert p.upstream_done() == [] and p.failed(error) == []  # later inputs are ignored


def test_a_cached_decision_dispatches_before_the_send() -> None:
    p = fresh(stream=True)
    p.start()
    assert kinds(p.began(CAPTURE_BYTES, None)) == ["Log", "Dispatch"]
    assert p.cached and p.phase is Phase.DISPATCHING
    assert p.dispatched(BODY) == [SendUpstream(BODY, buffered=False)]


# --- the shell's ending -------------------------------------------------------------------


def test_an_abandoned_generation_is_aborted_once() -> None:
    p = pipeline(stream=True, cached=True)
    p.dispatched(BODY)
    feed_all(p, EVENTS[:3])
    assert p.abandoned() == [Abort("unfinished")]
    assert p.abandoned() == []  # the pipeline ended: nothing more
    assert p.failed(UpstreamError("late")) == []


def test_an_abandoned_committed_generation_is_not_poisoned() -> None:
    p = pipeline(stream=True, cached=True)
    p.dispatched(BODY)
    feed_all(p, EVENTS)
    p.committed()
    assert p.abandoned() == [Abort("unfinished", poison=False)]


def test_a_finished_or_uncached_pipeline_abandons_nothing() -> None:
    done = json_committed()
    done.responded()
    assert done.abandoned() == []
    uncached = pipeline(stream=True, cached=False)
    feed_all(uncached, EVENTS[:2])
    assert uncached.abandoned() == []


# --- the orders hold on every transcript ----------------------------------------------------

Outcome = st.sampled_from(["done", "cut", "client_gone", "commit_fails", "refused"])


@given(stream=st.booleans(), cached=st.booleans(), cut_at=st.integers(0, len(EVENTS)),
       outcome=Outcome, batch_every=st.integers(1, 4),
       guard=st.sampled_from([None, Fence(), Poison()]))  # fmt: skip
def test_every_transcript_keeps_the_orders(
    stream: bool, cached: bool, cut_at: int, outcome: str, batch_every: int,
    guard: Fence | Poison | None,
) -> None:  # fmt: skip
    if cached and guard is not None:
        guard = None  # the cache guards only a request it does not observe
    p = fresh(stream=stream)
    log: list[Action] = [*p.start(), *p.began(CAPTURE_BYTES if cached else None, guard)]
    if guard is not None:
        log += p.guarded()
    if cached:
        log += p.dispatched(BODY)
    if outcome == "refused" and cached:
        log += p.failed(REFUSED)
        log += p.refusal(BODY, REFUSED)
    events = EVENTS if outcome in ("done", "commit_fails", "refused") else EVENTS[:cut_at]
    for index, (event_type, data) in enumerate(events):
        log += p.upstream_event(event_type, data)
        if index % batch_every == 0:
            log += p.batch_done()
        if isinstance(log[-1], Commit):
            if outcome == "commit_fails":
                log += p.failed(StoreFull("commit failed (SQLITE_FULL)"))
            else:
                log += p.committed()
    if outcome == "cut":
        log += p.failed(UpstreamError("cut"))
    elif outcome == "client_gone":
        log += p.client_gone(0)
    elif p.phase is not Phase.DONE:
        log += p.upstream_done()
        if isinstance(log[-1], Commit):
            log += p.failed(StoreFull("x")) if outcome == "commit_fails" else p.committed()
        if isinstance(log[-1], Respond):
            log += p.responded()
    _check_orders(log, cached=cached, stream=stream)


def _check_orders(log: list[Action], *, cached: bool, stream: bool) -> None:
    names = kinds(log)
    sends = [i for i, a in enumerate(log) if isinstance(a, SendUpstream)]
    assert 1 <= len(sends) <= 2
    assert log[0] == Begin()  # the cache decides before anything else
    guards = [i for i, a in enumerate(log) if isinstance(a, Fence | Poison)]
    assert len(guards) <= 1 and all(i < sends[0] for i in guards)
    if cached:
        assert names.index("Dispatch") < sends[0]
        assert Dispatch() in log and not guards
    if len(sends) == 2:  # a resend only after a refusal was checked, before any output
        assert "CheckRefusal" in names[sends[0] : sends[1]]
        assert "Accepted" not in names[: sends[1]]
    if "Commit" in names:
        commit = names.index("Commit")
        terminal = [i for i, a in enumerate(log) if isinstance(a, Queue | Respond)
                    and (isinstance(a, Respond) or a.crash_point == "before_terminal_frame")]  # fmt: skip
        assert all(i > commit for i in terminal), "a terminal frame before the commit"
    if "Resolve" in names:
        resolve = names.index("Resolve")
        assert cached
        delivered = "Respond" if not stream else "Flush"
        assert delivered in names[:resolve]
        assert not ({"Abort", "Fail"} & set(names)), "resolved and aborted"
        if stream:
            assert log[resolve - 1] == Flush(crash_point="after_done_frame")
    if "Fail" in names or "Abort" in names:
        assert "Resolve" not in names
        if "Fail" in names:
            fail = names.index("Fail")
            assert fail == len(names) - 1, "nothing after a failure's answer"
            if cached:
                assert names[fail - 1] == "Abort"
    if stream and "StartStream" in names:
        assert names.count("StartStream") == 1
        first_queue = names.index("Queue")
        assert names.index("StartStream") < first_queue
    assert chunks_of(log).count(DONE) <= 1
    assert not any(isinstance(a, StartDelivery) for a in log) or stream
    if Finish() in log and stream and "Fail" not in names:
        assert chunks_of(log)[-1] == DONE
