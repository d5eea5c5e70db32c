"""Model requests as a check makes them: the official ``openai`` SDK, charged to the budget.

:class:`ChatClient` talks to one relay (strict response validation on, so a malformed
answer from the relay fails the check), :class:`DirectClient` to the upstream itself.
Every request is a :class:`~live.budget.RequestRecord` in the check's ledger; its tokens
come from ``usage`` (streams ask for it with ``stream_options.include_usage``). No
request is retried (``max_retries=0``).

Offline, a request may name a fake-upstream *script* (what the fake model answers): it is
queued right before the request goes out. Live runs ignore scripts, so the same check
code runs in both modes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from live.budget import Ledger, RequestRecord
from live.processes import RelayProcess
from live.settings import Settings
from live.verdict import CheckFailed

Message = dict[str, Any]
ScriptHook = Callable[[Mapping[str, Any]], None]


@dataclass(frozen=True)
class TokenCounts:
    """An answer's Chat ``usage``, in detail (what the A/B check compares)."""

    prompt: int
    cached: int
    output: int
    reasoning: int


def token_counts(usage: Any) -> TokenCounts | None:
    """The detail of an SDK ``usage`` object (``None``: the answer had none)."""
    if usage is None:
        return None
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    output_details = getattr(usage, "completion_tokens_details", None)
    return TokenCounts(
        prompt=usage.prompt_tokens or 0,
        cached=(getattr(prompt_details, "cached_tokens", None) or 0),
        output=usage.completion_tokens or 0,
        reasoning=(getattr(output_details, "reasoning_tokens", None) or 0),
    )


@dataclass
class Turn:
    """One answer as the client got it."""

    label: str
    status: int  # HTTP status; 0: no answer at all
    request_id: str | None = None
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    error: Any = None  # the error envelope's ``error`` (HTTP error or mid-stream frame)
    tokens: int | None = None  # usage.total_tokens, when the answer reported it
    usage: TokenCounts | None = None  # the same usage, in detail
    chunks: int = 0
    # Tool calls of a stream being read, by index (deltas append to them).
    partial_calls: dict[int, dict[str, Any]] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None

    def message(self) -> Message:
        """The assistant message as Cursor sends it back: its text (maybe empty), its tool
        calls with the arguments re-serialized (``JSON.stringify(JSON.parse(...))``),
        never ``reasoning_content``."""
        message: Message = {"role": "assistant", "content": self.text}
        calls = []
        for call in self.tool_calls:
            arguments = _restringify(call["function"]["arguments"])
            calls.append({**call, "function": {**call["function"], "arguments": arguments}})
        if calls:
            message["tool_calls"] = calls
        return message

    def describe(self) -> str:
        if self.ok:
            return f"{self.label}: 200 finish={self.finish_reason}"
        if self.status == 200:
            return f"{self.label}: error frame mid-stream {_error_text(self.error)}"
        if self.status == 0:
            return f"{self.label}: no answer ({_error_text(self.error)})"
        return f"{self.label}: HTTP {self.status} {_error_text(self.error)}"


def _restringify(arguments: str) -> str:
    """What a JavaScript client writes back for tool arguments: compact, order kept."""
    try:
        return json.dumps(json.loads(arguments), separators=(",", ":"), ensure_ascii=False)
    except ValueError:
        return arguments


def _error_text(error: Any) -> str:
    if isinstance(error, Mapping):
        inner = error.get("error", error)
        if isinstance(inner, Mapping):
            return f"{inner.get('code') or inner.get('type')}: {str(inner.get('message'))[:200]}"
    return str(error)[:200]


