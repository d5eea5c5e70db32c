"""A Chat Completions request relayed to a Responses upstream, JSON or SSE (sans-I/O).

The lifecycle, one transition per input::

    start ──> Begin ──began──> Fence | Poison ──guarded──>   (what must precede forwarding)
      ──> Dispatch ──dispatched──> SendUpstream              (cached: plan + intent first)
    upstream_event ──> frames to queue and flush             (SSE; JSON buffers)
      (cached: Accepted once per send; each event fed to the pipeline's OutputCapture)
      the final event ──> Commit(CaptureResult) ──committed──> the terminal frames, flushed
    upstream_done ──> [DONE] (SSE) / Commit then Respond (JSON) ──> Resolve, Finish
    failed(UpstreamHTTPError) before any event ──> CheckRefusal
      ──refusal(resend)──> SendUpstream once more, without replay
    failed / client_gone ──> Abort, then Fail (a status, or an error frame once streaming)
    abandoned (the shell ends before the pipeline did) ──> Abort

The rules it encodes: a fence or a poison the cache's decision requires is durable before
anything is forwarded, and a failure to write it (or to decide) forwards nothing; the
dispatch intent is committed before anything is sent; the
observation is committed before the client can see the end (terminal chunk, JSON body);
the intent is resolved only after the client took the whole answer; an answer that ends
any other way aborts (the cache poisons its position unless it was committed); a refusal
of replayed state is resent once, and only before the upstream produced anything.
"""

from __future__ import annotations

from typing import Any

