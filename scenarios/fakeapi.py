"""Control of the fake upstream subprocess (``/__fake/*``) and its records → history.

:func:`normalize_exchange` is the one place that knows the shape of a
``GET /__fake/requests`` record; the checker only sees the normalized form:

- ``index``, ``path``, ``body`` (the JSON the relay sent), ``continuity`` (the fake's own
  probe: replayed/intact/misplaced/invalid), ``status`` (HTTP status it answered),
- ``events``: the Responses events it fully sent, in order, as ``{"type", "data"}``,
- ``terminal``: the terminal event it sent (``response.completed`` …) or None,
- ``outcome``: completed | incomplete | failed | error_event | http_error | broken,
- ``output``: the final output items it minted (reasoning with ``encrypted_content``,
  messages, function calls), authoritative from ``response.completed``,
- ``ended``: how the fake ended the call (finish, close, reset, client_gone, stopped),
- ``script``: the script the call consumed (None: the default reply),
- ``finished``: whether the fake is done with that call (not still streaming or hanging),
- ``credential``: the label of the upstream key the relay incarnation that made the call
  was using (``key0`` ...; the fake redacts the key itself), part of a call's scope.

Calls to the fake's strict Chat provider (``path`` ``/v1/chat/completions``, made for a
``RELAY_PROVIDERS`` model) are normalized by :func:`normalize_chat_exchange` into the same
keys: ``continuity`` is the Chat probe (restored/exact/wrong/missing and per-message
items), ``outcome`` completed | incomplete | failed | error_event | http_error | broken,
``output`` the one assistant message it answered (content, refusal, tool_calls and the
minted ``reasoning_content``), ``credential`` ``"provider"``.
"""

from __future__ import annotations

from typing import Any

from relay.core.responses_events import TERMINAL_EVENTS
from scenarios.history import History
from scenarios.httpjson import request_json
from scenarios.procs import ManagedProcess
from scenarios.wait import wait_until

MODEL_PATHS = ("/v1/responses", "/v1/chat/completions")  # calls that consume a script
CHAT_PATH = "/v1/chat/completions"
PROVIDER_CREDENTIAL = "provider"  # the credential label of every Chat-provider call


def is_model_call(exchange: dict[str, Any]) -> bool:
    """A Responses or Chat-provider model call (not a control request)."""
    return str(exchange.get("path", "")) in MODEL_PATHS


