"""POST /v1/responses relayed as sent (sans-I/O): events forwarded as Responses SSE, or
the final ``response`` object for a JSON call.

The lifecycle::

    start ──> Begin ──began──> [Fence ──guarded──>] SendUpstream
    upstream_event ──> the event forwarded (SSE; JSON keeps the terminal's response)
    upstream_done ──> Flush, Finish (SSE) / Respond, Finish (JSON)
    failed / client_gone ──> Fail (a status, or an error frame once streaming) / a log

The cache cannot observe these generations, so it never gets a session: its decision
(``Begin``) asks for the fence of the scopes they may extend (design §7) when there is
something to protect, and the body goes upstream only once that fence is durable; a
failure to write it forwards nothing. An ``error`` event is forwarded, flushed, and then
ends the exchange (``Stop``): its failure needs no second error frame.
"""

from __future__ import annotations

from typing import Any

from relay.core.responses_events import ErrorEvent, Terminal, decode
from relay.errors import RelayError, UpstreamFailed, UpstreamProtocolError
from relay.pipeline.actions import (
    Action,
    Fail,
    Fence,
    Finish,
    Flush,
    Log,
    Poison,
    Queue,
    Respond,
    SendUpstream,
    Stop,
)
from relay.pipeline.base import GuardedPipeline, Phase, PipelineStateError
from relay.translate.responses_sse import encode_event


class ResponsesPassthrough(GuardedPipeline):
    def __init__(self, body: dict[str, Any], *, request_id: str, stream: bool) -> None:
        self.body = body
        self.request_id = request_id
        self.streaming = stream
        self._forwarded_error = False  # the upstream's own error event went to the client
        self._final: dict[str, Any] | None = None  # JSON: the terminal event's response

    # start, began and guarded: GuardedPipeline (Begin, then any Fence alone, then this).

    def _decided(self, capture_bytes: int | None, guard: Fence | Poison | None) -> None:
        """Never a session; a fence to write first, or nothing (the cache off with nothing
        to protect)."""
        if capture_bytes is not None or isinstance(guard, Poison):
            # Only an observed generation, or a chat one's bypass, has either.
            raise PipelineStateError("the passthrough is never observed: a fence or nothing")

    def _forward(self) -> list[Action]:
        self.phase = Phase.UPSTREAM
        log = Log("responses_passthrough", {"request_id": self.request_id,
                                            "model": self.body.get("model"),
                                            "stream": self.streaming})  # fmt: skip
        return [log, SendUpstream(self.body, buffered=not self.streaming)]

    def upstream_event(self, event_type: str, data: dict[str, Any]) -> list[Action]:
        self._expect(Phase.UPSTREAM)
        event = decode(event_type, data)
        failure = (
            UpstreamFailed(str(event.message or "the upstream reported an error"))
            if isinstance(event, ErrorEvent)
            else None
        )
        if not self.streaming:
            if failure is not None:
                return [Stop(failure)]
            response = event.response if isinstance(event, Terminal) else None
            if isinstance(response, dict):
                self._final = response
            return []
        actions = self._stream_started_once()
        # Forwarded as it came (the original payload, not the decoded value): same bytes.
        actions.append(Queue(encode_event(event_type, data)))
        if failure is not None:  # the upstream's own failure: forwarded, then the end
            self._forwarded_error = True
            actions += [Flush(), Stop(failure)]
        return actions

    def upstream_done(self) -> list[Action]:
        if self.phase is Phase.DONE:
            return []
        self._expect(Phase.UPSTREAM)
        self.phase = Phase.DELIVERING
        if self.streaming:
            self.phase = Phase.DONE
            return [Flush(), Finish()]
        if self._final is None:
            return self.failed(
                UpstreamProtocolError("the upstream stream ended without a final response")
            )
        return [Respond(self._final)]

    def responded(self) -> list[Action]:
        self._expect(Phase.DELIVERING)
        self.phase = Phase.DONE
        return [Finish()]

    def failed(self, error: RelayError) -> list[Action]:
        if self.phase is Phase.DONE:
            return []
        self.phase = Phase.DONE
        if not self.streaming or self._forwarded_error:
            return [Fail(error)]
        return [Fail(error, encode_event("error", error.envelope()["error"]))]

    def client_gone(self, frames: int) -> list[Action]:
        if self.phase is Phase.DONE:
            return []
        self.phase = Phase.DONE
        return [Log("client_disconnected", {"request_id": self.request_id, "frames": frames})]