from relay.core.capture import ClientProjection, OutputCapture, finish_capture
from relay.core.responses_events import decode
from relay.errors import RelayError, UpstreamHTTPError, UpstreamProtocolError
from relay.pipeline.actions import (
    Abort,
    Accepted,
    Action,
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
from relay.pipeline.base import GuardedPipeline, Phase
from relay.translate.chat_sse import DONE, encode_chunk, encode_error
from relay.translate.events import ChatCompletion
from relay.translate.request_types import TranslatedRequest
from relay.translate.responses_to_chat import project_output, response_to_chat_completion
from relay.translate.stream_converter import ChatStreamConverter, Chunk


class ChatPipeline(GuardedPipeline):
    def __init__(
        self,
        request: TranslatedRequest,
        *,
        request_id: str,
        model: str,
        completion_id: str,
        created: int,
        reasoning_summaries: bool,
    ) -> None:
        self.request = request
        self.request_id = request_id
        self._model = model  # the upstream model name, for the log
        self.cached = False  # the cache's answer to Begin: this generation is observed
        self._capture: OutputCapture | None = None  # the original items (cached)
        self._committed = False  # the observation is committed: its output is known
        self._completion_id = completion_id
        self._created = created
        self._summaries = reasoning_summaries
        self.converter = ChatStreamConverter(
            completion_id=completion_id,
            created=created,
            model=request.client_model,
            include_usage=request.include_usage,
            reasoning_summaries=reasoning_summaries,
            custom_tool_calls=request.custom_tool_calls,
        )
        self.phase = Phase.NEW
        self.streaming = request.stream
        self._answered = False  # an upstream event arrived for the current send
        self._resent = False  # the one resend after a refusal was made
        self._output_flushed = False  # the first output chunk was flushed
        self._sent = ClientProjection()  # what the client is sent (cached streams)
        self._terminal: list[Chunk] = []  # the final event's chunks, held for the commit
        self._completion: ChatCompletion | None = None  # the JSON answer

    # --- inputs -------------------------------------------------------------------------

    # start, began and guarded: GuardedPipeline (Begin, then any guard alone, then this).

    def _decided(self, capture_bytes: int | None, guard: Fence | Poison | None) -> None:
        if capture_bytes is not None:  # observed: the pipeline's own capture, bounded
            self.cached = True
            self._capture = OutputCapture(project=project_output, max_bytes=capture_bytes)

    def _forward(self) -> list[Action]:
        request = self.request
        log = Log("chat_request", {"request_id": self.request_id, "model": self._model,
                                   "stream": request.stream, "shape": request.shape})  # fmt: skip
        if self.cached:
            self.phase = Phase.DISPATCHING
            return [log, Dispatch()]
        return [log, *self._send(dict(request.upstream_body))]

    def dispatched(self, body: dict[str, Any]) -> list[Action]:
        """The cache committed the intent; ``body`` is the upstream body with the replay."""
        self._expect(Phase.DISPATCHING)
        return self._send(body)

    def upstream_event(self, event_type: str, data: dict[str, Any]) -> list[Action]:
        self._expect(Phase.UPSTREAM)
        event = decode(event_type, data)  # once: the capture and the converter read it
        actions: list[Action] = []
        if self._capture is not None:
            if not self._answered:
                actions.append(Accepted())
            self._capture.feed(event)
        self._answered = True
        chunks = self.converter.feed(event)
        if not self.request.stream:
            return actions  # JSON: the answer is built once the stream has ended
        if self.cached:  # what the client got matters to the cache alone
            for chunk in chunks:
                self._sent.feed_chunk(chunk)
        if self.converter.finished:
            self._terminal = chunks
            if self.cached:  # committed before any terminal frame is queued
                return [*actions, self._commit(self._sent)]
            return [*actions, *self._terminal_frames()]
        if chunks:
            actions += self._stream_started_once()
            actions += [Queue(encode_chunk(chunk)) for chunk in chunks]
        if not self._output_flushed and self.converter.output_started:
            # The first output is what the client waits for: out now, not after the rest
            # of this read's events are converted.
            self._output_flushed = True
            actions.append(Flush())
        return actions

    def upstream_done(self) -> list[Action]:
        """The upstream's stream ended (after its terminal event)."""
        if self.phase is Phase.DONE:
            return []
        final = self.converter.final_response
        if final is None:  # the exchange checks for a terminal event; this cannot be trusted
            self._expect(Phase.UPSTREAM)
            return self.failed(
                UpstreamProtocolError("the upstream stream ended without a final response")
            )
        if self.request.stream:
            self._expect(Phase.DELIVERING)
            return [
                *self._stream_started_once(),
                Queue(DONE),
                Flush(crash_point="after_done_frame"),
                *self._delivered(),
                Finish(),
            ]
        self._expect(Phase.UPSTREAM)
        self._completion = response_to_chat_completion(
            final,
            completion_id=self._completion_id,
            created=self._created,
            model=self.request.client_model,
            reasoning_summaries=self._summaries,
            custom_tool_calls=self.request.custom_tool_calls,
        )
        if self.cached:
            return [self._commit(ClientProjection.from_completion(self._completion))]
        self.phase = Phase.DELIVERING
        return [Respond(self._completion)]

    def committed(self) -> list[Action]:
        self._expect(Phase.COMMITTING)
        self._committed = True
        self.phase = Phase.DELIVERING
        if not self.request.stream:
            assert self._completion is not None
            return [Respond(self._completion)]
        return self._terminal_frames()

    def responded(self) -> list[Action]:
        """The JSON answer reached the client."""
        self._expect(Phase.DELIVERING)
        return [Finish(), *self._delivered()]

    def refusal(self, resend: dict[str, Any] | None, error: RelayError) -> list[Action]:
        """The cache's verdict on an error answer: ``resend`` is the request without
        replay to send once more, else ``error`` is what the client gets."""
        self._expect(Phase.CHECKING_REFUSAL)
        if resend is not None:
            self._resent = True
            return self._send(resend)
        return self._fail(error)

    def failed(self, error: RelayError) -> list[Action]:
        """The generation failed (upstream error, broken stream, timeout, a commit). An
        error answer to a request that may have replayed, before any output and before
        any resend, is first checked for a refusal of the replayed state."""
        if self.phase is Phase.DONE:
            return []
        if (
            self.cached
            and isinstance(error, UpstreamHTTPError)
            and self.phase is Phase.UPSTREAM
            and not (self._answered or self._resent)
        ):
            self.phase = Phase.CHECKING_REFUSAL
            return [CheckRefusal(error)]
        return self._fail(error)

    def _fail(self, error: RelayError) -> list[Action]:
        self.phase = Phase.DONE
        actions = self._abort(error.code or "failed")
        frame = encode_error(error.envelope()) if self.request.stream else None
        return [*actions, Fail(error, frame)]

    def client_gone(self, frames: int) -> list[Action]:
        """The client left (``frames`` it had taken); nothing more goes out."""
        if self.phase is Phase.DONE:
            return []
        self.phase = Phase.DONE
        log = Log("client_disconnected", {"request_id": self.request_id, "frames": frames})
        return [log, *self._abort("client_disconnected")]

    def abandoned(self) -> list[Action]:
        """The shell ended first (an unexpected error, a cancelled task): the generation
        ends undelivered."""
        if self.phase is Phase.DONE:
            return []
        self.phase = Phase.DONE
        return self._abort("unfinished")

    # --- transitions --------------------------------------------------------------------

    def _abort(self, reason: str) -> list[Action]:
        return [Abort(reason, poison=not self._committed)] if self.cached else []

    def _commit(self, sent: ClientProjection) -> Commit:
        """The capture's decision against what the client is sent, to commit before the
        client can see the end."""
        assert self._capture is not None
        self.phase = Phase.COMMITTING
        return Commit(finish_capture(self._capture, sent))

    def _send(self, body: dict[str, Any]) -> list[Action]:
        self.phase = Phase.UPSTREAM
        self._answered = False
        return [SendUpstream(body, buffered=not self.request.stream)]

    def _terminal_frames(self) -> list[Action]:
        self.phase = Phase.DELIVERING
        chunks = self._terminal
        actions: list[Action] = [StartDelivery(), *self._stream_started_once()]
        actions += [Queue(encode_chunk(chunk)) for chunk in chunks[:-1]]
        if chunks:
            actions.append(Queue(encode_chunk(chunks[-1]), crash_point="before_terminal_frame"))
        # The terminal frames go out before anything else happens.
        actions.append(Flush(crash_point="after_terminal_frame"))
        return actions

    def _delivered(self) -> list[Action]:
        self.phase = Phase.DONE
        done = Log("chat_done", {"request_id": self.request_id,
                                 "finish": self.converter.finish_reason})  # fmt: skip
        return [Resolve(), done] if self.cached else [done]