def chat_body(
    settings: Settings, messages: Sequence[Message], overrides: Mapping[str, Any]
) -> dict[str, Any]:
    """A Chat request body: the run's model, low effort and output cap unless overridden
    (``None`` leaves a parameter out)."""
    body: dict[str, Any] = {
        "model": settings.model,
        "messages": list(messages),
        "reasoning_effort": "low",
        "max_completion_tokens": settings.max_completion_tokens,
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


def _usage_tokens(usage: Any) -> int | None:
    total = getattr(usage, "total_tokens", None)
    return total if isinstance(total, int) else None


class ChatClient:
    def __init__(
        self,
        relay: RelayProcess,
        ledger: Ledger,
        settings: Settings,
        script: ScriptHook | None,
    ) -> None:
        self.relay = relay
        self.ledger = ledger
        self.settings = settings
        self._script = script

    def sdk(self) -> openai.OpenAI:
        # Built per request: a restarted relay keeps its port, but a fresh client also
        # drops pooled connections the old process closed.
        return openai.OpenAI(
            base_url=self.relay.base_url,
            api_key=self.relay.relay_token,
            max_retries=0,
            timeout=self.settings.request_timeout_s,
            _strict_response_validation=True,
        )

    def params(self, messages: Sequence[Message], overrides: Mapping[str, Any]) -> dict[str, Any]:
        return chat_body(self.settings, messages, overrides)

    def queue(self, script: Mapping[str, Any] | None) -> None:
        if script is not None and self._script is not None:
            self._script(script)

    # --- whole answers --------------------------------------------------------------------

    def chat(
        self,
        label: str,
        messages: Sequence[Message],
        *,
        stream: bool = False,
        script: Mapping[str, Any] | None = None,
        expect_ok: bool = True,
        **overrides: Any,
    ) -> Turn:
        body = self.params(messages, overrides)
        if stream:
            body["stream"] = True
            body.setdefault("stream_options", {"include_usage": True})
        return self._send(label, body, script=script, expect_ok=expect_ok, raw_path=None)

    def post(
        self,
        label: str,
        body: Mapping[str, Any],
        *,
        script: Mapping[str, Any] | None = None,
        expect_ok: bool = True,
    ) -> Turn:
        """``POST /v1/chat/completions`` with exactly ``body`` (a recorded Cursor request,
        a Responses-shaped body): nothing is added."""
        return self._send(
            label, dict(body), script=script, expect_ok=expect_ok, raw_path="/chat/completions"
        )

    def _send(
        self,
        label: str,
        body: dict[str, Any],
        *,
        script: Mapping[str, Any] | None,
        expect_ok: bool,
        raw_path: str | None,
    ) -> Turn:
        stream = body.get("stream") is True
        record = self.ledger.open(label, "relay", stream=stream)
        self.queue(script)
        turn = Turn(label, status=0)
        client = self.sdk()
        try:
            if stream:
                if raw_path is None:
                    chunks = client.chat.completions.create(**body)
                else:
                    chunks = client.post(
                        raw_path,
                        body=body,
                        cast_to=ChatCompletionChunk,
                        stream=True,
                        stream_cls=openai.Stream[ChatCompletionChunk],
                    )
                turn.request_id = chunks.response.headers.get("x-request-id")
                turn.status = chunks.response.status_code
                _collect(turn, iter(chunks))
            else:
                if raw_path is None:
                    completion = client.chat.completions.create(**body)
                else:
                    completion = client.post(raw_path, body=body, cast_to=ChatCompletion)
                turn.status = 200
                turn.request_id = getattr(completion, "_request_id", None)
                _read_completion(turn, completion)
        except openai.APIStatusError as err:
            turn.status, turn.request_id, turn.error = err.status_code, err.request_id, err.body
        except openai.APIError as err:  # an error frame mid-stream, or no answer at all
            turn.error = err.body if err.body is not None else str(err)
        finally:
            client.close()
        self._close(record, turn, body)
        if expect_ok and not turn.ok:
            raise CheckFailed(f"request {turn.describe()}")
        return turn

    def _close(self, record: RequestRecord, turn: Turn, body: Mapping[str, Any]) -> None:
        record.status, record.request_id = turn.status, turn.request_id
        record.finish_reason = turn.finish_reason
        if turn.tokens is not None:
            self.ledger.close(record, turn.tokens)
        elif turn.status == 200:
            # A success without usage (Cursor's body does not ask for it; a cancelled
            # stream): charge the most it can have cost.
            self.ledger.close(record, estimate_tokens(body, self.settings), estimated=True)
        else:
            self.ledger.close(record, 0)

    # --- a stream held open ---------------------------------------------------------------

    def hold(
        self,
        label: str,
        messages: Sequence[Message],
        *,
        script: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> HeldStream:
        """Start a stream and read until its first output arrives; the caller then
        cancels it or reads it to the end."""
        body = self.params(messages, overrides)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        record = self.ledger.open(label, "relay", stream=True)
        self.queue(script)
        return HeldStream(self, record, body)


class HeldStream:
    def __init__(self, owner: ChatClient, record: RequestRecord, body: dict[str, Any]) -> None:
        self._owner = owner
        self._record = record
        self._body = body
        self._client = owner.sdk()
        self.turn = Turn(record.label, status=0)
        self._stream: openai.Stream[ChatCompletionChunk] | None = None
        self._chunks: Iterator[ChatCompletionChunk] = iter(())
        try:
            self._stream = self._client.chat.completions.create(**body)
            self.turn.status = self._stream.response.status_code
            self.turn.request_id = self._stream.response.headers.get("x-request-id")
            self._chunks = iter(self._stream)
            _collect(self.turn, self._chunks, until_output=True)
        except openai.APIStatusError as err:
            self.turn.status, self.turn.request_id, self.turn.error = (
                err.status_code,
                err.request_id,
                err.body,
            )
        except openai.APIError as err:
            self.turn.error = err.body if err.body is not None else str(err)
        if not self.turn.ok or not (self.turn.text or self.turn.tool_calls):
            self._end()
            raise CheckFailed(f"held stream {self.turn.describe()} ended before any output")

    def cancel(self) -> Turn:
        """Close the connection mid-stream, as a user pressing stop does."""
        self._end()
        return self.turn

    def finish(self) -> Turn:
        """Read the rest of the stream."""
        try:
            _collect(self.turn, self._chunks)
        except openai.APIError as err:
            self.turn.error = err.body if err.body is not None else str(err)
        self._end()
        return self.turn

    def _end(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        self._client.close()
        if self._record.status is None:
            self._owner._close(self._record, self.turn, self._body)


def _read_completion(turn: Turn, completion: ChatCompletion) -> None:
    choice = completion.choices[0]
    turn.text = choice.message.content or ""
    turn.finish_reason = choice.finish_reason
    for call in choice.message.tool_calls or []:
        function = getattr(call, "function", None)
        turn.tool_calls.append(
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": getattr(function, "name", ""),
                    "arguments": getattr(function, "arguments", ""),
                },
            }
        )
    turn.tokens = _usage_tokens(completion.usage)
    turn.usage = token_counts(completion.usage)


def _collect(
    turn: Turn, chunks: Iterator[ChatCompletionChunk], *, until_output: bool = False
) -> None:
    """Fold chunks into ``turn``; with ``until_output``, stop after the first output."""
    calls = turn.partial_calls
    for chunk in chunks:
        turn.chunks += 1
        if chunk.usage is not None:
            turn.tokens = _usage_tokens(chunk.usage)
            turn.usage = token_counts(chunk.usage)
        output = False
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                turn.text += delta.content
                output = True
            for call in delta.tool_calls or []:
                entry = calls.setdefault(
                    call.index, {"index": call.index, "id": "", "name": "", "arguments": ""}
                )
                entry["id"] += call.id or ""
                if call.function is not None:
                    entry["name"] += call.function.name or ""
                    entry["arguments"] += call.function.arguments or ""
                output = True
            if choice.finish_reason is not None:
                turn.finish_reason = choice.finish_reason
        if output and until_output:
            break
    turn.tool_calls = [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }
        for _, c in sorted(calls.items())
    ]


