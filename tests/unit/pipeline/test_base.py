"""relay.pipeline.base: the inputs every pipeline shares, refused unless accepted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from relay.errors import RelayError, UpstreamFailed
from relay.pipeline.actions import Action, Flush, StartStream
from relay.pipeline.base import Phase, Pipeline, PipelineStateError


class Bare(Pipeline):
    """A pipeline that overrides only what it must: every shared default shows."""

    def __init__(self, *, streaming: bool) -> None:
        self.streaming = streaming

    def start(self) -> list[Action]:
        self._expect(Phase.NEW)
        self.phase = Phase.UPSTREAM
        return self._stream_started_once()

    def failed(self, error: RelayError) -> list[Action]:
        return []

    def client_gone(self, frames: int) -> list[Action]:
        return []


REFUSED: list[tuple[str, Callable[[Pipeline], list[Action]]]] = [
    ("dispatched", lambda p: p.dispatched({})),
    ("upstream_event", lambda p: p.upstream_event("response.created", {})),
    ("upstream_done", lambda p: p.upstream_done()),
    ("committed", lambda p: p.committed()),
    ("responded", lambda p: p.responded()),
    ("refusal", lambda p: p.refusal(None, UpstreamFailed("x"))),
]


@pytest.mark.parametrize(("name", "feed"), REFUSED, ids=[n for n, _ in REFUSED])
def test_an_input_a_pipeline_does_not_take_is_a_state_error(
    name: str, feed: Callable[[Pipeline], list[Action]]
) -> None:
    with pytest.raises(PipelineStateError, match=f"^Bare takes no {name} input$"):
        feed(Bare(streaming=True))


def test_the_batch_flush_is_for_a_stream_receiving_its_upstream() -> None:
    stream, json_answer = Bare(streaming=True), Bare(streaming=False)
    assert stream.batch_done() == []  # not started: nothing is queued yet
    stream.start()
    json_answer.start()
    assert stream.batch_done() == [Flush()]
    assert json_answer.batch_done() == []  # a JSON answer is sent whole, at the end
    for phase in Phase:
        stream.phase = phase
        assert stream.batch_done() == ([Flush()] if phase is Phase.UPSTREAM else [])


def test_the_stream_starts_once() -> None:
    pipeline = Bare(streaming=True)
    assert pipeline.start() == [StartStream()]
    assert pipeline._stream_started_once() == []
    assert Bare(streaming=True)._stream_started_once() == [StartStream()]  # per pipeline


def test_an_input_in_the_wrong_phase_names_the_phase_and_the_expected_ones() -> None:
    pipeline = Bare(streaming=False)
    pipeline.start()
    with pytest.raises(PipelineStateError, match="^input not accepted in phase upstream "
                       r"\(expected new\)$"):  # fmt: skip
        pipeline.start()
    with pytest.raises(PipelineStateError, match=r"\(expected new or committing\)$"):
        pipeline._expect(Phase.NEW, Phase.COMMITTING)
    pipeline._expect(Phase.DONE, Phase.UPSTREAM)  # accepted: no error


def test_a_pipeline_must_say_how_it_starts_fails_and_loses_its_client() -> None:
    pipeline: Any = Pipeline()
    for call in (pipeline.start, lambda: pipeline.failed(UpstreamFailed("x")),
                 lambda: pipeline.client_gone(0)):  # fmt: skip
        with pytest.raises(NotImplementedError):
            call()


def test_the_phases_are_the_documented_states() -> None:
    assert [p.value for p in Phase] == [
        "new", "beginning", "guarding", "dispatching", "upstream", "checking_refusal",
        "committing", "delivering", "done",
    ]  # fmt: skip
    assert Pipeline.phase is Phase.NEW
