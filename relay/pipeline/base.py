"""What every pipeline shares: the inputs a shell may feed, refused unless a pipeline
accepts them in its current phase."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from relay.errors import InternalSignal, RelayError
from relay.pipeline.actions import Action, Begin, Fence, Flush, Poison, StartStream


class Phase(StrEnum):
    NEW = "new"
    BEGINNING = "beginning"  # the cache decides: cached, or what to write before forwarding
    GUARDING = "guarding"  # a fence or a poison is written before anything is forwarded
    DISPATCHING = "dispatching"  # the cache plans and records the intent
    UPSTREAM = "upstream"  # the generation is being received
    CHECKING_REFUSAL = "checking_refusal"  # an error answer: was it a refusal of replay?
    COMMITTING = "committing"  # the observation is being committed
    DELIVERING = "delivering"  # the terminal frames or answer go to the client
    DONE = "done"  # finished, failed or abandoned: every later input is ignored


class PipelineStateError(InternalSignal):
    """An input the pipeline's state does not accept: a bug in the shell driving it."""


class Pipeline:
    """The inputs of a request pipeline. Each returns the actions to perform next; the
    defaults refuse the input (a pipeline overrides those its requests can see)."""

    phase = Phase.NEW
    streaming = False  # the answer is an event stream (a subclass sets it per request)
    _stream_started = False  # StartStream was returned

    def start(self) -> list[Action]:
        raise NotImplementedError

    def began(self, capture_bytes: int | None, guard: Fence | Poison | None) -> list[Action]:
        return self._refuse("began")

    def guarded(self) -> list[Action]:
        return self._refuse("guarded")

    def dispatched(self, body: dict[str, Any]) -> list[Action]:
        return self._refuse("dispatched")

    def upstream_event(self, event_type: str, data: dict[str, Any]) -> list[Action]:
        return self._refuse("upstream_event")

    def batch_done(self) -> list[Action]:
        """Every event of one upstream read was handled: what a stream queued goes out."""
        return [Flush()] if self.streaming and self.phase is Phase.UPSTREAM else []

    def upstream_done(self) -> list[Action]:
        return self._refuse("upstream_done")

    def committed(self) -> list[Action]:
        return self._refuse("committed")

    def responded(self) -> list[Action]:
        return self._refuse("responded")

    def refusal(self, resend: dict[str, Any] | None, error: RelayError) -> list[Action]:
        return self._refuse("refusal")

    def failed(self, error: RelayError) -> list[Action]:
        raise NotImplementedError

    def client_gone(self, frames: int) -> list[Action]:
        raise NotImplementedError

    def abandoned(self) -> list[Action]:
        """The shell is ending (any exit path: an answer sent, an error raised, a task
        cancelled): what must still happen when the pipeline did not reach its end."""
        return []

    def _stream_started_once(self) -> list[Action]:
        if self._stream_started:
            return []
        self._stream_started = True
        return [StartStream()]

    def _expect(self, *phases: Phase) -> None:
        if self.phase not in phases:
            raise PipelineStateError(
                f"input not accepted in phase {self.phase.value} (expected "
                f"{' or '.join(p.value for p in phases)})"
            )

    def _refuse(self, name: str) -> list[Action]:
        raise PipelineStateError(f"{type(self).__name__} takes no {name} input")


class GuardedPipeline(Pipeline):
    """A pipeline that opens with the cache's decision (``Begin``) and forwards only once
    the guard it asks for (a ``Fence`` or ``Poison``, performed alone) is durable: the
    ordering rule lives here once, for the chat pipeline and the passthrough alike."""

    def start(self) -> list[Action]:
        self._expect(Phase.NEW)
        self.phase = Phase.BEGINNING
        return [Begin()]

    def began(self, capture_bytes: int | None, guard: Fence | Poison | None) -> list[Action]:
        """The cache's decision: ``capture_bytes`` (the capture's bound) when this
        generation is observed, else ``None``; ``guard``, what must be written first."""
        self._expect(Phase.BEGINNING)
        self._decided(capture_bytes, guard)
        if guard is not None:
            self.phase = Phase.GUARDING
            return [guard]
        return self._forward()

    def guarded(self) -> list[Action]:
        """The fence or poison is durable: the request may be forwarded."""
        self._expect(Phase.GUARDING)
        return self._forward()

    def _decided(self, capture_bytes: int | None, guard: Fence | Poison | None) -> None:
        """Take in the decision before anything follows it (a pipeline may refuse one)."""

    def _forward(self) -> list[Action]:
        """What forwards the request (nothing must precede it any more)."""
        raise NotImplementedError
