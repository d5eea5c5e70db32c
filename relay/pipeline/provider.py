"""A Chat Completions request relayed to a Chat Completions provider (sans-I/O).

Chunks are forwarded as the provider sent them (``model`` echoed as the client named
it); a JSON answer is forwarded whole. Each is fed to the strict capture on the way, and
the answer's reasoning is recorded (``Record``) before the client can see its end: the
``[DONE]`` frame, or the JSON body.
"""

from __future__ import annotations

from typing import Any

from relay.errors import RelayError
from relay.pipeline.actions import (
    Action,
    Fail,
    Finish,
    Flush,
    Log,
    Queue,
    Record,
    Respond,
    SendUpstream,
    StartDelivery,
)
from relay.pipeline.base import Phase, Pipeline
from relay.strict.chat_capture import ChatCapture
from relay.translate.chat_sse import DONE, encode_chunk, encode_error


class ChatProviderPipeline(Pipeline):
    def __init__(
        self,
        body: dict[str, Any],
        *,
        request_id: str,
        client_model: str,
        stream: bool,
        capture: ChatCapture | None,
    ) -> None:
        self.body = body
        self.request_id = request_id
        self._client_model = client_model
        self.streaming = stream
        self._capture = capture
        self._completion: dict[str, Any] = {}  # JSON: the provider's answer
        self.finish_reason: str | None = None

    def start(self) -> list[Action]:
        self._expect(Phase.NEW)
        self.phase = Phase.UPSTREAM
        return [SendUpstream(self.body, buffered=not self.streaming)]

    def upstream_event(self, event_type: str, data: dict[str, Any]) -> list[Action]:
        self._expect(Phase.UPSTREAM)
        if not self.streaming:
            self._completion.update(data)
            return []
        self._observe(data, whole=False)
        actions = self._stream_started_once()
        return [*actions, Queue(encode_chunk(data))]

    def upstream_done(self) -> list[Action]:
        if self.phase is Phase.DONE:
            return []
        self._expect(Phase.UPSTREAM)
        self.phase = Phase.DELIVERING
        if not self.streaming:
            self._observe(self._completion, whole=True)
            return [Record(), Respond(self._completion)]  # recorded before the answer
        self.phase = Phase.DONE
        return [Record(), StartDelivery(), *self._stream_started_once(), Queue(DONE), Flush(),
                self._done(), Finish()]  # fmt: skip

    def responded(self) -> list[Action]:
        self._expect(Phase.DELIVERING)
        self.phase = Phase.DONE
        return [Finish(), self._done()]

    def failed(self, error: RelayError) -> list[Action]:
        if self.phase is Phase.DONE:
            return []
        self.phase = Phase.DONE
        return [Fail(error, encode_error(error.envelope()) if self.streaming else None)]

    def client_gone(self, frames: int) -> list[Action]:
        if self.phase is Phase.DONE:
            return []
        self.phase = Phase.DONE
        return [Log("client_disconnected", {"request_id": self.request_id, "frames": frames})]

    def _observe(self, data: dict[str, Any], *, whole: bool) -> None:
        """Capture, remember the finish reason, and echo the client's model name."""
        if self._capture is not None:
            (self._capture.feed_completion if whole else self._capture.feed_chunk)(data)
        choices = data.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]
        if "model" in data:
            data["model"] = self._client_model

    def _done(self) -> Log:
        return Log("chat_done", {"request_id": self.request_id, "finish": self.finish_reason})