class FakeControl:
    def __init__(
        self, base_url: str, *, proc: ManagedProcess | None, history: History | None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.proc = proc
        self.history = history
        self._recorded: set[int] = set()
        # Scripts are consumed one per authenticated /v1/responses call, FIFO; mirroring
        # the queue lets each recorded exchange carry the script (and toxics) it ran under.
        self._queued: list[dict[str, Any]] = []
        self._assigned: dict[int, dict[str, Any] | None] = {}
        # The harness sets the credential label of the relay it starts; a call takes the
        # label current when it is first fetched (the harness fetches before each start).
        self.credential: str | None = None
        self._credentials: dict[int, str | None] = {}
        self._finished: list[dict[str, Any]] = []

    def script(self, *scripts: dict[str, Any]) -> None:
        """Queue behaviours for the next model calls, Responses or Chat (FIFO)."""
        request_json("POST", f"{self.base_url}/__fake/scripts", list(scripts))
        self._queued.extend(scripts)

    def requests(self) -> list[dict[str, Any]]:
        _, body = request_json("GET", f"{self.base_url}/__fake/requests")
        if isinstance(body, dict):  # tolerate {"requests": [...]}
            body = body.get("requests", [])
        return list(body or [])

    def reset(self) -> None:
        self.sync(final=True)
        request_json("POST", f"{self.base_url}/__fake/reset", {})
        self._recorded.clear()
        self._queued.clear()
        self._assigned.clear()
        self._credentials.clear()
        self._finished = []

    def set_strict(self, rule: str, prefix: bool = False) -> dict[str, Any]:
        """The Chat provider's strictness rule from now on (``POST /__fake/strict``)."""
        _, body = request_json(
            "POST", f"{self.base_url}/__fake/strict", {"rule": rule, "prefix": prefix}
        )
        if self.history is not None:
            self.history.record("note", note="fake_strict", rule=rule, prefix=prefix)
        return dict(body or {})

    def rotate_key(self) -> int:
        """The fake seals with a new key from now on (``POST /__fake/rotate_key``): every
        token it minted before is refused as OpenAI refuses content it cannot verify."""
        _, body = request_json("POST", f"{self.base_url}/__fake/rotate_key", {})
        if self.history is not None:
            self.history.record("note", note="fake_key_rotated")
        return int(dict(body or {})["rotations"])

    def health(self) -> dict[str, Any]:
        _, body = request_json("GET", f"{self.base_url}/__fake/health")
        return dict(body or {})

    def exchanges(self) -> list[dict[str, Any]]:
        # A finished record never changes and a full listing can be tens of MB (every
        # event of every call), so when the cheap health count shows nothing new and
        # every call is finished, answer from the cache.
        count = int(self.health().get("requests", -1))
        if count == len(self._finished):
            return list(self._finished)
        exchanges = self._fetch()
        if count > len(exchanges):
            # The fake keeps only its newest records (--max-records): indices would shift
            # and the history would silently miss calls.
            raise RuntimeError(
                f"the fake received {count} calls but keeps {len(exchanges)} records; "
                "split the scenario or raise the fake's record cap"
            )
        self._finished = exchanges if all(e["finished"] for e in exchanges) else []
        return exchanges

    def _fetch(self) -> list[dict[str, Any]]:
        records = self.requests()
        for index, raw in enumerate(records):
            if index not in self._assigned:
                consumed = raw.get("path") in MODEL_PATHS and raw.get("status") != 401
                # A record whose status is still None is mid-flight but already consumed.
                self._assigned[index] = self._queued.pop(0) if consumed and self._queued else None
                chat = raw.get("path") == CHAT_PATH
                self._credentials[index] = PROVIDER_CREDENTIAL if chat else self.credential
        return [
            (normalize_chat_exchange if raw.get("path") == CHAT_PATH else normalize_exchange)(
                raw, index, self._assigned.get(index), self._credentials.get(index)
            )
            for index, raw in enumerate(records)
        ]

    def wait_for_events(self, count: int, timeout: float = 10.0) -> dict[str, Any]:
        """Wait until the newest upstream call has sent ``count`` events; return it."""

        def probe() -> dict[str, Any] | None:
            calls = [e for e in self.exchanges() if is_model_call(e)]
            if calls and len(calls[-1]["events"]) >= count:
                return calls[-1]
            return None

        return wait_until(probe, timeout=timeout, what=f"the upstream to send {count} events")

    def wait_for_end(self, timeout: float = 10.0) -> dict[str, Any]:
        """Wait until the newest upstream call has ended (finish, cut, client_gone...)."""

        def probe() -> dict[str, Any] | None:
            calls = [e for e in self.exchanges() if is_model_call(e)]
            return calls[-1] if calls and calls[-1]["finished"] else None

        return wait_until(probe, timeout=timeout, what="the upstream call to end")

    def sync(self, *, final: bool = False) -> list[dict[str, Any]]:
        """Record finished upstream exchanges not yet in the history (all of them if final)."""
        new: list[dict[str, Any]] = []
        for exchange in self.exchanges():
            if exchange["index"] in self._recorded:
                continue
            if not is_model_call(exchange):
                continue
            if not exchange["finished"] and not final:
                continue
            self._recorded.add(exchange["index"])
            new.append(exchange)
            if self.history is not None:
                self.history.record("upstream_exchange", **exchange)
        return new


def normalize_exchange(
    raw: dict[str, Any],
    index: int,
    script: dict[str, Any] | None = None,
    credential: str | None = None,
) -> dict[str, Any]:
    """A ``GET /__fake/requests`` record (fakeupstream.fake.RecordedRequest) → history."""
    events = _events(raw.get("events") or [])
    status = raw.get("status")
    terminal = next((e["type"] for e in events if e["type"] in TERMINAL_EVENTS), None)
    toxics = (script or {}).get("toxics") or {}
    return _exchange(
        raw, index, script, credential,
        events=slim_events(events),
        response=raw.get("response"),
        terminal=terminal,
        outcome=_outcome(status, events, terminal, raw.get("response"), toxics),
        output=_final_output(events, raw.get("response")),
    )  # fmt: skip


def _exchange(
    raw: dict[str, Any],
    index: int,
    script: dict[str, Any] | None,
    credential: str | None,
    *,
    events: list[dict[str, Any]],
    response: Any,
    terminal: str | None,
    outcome: str,
    output: list[Any],
) -> dict[str, Any]:
    """A history exchange: the recorded request's fields, and what its dialect made of it."""
    return {
        "index": index,
        "path": str(raw.get("path", "")),
        "body": raw.get("body"),
        "continuity": raw.get("continuity") or {},
        "status": raw.get("status"),
        "stream": bool(raw.get("stream")),
        "events": events,
        "response": response,
        "terminal": terminal,
        "outcome": outcome,
        "output": output,
        "ended": raw.get("ended"),
        "sent_bytes": raw.get("sent_bytes", 0),
        "script": script,
        "finished": raw.get("ended") is not None,
        "credential": credential,
    }


def _events(raw: list[Any]) -> list[dict[str, Any]]:
    """Sent events as ``{"type", "data"}`` (raw_sse frames that were not JSON: type "?")."""
    events: list[dict[str, Any]] = []
    for item in raw:
        if isinstance(item, dict):
            events.append({"type": str(item.get("type", "?")), "data": item})
        else:
            events.append({"type": "?", "data": {"raw": str(item)[:200]}})
    return events


def slim_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the history keeps of the events: their types, and the items of
    ``output_item.done`` without bulky text (ids and ``encrypted_content`` stay: the
    checker needs every token the fake minted). Texts live once, in ``output``."""
    slim: list[dict[str, Any]] = []
    for event in events:
        data: dict[str, Any] = {}
        item = event["data"].get("item")
        if event["type"] == "response.output_item.done" and isinstance(item, dict):
            data["item"] = {
                k: v
                for k, v in item.items()
                if k in ("id", "type", "encrypted_content", "call_id", "status")
            }
        slim.append({"type": event["type"], "data": data})
    return slim


def _outcome(
    status: Any,
    events: list[dict[str, Any]],
    terminal: str | None,
    response: Any,
    toxics: dict[str, Any],
) -> str:
    """What the upstream really did, the ground truth for "no false success"."""
    if isinstance(status, int) and status >= 400:
        return "http_error"
    malformed_at = toxics.get("malformed_at_event")
    if isinstance(malformed_at, int) and malformed_at < len(events):
        # The record lists the event as sent, but its bytes went out broken.
        return "broken"
    if any(event["type"] == "error" for event in events):
        return "error_event"
    if terminal is not None:
        return terminal.removeprefix("response.")
    if isinstance(response, dict) and response.get("object") == "response":
        return str(response.get("status", "broken"))  # a non-streamed Response body
    return "broken"  # cut, reset, hang, or the client left: no terminal event went out


def _final_output(events: list[dict[str, Any]], response: Any) -> list[dict[str, Any]]:
    """The minted output: the terminal event's response.output (authoritative), else the
    items of ``output_item.done`` events, else a JSON Response body's output."""
    for event in events:
        if event["type"] in TERMINAL_EVENTS:
            output = (event["data"].get("response") or {}).get("output")
            if isinstance(output, list):
                return output
    items: dict[int, dict[str, Any]] = {}
    for event in events:
        if event["type"] == "response.output_item.done":
            data = event["data"]
            items[int(data.get("output_index", len(items)))] = data.get("item") or {}
    if items:
        return [items[key] for key in sorted(items)]
    if isinstance(response, dict) and isinstance(response.get("output"), list):
        return list(response["output"])
    return []


# --- the strict Chat provider's calls ------------------------------------------------------


def normalize_chat_exchange(
    raw: dict[str, Any],
    index: int,
    script: dict[str, Any] | None = None,
    credential: str | None = PROVIDER_CREDENTIAL,
) -> dict[str, Any]:
    """A ``/v1/chat/completions`` record → history (see the module docstring)."""
    sent = list(raw.get("events") or [])
    status = raw.get("status")
    response = raw.get("response")
    chunks = [item for item in sent if isinstance(item, dict)]
    events: list[dict[str, Any]] = [
        {"type": "chunk" if "error" not in c else "error", "data": {}} for c in chunks
    ]
    events += [{"type": "done", "data": {}} for item in sent if item == "[DONE]"]
    message, finish = _chat_answer(chunks if raw.get("stream") else [response])
    failed = any("error" in chunk for chunk in chunks) or (
        isinstance(response, dict) and "error" in response
    )
    return _exchange(
        raw, index, script, credential,
        events=events,
        response=response,
        terminal=finish,
        outcome=_chat_outcome(status, failed, finish, raw, sent),
        output=[message] if finish is not None else [],
    )  # fmt: skip


def _chat_answer(parts: list[Any]) -> tuple[dict[str, Any], str | None]:
    """The assistant message and finish reason of a ``chat.completion`` or its chunks."""
    content, refusal, reasoning = [], [], []
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    for part in parts:
        for choice in (part.get("choices") if isinstance(part, dict) else None) or []:
            delta = choice.get("delta") or choice.get("message") or {}
            content.append(delta.get("content") or "")
            refusal.append(delta.get("refusal") or "")
            reasoning.append(delta.get("reasoning_content") or "")
            for position, call in enumerate(delta.get("tool_calls") or []):
                slot = calls.setdefault(call.get("index", position), {"arguments": ""})
                slot["id"] = call.get("id") or slot.get("id")
                function = call.get("function") or {}
                slot["name"] = function.get("name") or slot.get("name")
                slot["arguments"] += function.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    message: dict[str, Any] = {
        "role": "assistant", "content": "".join(content), "refusal": "".join(refusal),
        "reasoning_content": "".join(reasoning),
        "tool_calls": [calls[key] for key in sorted(calls)],
    }  # fmt: skip
    return message, finish


CHAT_FINISHED = {"stop": "completed", "tool_calls": "completed", "length": "incomplete",
                 "content_filter": "incomplete"}  # fmt: skip


def _chat_outcome(
    status: Any, failed: bool, finish: str | None, raw: dict[str, Any], sent: list[Any]
) -> str:
    """What the provider really did (the ground truth for "no false success")."""
    stream = bool(raw.get("stream"))
    if isinstance(status, int) and status >= 400:
        return "http_error"
    if failed:
        return "error_event" if stream else "failed"
    whole = "[DONE]" in sent if stream else raw.get("ended") == "finish"
    if finish is None or not whole:
        return "broken"  # cut, reset, hang or the client left before the end
    return CHAT_FINISHED.get(finish, "broken")