def estimate_tokens(body: Mapping[str, Any], settings: Settings) -> int:
    """An upper bound for a request whose usage is unknown: its output cap plus about
    one token per four characters of what it sent."""
    cap = body.get("max_completion_tokens") or body.get("max_output_tokens")
    cap = cap if isinstance(cap, int) else settings.max_completion_tokens
    return cap + len(json.dumps(body, ensure_ascii=False)) // 4


class DirectClient:
    """The upstream's own Responses API, bypassing the relay (same key and base URL the
    relay uses)."""

    def __init__(self, base_url: str, api_key: str, ledger: Ledger, settings: Settings) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.ledger = ledger
        self.settings = settings

    def responses(self, label: str, body: Mapping[str, Any]) -> Turn:
        record = self.ledger.open(label, "direct", stream=False)
        turn = Turn(label, status=0)
        client = openai.OpenAI(
            base_url=self.base_url,
            api_key=self.api_key,
            max_retries=0,
            timeout=self.settings.request_timeout_s,
        )
        try:
            response = client.responses.create(**{k: v for k, v in body.items() if k != "stream"})
            turn.status = 200
            turn.request_id = getattr(response, "_request_id", None)
            turn.text = response.output_text
            turn.finish_reason = response.status
            turn.tokens = _usage_tokens(response.usage)
        except openai.APIStatusError as err:
            turn.status, turn.request_id, turn.error = err.status_code, err.request_id, err.body
        except openai.APIError as err:
            turn.error = err.body if err.body is not None else str(err)
        finally:
            client.close()
        record.status, record.request_id, record.finish_reason = (
            turn.status,
            turn.request_id,
            turn.finish_reason,
        )
        self.ledger.close(record, turn.tokens or 0)
        if not turn.ok:
            raise CheckFailed(f"direct request {turn.describe()}")
        return turn
