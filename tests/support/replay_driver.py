"""The real relay side of the replay cache tests: ``ReplayCache`` → ``CacheSession`` →
``ReasoningStore`` on one SQLite file, driven the way the chat handler drives them, with
synthetic upstream output (tests/unit/cache/test_replay_state_machine.py, test_retention.py,
test_session.py). Histories are tuples of canonical JSON messages (tests/support/replay_model.py).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from relay.cache.replay_cache import Began, ReplayCache
from relay.cache.retention import RetentionCleanup, WatchedClock
from relay.cache.session import CacheSession
from relay.clock import ManualClock
from relay.core.capture import CaptureResult, ClientProjection, OutputCapture, finish_capture
from relay.core.disk_policy import MIN_RESERVE_BYTES
from relay.core.history_digest import HistoryDigests, history_digests
from relay.core.planner import Plan, PlanLimits, plan_replay
from relay.core.receipts import Reason
from relay.core.responses_events import decode
from relay.core.scope import Scope
from relay.errors import StoreFull, UpstreamHTTPError
from relay.pipeline.actions import (
    Abort,
    Accepted,
    Action,
    Begin,
    Commit,
    Dispatch,
    Fence,
    Poison,
    Resolve,
    SendUpstream,
)
from relay.pipeline.chat import ChatPipeline
from relay.settings.config import Config
from relay.settings.model_alias import ModelAlias
from relay.storage.backup import SnapshotKind, make_snapshot
from relay.storage.disk_guard import DiskGuard
from relay.storage.replay_store import ReasoningStore
from relay.storage.scoped_source import ScopedSource
from relay.translate.request import translate_request
from relay.translate.responses_to_chat import project_output, response_to_chat_completion
from tests.support.replay_model import DAY, History
from tests.support.sqlite_store import sqlite_store

GPT5 = ModelAlias("gpt-5", "gpt-5")
UPSTREAM_URL = "https://api.openai.com/v1/responses"
TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
MAX_CONCURRENT = 3  # REASONING_CACHE_MAX_CONCURRENT: one more request is bypassed

Message = dict[str, Any]
# The upstream's refusal of replayed reasoning (relay.core.rejection), quoting a ciphertext.
REFUSED = UpstreamHTTPError(
    400,
    {"error": {"message": "The encrypted content gAAAAABpZ0x1... could not be verified.",
               "type": "invalid_request_error", "param": None,
               "code": "invalid_encrypted_content"}},
)  # fmt: skip


def canonical(message: Message) -> str:
    return json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def payload_text(items: Sequence[Message]) -> str:
    """The stored payload bytes of an output (capture's compact serialization)."""
    return json.dumps(list(items), ensure_ascii=False, separators=(",", ":"))


def parse(message: str) -> Message:
    value: Message = json.loads(message)
    return value


def messages_of(history: History) -> list[Message]:
    return [parse(message) for message in history]


@functools.lru_cache(maxsize=4096)
def assistant_positions(history: History) -> tuple[int, ...]:
    return tuple(i for i, m in enumerate(messages_of(history)) if m["role"] == "assistant")


def describe(history: History) -> str:
    parts = []
    for message in messages_of(history):
        calls = message.get("tool_calls")
        text = calls[0]["id"] if calls else message.get("content")
        parts.append(f"{message['role'][0]}:{text}")
    return " | ".join(parts)


# --- synthetic upstream output --------------------------------------------------------------


def output_items(visible: Message, tag: int, *, reasoning: bool) -> list[Message]:
    """Original output whose client projection is ``visible`` (new item ids and ciphertext)."""
    items: list[Message] = []
    if reasoning:
        items.append({"type": "reasoning", "id": f"rs_{tag}", "summary": [],
                      "encrypted_content": f"gAAAAB{tag:06d}ciphertext"})  # fmt: skip
    if visible.get("content"):
        items.append({
            "type": "message", "id": f"msg_{tag}", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": visible["content"], "annotations": []}],
        })  # fmt: skip
    for call in visible.get("tool_calls") or []:
        if call["type"] == "custom":  # a custom (grammar) tool: freeform input, no status
            items.append({
                "type": "custom_tool_call", "id": f"ctc_{tag}", "call_id": call["id"],
                "input": call["custom"]["input"], "name": call["custom"]["name"],
            })  # fmt: skip
            continue
        items.append({
            "type": "function_call", "id": f"fc_{tag}", "call_id": call["id"],
            "name": call["function"]["name"], "arguments": call["function"]["arguments"],
            "status": "completed",
        })  # fmt: skip
    return items


def completed_events(items: Sequence[Message], snapshot: str) -> list[tuple[str, Message]]:
    events: list[tuple[str, Message]] = [
        ("response.output_item.done",
         {"type": "response.output_item.done", "output_index": i, "item": copy.deepcopy(item)})
        for i, item in enumerate(items)
    ]  # fmt: skip
    response = {"id": "resp_1", "object": "response", "status": "completed", "model": snapshot,
                "output": copy.deepcopy(list(items))}  # fmt: skip
    events.append(("response.completed", {"type": "response.completed", "response": response}))
    return events


def failed_events(items: Sequence[Message], snapshot: str) -> list[tuple[str, Message]]:
    response = {"id": "resp_1", "object": "response", "status": "failed", "model": snapshot,
                "output": [], "error": {"code": "server_error", "message": "boom"}}  # fmt: skip
    return [
        ("response.output_item.done",
         {"type": "response.output_item.done", "output_index": 0, "item": copy.deepcopy(items[0])}),
        ("response.failed", {"type": "response.failed", "response": response}),
    ]  # fmt: skip


def sent_to_client(items: Sequence[Message]) -> ClientProjection:
    """What the client was sent for a completed output (the JSON answer's projection; a
    Chat-shaped client gets custom calls in the Chat API's custom form)."""
    completion = response_to_chat_completion(
        {"status": "completed", "output": list(items)},
        completion_id="chatcmpl-1", created=0, model="gpt-5", reasoning_summaries=False,
        custom_tool_calls="custom",
    )  # fmt: skip
    return ClientProjection.from_completion(completion)


# --- the real relay side ----------------------------------------------------------------------


class FullDisk:
    """A volume that is full while ``full`` is set: every store transaction fails as on
    SQLITE_FULL (before it begins, so all or nothing, as SQLite guarantees) and the
    volume reports no free bytes. With ``room_after_release`` the blocks the reserve gives
    back hold the writes that follow; without, the disk stays full. The reserve and the
    guard are the real files beside the store (real ENOSPC and EIO: the tmpfs and
    countdown tests)."""

    def __init__(self) -> None:
        self.full = False
        self.room_after_release = False
        self.failures = 0

    def install(self, store: ReasoningStore, guard: DiskGuard) -> None:
        real_transaction, real_free = store.transaction, guard.free_bytes

        @contextlib.contextmanager
        def transaction(*, before_send: bool = False) -> Iterator[None]:
            if self.full and not (self.room_after_release and not guard.reserve.exists()):
                self.failures += 1
                raise StoreFull("simulated full disk", sqlite_error="SQLITE_FULL")
            with real_transaction(before_send=before_send):
                yield

        store.transaction = transaction  # type: ignore[method-assign]
        guard.free_bytes = lambda: 0 if self.full else real_free()  # type: ignore[method-assign]


class Relay:
    """ReplayCache → CacheSession → ReasoningStore on one SQLite file, as the handler uses them."""

    def __init__(self, path: Path, clock: ManualClock) -> None:
        self.path = path
        self.clock = clock
        self.count = 0
        self.copies = 0  # offline backups restored
        self.last_intent = ""
        self.disk = FullDisk()
        self.cache = self._open()
        self.scope = self._scope()
        self._digests: dict[History, HistoryDigests] = {}

    def _new_id(self, prefix: str) -> str:
        self.count += 1
        ident = f"{prefix}{self.count}"
        if prefix == "intent_":
            self.last_intent = ident
        return ident

    def _open(self, *, enabled: bool = True) -> ReplayCache:
        # Each open is a startup: the cache's clock begins a new deletion barrier.
        self.watched = WatchedClock(self.clock)
        config = Config(
            reasoning_cache_enabled=enabled,
            reasoning_cache_path=self.path,
            reasoning_cache_max_concurrent=MAX_CONCURRENT,
            reasoning_cache_reserve_bytes=MIN_RESERVE_BYTES,
        )
        cache = ReplayCache.open(
            config, self.watched, upstream_url=UPSTREAM_URL, upstream_credential="sk-test",
            relay_token="relay-token", new_id=self._new_id,
        )  # fmt: skip
        if cache.store is not None and cache.safety is not None:
            self.disk.install(sqlite_store(cache.store), cache.safety.guard)
        return cache

    @property
    def cleanup(self) -> RetentionCleanup:
        """The hourly cleanup of this incarnation (run by hand here)."""
        return RetentionCleanup(self.store, self.watched, retention_s=30 * DAY)

    def _scope(self) -> Scope:
        probe = self.session((canonical({"role": "user", "content": "probe"}),))
        probe.abort("probe")  # never dispatched: releases its lease, writes nothing
        return probe._scope  # every request here has the same configuration, so one scope

    @property
    def store(self) -> ReasoningStore:
        return sqlite_store(self.cache.store)

    def restart(self, *, disabled: str | None = None) -> None:
        """Close and reopen the same file (startup recovery runs); optionally run a while
        with caching off first: ``"idle"`` forwards nothing (no gap), ``"serving"`` forwards
        a direct Responses call (the coverage gap the next enabled open consumes)."""
        self.cache.close()
        if disabled is not None:
            off = self._open(enabled=False)
            if disabled == "serving":
                # Before forwarding it, as the passthrough does: the gap is its guard.
                off.decide_passthrough("gpt-5", None, "req_off").write_guard()
                assert off.gap_recorded
            off.close()
        self.cache = self._open()
        scope = self._scope()
        assert scope.digest == self.scope.digest, "the cache secret must survive a restart"

    def restore_from_backup(self) -> Path:
        """With the relay stopped: back the store up, restore the backup into a new live
        file (both with the offline commands' code) and start on that file. Returns the
        backup's path."""
        self.cache.close()
        self.copies += 1
        backup = self.path.with_name(f"backup-{self.copies}.sqlite")
        restored = self.path.with_name(f"restored-{self.copies}.sqlite")
        make_snapshot(self.path, backup, kind=SnapshotKind.BACKUP, clock=self.clock)
        make_snapshot(backup, restored, kind=SnapshotKind.RESTORE, clock=self.clock)
        self.path = restored
        self.cache = self._open()
        self.scope = self._scope()  # the copy's fresh secret: a new scope digest
        self._digests.clear()
        return backup

    def close(self) -> None:
        self.cache.close()

    def begin(self, history: History) -> CacheSession | None:
        """A session, or None when the request is served uncached (capacity bypass)."""
        messages = messages_of(history)
        body = {"model": "gpt-5", "messages": messages, "tools": TOOLS}
        request = translate_request(body, GPT5, reasoning_summaries=False)
        return self.cache.begin(request, body, self._new_id("req_"))

    def session(self, history: History) -> CacheSession:
        session = self.begin(history)
        assert session is not None, "an ordinary gpt-5 chat request must be cache-eligible"
        return session

    def digests(self, history: History) -> HistoryDigests:
        found = self._digests.get(history)
        if found is None:
            found = self._digests[history] = history_digests(self.scope, messages_of(history))
        return found

    def scope_id(self) -> int | None:
        row = self.store.find_scope(self.scope.digest)
        return None if row is None else row.id

    def generation(self) -> int | None:
        row = self.store.find_scope(self.scope.digest)
        return None if row is None else row.generation

    def plan(self, history: History) -> tuple[Plan, HistoryDigests]:
        """What dispatch would plan right now, read-only (no intent, no touch)."""
        digests = self.digests(history)
        row = self.store.find_scope(self.scope.digest)
        if row is None:
            return Plan(), digests
        plan = plan_replay(
            digests,
            messages_of(history),
            ScopedSource(self.store, row.id),
            generation=row.generation,
            now=self.clock.wall(),
            limits=PlanLimits(),
        )  # fmt: skip  (PlanLimits() are the configuration defaults the cache uses)
        return plan, digests

    def tamper(self, observation_id: int, where: int) -> None:
        """Change one ASCII letter/digit of a stored payload in place (same byte size)."""
        conn = self.store._conn
        assert conn is not None
        (text,) = conn.execute(
            "SELECT output_json FROM payloads WHERE observation_id = ?", (observation_id,)
        ).fetchone()
        spots = [i for i, c in enumerate(text) if c.isascii() and c.isalnum()]
        i = spots[where % len(spots)]
        damaged = text[:i] + ("x" if text[i] != "x" else "y") + text[i + 1 :]
        conn.execute(
            "UPDATE payloads SET output_json = ? WHERE observation_id = ?",
            (damaged, observation_id),
        )


def captured(
    session: CacheSession, events: Iterable[tuple[str, Message]], sent: ClientProjection
) -> CaptureResult:
    """What the chat pipeline hands to ``complete``: ``events`` fed to a capture bounded as
    the session says (``accepted`` on the first, as the pipeline's Accepted), decided
    against what the client was ``sent``."""
    capture = OutputCapture(project=project_output, max_bytes=session.capture_bytes)
    for index, (event_type, data) in enumerate(events):
        if index == 0:
            session.accepted()
        capture.feed(decode(event_type, data))
    return finish_capture(capture, sent)


class PipelineDriver:
    """The chat shell's logic, pure: a whole ``ChatPipeline`` for ``history`` (streamed),
    its actions performed in order against the real cache -- the decision (Begin, a
    Fence/Poison), the session's dispatch, accepted, commit, resolve and abort -- and
    every outcome fed back; frames, flushes and logs only recorded (``performed``). The
    test plays the upstream: :meth:`start` stops at SendUpstream, :meth:`feed` hands the
    events over and :meth:`end` the stream's end."""

    def __init__(self, relay: Relay, history: History) -> None:
        self.history = history
        messages = messages_of(history)
        body = {"model": "gpt-5", "messages": messages, "tools": TOOLS, "stream": True}
        request = translate_request(body, GPT5, reasoning_summaries=False)
        request_id = relay._new_id("req_")
        self.pipeline = ChatPipeline(request, request_id=request_id, model="gpt-5",
                                     completion_id="chatcmpl-1", created=0,
                                     reasoning_summaries=False)  # fmt: skip
        self._decide = functools.partial(relay.cache.decide, request, body, request_id)
        self.began: Began | None = None
        self.session: CacheSession | None = None
        self.body: dict[str, Any] | None = None  # what was sent upstream
        self.committed: CaptureResult | None = None
        self.performed: list[Action] = []

    def start(self) -> None:
        self.perform(self.pipeline.start())

    def feed(self, events: Iterable[tuple[str, Message]]) -> None:
        for event_type, data in events:
            self.perform(self.pipeline.upstream_event(event_type, data))
        self.perform(self.pipeline.batch_done())

    def end(self) -> None:
        self.perform(self.pipeline.upstream_done())

    def perform(self, actions: list[Action]) -> None:
        for action in actions:
            self.performed.append(action)
            match action:
                case Begin():
                    began = self.began = self._decide()
                    self.session = began.session
                    capture_bytes = None if began.session is None else began.session.capture_bytes
                    guard = Fence() if began.guard == "fence" else Poison() if began.guard else None
                    self.perform(self.pipeline.began(capture_bytes, guard))
                case Fence() | Poison():
                    assert self.began is not None
                    self.began.write_guard()
                    self.perform(self.pipeline.guarded())
                case Dispatch():
                    self.body = self._session().dispatch()
                    self.perform(self.pipeline.dispatched(self.body))
                case SendUpstream(body=body):
                    self.body = body  # the upstream's part is the test's: feed, end
                case Accepted():
                    self._session().accepted()
                case Commit(result=result):
                    self.committed = self._session().complete(result)
                    self.perform(self.pipeline.committed())
                case Resolve():
                    self._session().delivered()
                case Abort(reason=reason, poison=poison):
                    self._session().abort(reason, poison=poison)
                case _:
                    pass  # the client's side: frames, flushes, logs

    def _session(self) -> CacheSession:
        assert self.session is not None, "a cache action without a session"
        return self.session


def user(text: str) -> str:
    return canonical({"role": "user", "content": text})


def said(text: str) -> str:
    return canonical({"role": "assistant", "content": text})


def answer(
    relay: Relay, request: History, text: str, tag: int, *, deliver: bool = True,
    items: list[Message] | None = None, session: CacheSession | None = None,
) -> tuple[CacheSession, list[Message]]:  # fmt: skip
    """One admitted text answer (``items``: exactly these output items, a retry)."""
    if session is None:
        session = relay.session(request)
        session.dispatch()
    if items is None:
        items = output_items({"role": "assistant", "content": text}, tag, reasoning=True)
    result = captured(session, completed_events(items, "gpt-5"), sent_to_client(items))
    assert session.complete(result).kind == "admit"
    if deliver:
        session.delivered()
    return session, items


def replayed(relay: Relay, history: History) -> tuple[list[str], list[Reason]]:
    """The reasoning item ids the plan would replay, and its rejection reasons."""
    plan, _ = relay.plan(history)
    return [json.loads(b.text)[0]["id"] for b in plan.blocks], [r.reason for r in plan.rejections]
