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
"""

from __future__ import annotations

from typing import Any

from scenarios.history import History
from scenarios.httpjson import request_json
from scenarios.procs import ManagedProcess
from scenarios.wait import wait_until

TERMINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


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
        """Queue behaviours for the next ``/v1/responses`` calls (FIFO)."""
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
                consumed = raw.get("path") == "/v1/responses" and raw.get("status") != 401
                # A record whose status is still None is mid-flight but already consumed.
                self._assigned[index] = self._queued.pop(0) if consumed and self._queued else None
                self._credentials[index] = self.credential
        return [
            normalize_exchange(
                raw, index, self._assigned.get(index), self._credentials.get(index)
            )
            for index, raw in enumerate(records)
        ]

    def wait_for_events(self, count: int, timeout: float = 10.0) -> dict[str, Any]:
        """Wait until the newest upstream call has sent ``count`` events; return it."""

        def probe() -> dict[str, Any] | None:
            calls = [e for e in self.exchanges() if e["path"].endswith("/responses")]
            if calls and len(calls[-1]["events"]) >= count:
                return calls[-1]
            return None

        return wait_until(probe, timeout=timeout, what=f"the upstream to send {count} events")

    def wait_for_end(self, timeout: float = 10.0) -> dict[str, Any]:
        """Wait until the newest upstream call has ended (finish, cut, client_gone...)."""

        def probe() -> dict[str, Any] | None:
            calls = [e for e in self.exchanges() if e["path"].endswith("/responses")]
            return calls[-1] if calls and calls[-1]["finished"] else None

        return wait_until(probe, timeout=timeout, what="the upstream call to end")

    def sync(self, *, final: bool = False) -> list[dict[str, Any]]:
        """Record finished upstream exchanges not yet in the history (all of them if final)."""
        new: list[dict[str, Any]] = []
        for exchange in self.exchanges():
            if exchange["index"] in self._recorded:
                continue
            if not exchange["path"].endswith("/responses"):
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
    """A ``GET /__fake/requests`` record (fakeupstream.server.RecordedRequest) → history."""
    events = _events(raw.get("events") or [])
    status = raw.get("status")
    terminal = next((e["type"] for e in events if e["type"] in TERMINAL_EVENTS), None)
    toxics = (script or {}).get("toxics") or {}
    return {
        "index": index,
        "path": str(raw.get("path", "")),
        "body": raw.get("body"),
        "continuity": raw.get("continuity") or {},
        "status": status,
        "stream": bool(raw.get("stream")),
        "events": slim_events(events),
        "response": raw.get("response"),
        "terminal": terminal,
        "outcome": _outcome(status, events, terminal, raw.get("response"), toxics),
        "output": _final_output(events, raw.get("response")),
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
