"""The replay cache as a state machine: real sessions, planner and SQLite store against a
small reference model (tests/support/replay_model.py) of which blocks may be replayed.

Every generation goes through the code the chat handler uses: ``ReplayCache.begin`` on a
translated Chat request, ``CacheSession.dispatch`` (plan + intent in one transaction),
synthetic upstream Responses events fed to the capture, ``complete`` (which runs
``_observe``: repeat / end-conflict / start-poison / admission) and ``delivered`` or
``abort``; or an upstream refusal of the replayed state (``refused``: the blocks are
retired and the request resent without replay). The store is a real SQLite file in a
temporary directory, closed and reopened (gracefully, after a crash, or around a
caching-off period) by the restart rule, copied by the offline backup and restore
(relay.storage.backup) with the relay stopped by the backup rule, which then goes on with
the restored copy, and damaged by hand by the tamper rule; fencing and capacity bypass go
through ``ReplayCache``.

After every step, for each of the (newest 24) visible histories the machine knows, the
planner's plan is checked against the model:

- safety: the plan is the recorded chain of its last block, and the model says that whole
  chain is replayable in this history (current generation, admitted, no marker, no other
  unresolved intent at a block's start, untampered, unexpired, accepted snapshot, and no
  later record of this history generated without it); positions strictly increase; each
  block's start and end digests are this history's boundaries; its items are exactly the
  bytes admitted for it;
- liveness: when the model is sure (the newest record at the last recorded assistant
  message is admitted and its whole chain is replayable), the plan is exactly that chain.

Each completion is also checked against the model's admission decision (the rows and
markers ``_observe`` wrote), and after every step the store's unresolved intents and
markers must be exactly the model's. Retention: the clocks move (time passes on both,
a month passes, the wall clock alone steps ±30 s, ±262 s, -2 or ±40 days), every
dispatch's touched records must be retained, unexpired records of its own history, and
a cleanup run must reclaim exactly the payloads the model lets go (none while its
deletion barrier is closed); after every step the payloads kept, each one's touch time
and whether the barrier is open must be the model's.

Budget: 5-10 s by default; ``RELAY_SCENARIO_BUDGET=long`` searches about 25 times longer
with longer runs. A failure prints the shrunk step sequence (a runnable program) and a
``@reproduce_failure(...)`` line: put it on ``ReplayMachine`` to replay that exact run
(``@seed(...)`` or ``pytest --hypothesis-seed=N`` replays a whole search).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from relay.cache.session import CacheSession
from relay.clock import ManualClock
from relay.core.capture import ClientProjection
from relay.core.history_digest import HistoryDigests
from relay.core.json_bytes import encode_body
from relay.core.planner import Plan, plan_replay
from relay.core.receipts import Reason
from relay.core.records import BlockRef, StoredPayload, plan_chain
from relay.errors import StoreLatched
from relay.pipeline.actions import Commit, Dispatch, Flush, Queue, Resolve
from relay.storage.disk_guard import guard_path
from relay.storage.scoped_source import ScopedSource
from relay.storage.verify import verify_store
from tests.support.replay_driver import (
    MAX_CONCURRENT,
    REFUSED,
    Message,
    PipelineDriver,
    Relay,
    answer,
    assistant_positions,
    canonical,
    captured,
    completed_events,
    describe,
    failed_events,
    messages_of,
    output_items,
    parse,
    payload_text,
    replayed,
    said,
    sent_to_client,
    user,
)
from tests.support.replay_model import (
    DAY,
    GRANULARITY,
    RETENTION,
    History,
    Model,
    Record,
    is_prefix,
)

LONG = os.environ.get("RELAY_SCENARIO_BUDGET") == "long"
MAX_HISTORIES = 24  # the newest known visible histories; each is planned after every step
MAX_PENDING = 3  # generations left in flight (or delivering) between steps
MAX_MESSAGES = 14  # branches grow to about six assistant turns (plans of up to six blocks)
# A real SQLite file (WAL, synchronous=FULL); on tmpfs when there is one, since every
# commit's fsync otherwise dominates the run time.
FAST_TMP = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


@dataclass
class Pending:
    """A dispatched generation that has not been resolved yet."""

    session: CacheSession
    start: History
    intent: str
    generation: int  # the scope generation at dispatch: its observation carries it
    prior: tuple[tuple[History, str], ...]  # the dispatched plan, as model refs
    refs: tuple[BlockRef, ...]  # the dispatched plan, as the relay names it
    completed: bool = False  # observation committed, delivery not finished ("held")
    keys: tuple[int, ...] = ()  # the dispatched plan, as observation ids


# --- the plan check (after every step, and at every dispatch) --------------------------------


def check_plan(
    model: Model, history: History, plan: Plan, digests: HistoryDigests, *, where: str = ""
) -> None:
    keys = [block.observation.id for block in plan.blocks]
    rejections = [(r.reason.value, r.position, r.observation_id) for r in plan.rejections]
    context = f"{where} history [{describe(history)}] plan {keys} rejections {rejections}"
    positions = [block.observation.position for block in plan.blocks]
    assert positions == sorted(set(positions)), f"positions not strictly increasing: {context}"
    for block in plan.blocks:
        observation, position = block.observation, block.observation.position
        assert observation.start_digest == digests.boundaries[position], context
        assert observation.end_digest == digests.boundaries[position + 1], context
        record = model.by_key(observation.id)
        assert record is not None, f"replayed a block the model never recorded: {context}"
        assert record.end == history[: position + 1], context
        assert block.text == record.payload.encode(), f"bytes differ: {context}"
    if keys:
        last = model.by_key(keys[-1])
        assert last is not None
        chain = model.chain(last)
        assert chain is not None and [r.key for r in chain] == keys, (
            f"not the recorded chain of its last block: {context}"
        )
        assert model.replayable(chain, history), f"model forbids this replay: {context}"
    expected = model.expected(history, assistant_positions(history))
    if expected is not None:
        assert keys == [r.key for r in expected], (
            f"model expects {[r.key for r in expected]}: {context}"
        )


# --- the state machine --------------------------------------------------------------------------

# Admissions are what the rest builds on: weighted up (sampled_from draws uniformly).
outcomes = st.sampled_from(["admit", "admit", "admit", "noreason", "failed", "interrupted"])
picks = st.integers(min_value=0, max_value=1000)
shapes = st.sampled_from(["text", "tool", "text+tool", "custom", "text+custom", "screenshot"])


def screenshot_turn(n: int) -> list[Message]:
    """A user turn with a screenshot, as Cursor sends one: text plus an ``image_url`` part.
    Each image is distinct (its bytes name ``n``), and the ``detail`` varies, so two
    questions that differ only in their image must never share a replay."""
    image = base64.b64encode(f"png-{n}".encode()).decode()
    return [
        {"type": "text", "text": f"what is on screen {n % 3}?"},  # texts repeat: only the image tells
        {"type": "image_url",
         "image_url": {"url": f"data:image/png;base64,{image}", "detail": ("low", "high")[n % 2]}},
    ]  # fmt: skip


class ReplayMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="replay-sm-", dir=FAST_TMP))
        self.clock = ManualClock()
        self.relay = Relay(self.dir / "cache.sqlite", self.clock)
        self.model = Model(now=self.clock.wall())
        self.model.start_barrier(self.clock.wall(), self.clock.monotonic())
        self.histories: list[History] = []
        self.pending: list[Pending] = []
        self.n = 0
        self.snapshot = "gpt-5-2026-01-01"

    def teardown(self) -> None:
        self.relay.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- helpers ---------------------------------------------------------------------------

    def fresh(self) -> int:
        self.n += 1
        return self.n

    def remember(self, history: History) -> None:
        """Know ``history`` (newest last); the oldest is forgotten beyond the window."""
        if history in self.histories:
            self.histories.remove(history)
        self.histories.append(history)
        del self.histories[:-MAX_HISTORIES]

    def request_for(self, pick: int, back: int) -> History:
        """A known history, or (``back`` > 0) the request that generated one of its
        assistant messages (a regeneration)."""
        history = self.histories[pick % len(self.histories)]
        positions = assistant_positions(history)
        if back == 0 or not positions:
            return history
        return history[: positions[len(positions) - 1 - (back - 1) % len(positions)]]

    def siblings(self, request: History) -> list[tuple[str, str]]:
        """(assistant message, next message) pairs known right after ``request``."""
        found: list[tuple[str, str]] = []
        size = len(request)
        for history in self.histories:
            if len(history) > size + 1 and history[:size] == request:
                pair = (history[size], history[size + 1])
                if json.loads(pair[0])["role"] == "assistant" and pair not in found:
                    found.append(pair)
        return found

    def new_visible(self, shape: str) -> tuple[Message, Message]:
        """A new assistant message (``text``, ``tool`` call, ``text+tool``, or a custom tool
        call: ``custom``, ``text+custom``) and the message the client sends after it (its
        tool result, or a new question; after ``screenshot``, a question with an image)."""
        n = self.fresh()
        if shape in ("text", "screenshot"):
            question = screenshot_turn(n) if shape == "screenshot" else f"q{n}"
            return {"role": "assistant", "content": f"answer {n}"}, {
                "role": "user",
                "content": question,
            }
        call: Message = {"id": f"call_{n}", "type": "function",
                "function": {"name": "read", "arguments": f'{{"path":"f{n}.py"}}'}}  # fmt: skip
        if shape.endswith("custom"):  # freeform input: a patch, not JSON
            patch = f'*** Begin Patch\n*** Update File: f{n}.py\n+"x" \\ {n}\n*** End Patch'
            call = {"id": f"call_{n}", "type": "custom",
                    "custom": {"name": "ApplyPatch", "input": patch}}  # fmt: skip
        content = f"reading f{n}.py" if shape.startswith("text+") else None
        return (
            {"role": "assistant", "content": content, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": f"result {n}"},
        )

    # --- one generation, split in two so that others can run while it is in flight --------

    def start(self, request: History, driver: PipelineDriver | None = None) -> Pending | None:
        """Begin and dispatch a generation for ``request`` (``driver``: through its whole
        chat pipeline); None when it was served uncached because every cache session was
        taken (its position is poisoned)."""
        self.model.now = self.clock.wall()
        if driver is not None:
            driver.start()  # Begin, any guard, Dispatch: up to the send
            session = driver.session
        else:
            session = self.relay.begin(request)
        assert (session is None) == (len(self.pending) >= MAX_CONCURRENT), (
            "only a full session capacity may bypass the cache"
        )
        if session is None:
            self.model.poison(request)
            self.check_poisoned(request)
            self.client_kept_unobserved_answer(request)
            return None
        if driver is not None:
            assert driver.body is not None and Dispatch() in driver.performed
            body = driver.body
        else:
            body = session.dispatch()
        plan = session.plan
        check_plan(self.model, request, plan, self.relay.digests(request), where="dispatch:")
        records = [self.model.by_key(block.observation.id) for block in plan.blocks]
        assert None not in records
        chain = [r for r in records if r is not None]
        # The upstream body carries each selected block once, in place, with store:false.
        assert body["store"] is False and "reasoning.encrypted_content" in body["include"]
        encoded = encode_body(body)
        inputs = json.loads(encoded)["input"]
        for block in plan.blocks:
            items = json.loads(block.text)
            at = [i for i in range(len(inputs)) if inputs[i : i + len(items)] == items]
            assert len(at) == 1, f"a selected block is in the upstream input {len(at)} times"
            assert block.text[1:-1] in encoded, "a block was not sent as stored"
        keys = tuple(block.observation.id for block in plan.blocks)
        pending = Pending(session, request, self.relay.last_intent, self.model.generation,
                          tuple(r.ref for r in chain), plan.refs, keys=keys)  # fmt: skip
        # Touched: the plan, and every record whose payload passed its checks, each of
        # which must be a retained, unexpired, untampered record of this very history.
        assert set(keys) <= set(plan.validated)
        for key in plan.validated:
            record = self.model.by_key(key)
            assert record is not None and record.admitted and is_prefix(record.end, request)
            assert key not in self.model.reclaimed and key not in self.model.tampered
            assert self.model.touched[key] >= self.model.now - RETENTION - GRANULARITY
        self.model.dispatch(pending.intent, request, chain, plan.validated)
        return pending

    def choose_visible(self, request: History, pick: int, shape: str) -> tuple[Message, Message]:
        """The assistant message to generate after ``request`` and the message after it:
        a known sibling's (``pick`` > 0, when there is one) or a new one."""
        siblings = self.siblings(request)
        if pick > 0 and siblings:
            visible, follow = siblings[(pick - 1) % len(siblings)]
            return parse(visible), parse(follow)
        return self.new_visible(shape)

    def follow_for(self, request: History, visible: Message) -> Message:
        for sibling, follow in self.siblings(request):
            if sibling == canonical(visible):
                return parse(follow)
        calls = visible.get("tool_calls")
        if calls:
            return {"role": "tool", "tool_call_id": calls[0]["id"], "content": f"r{self.fresh()}"}
        return {"role": "user", "content": f"q{self.fresh()}"}

    def finish(
        self, pending: Pending, visible: Message, follow: Message, *, outcome: str,
        hold: bool, same_output: bool = False, disk_pressure: bool = False,
        driver: PipelineDriver | None = None,
    ) -> None:  # fmt: skip
        """Feed an output to the session and commit it; ``hold`` leaves it undelivered.
        ``disk_pressure``: the disk has no room for a payload, so it is observed only.
        ``same_output``: byte for byte the output recorded last for ``visible`` (a
        retried identical answer), when there is one."""
        self.model.now = self.clock.wall()
        request, session = pending.start, pending.session
        end = (*request, canonical(visible))
        items = output_items(visible, self.fresh(), reasoning=outcome != "noreason")
        earlier = self.model.at(end)
        if same_output and earlier:
            items = json.loads(earlier[0].payload)

        if outcome == "interrupted":  # the client disconnected mid-stream: output unknown
            session.accepted()  # the pipeline's capture held its first item; none committed
            session.abort("client_disconnected")
            self.model.poison(request)
            self.model.resolve(pending.intent)
            self.check_poisoned(request)
            self.client_kept_unobserved_answer(request)
            return
        if outcome == "failed":
            events = failed_events(items, self.snapshot)
            result = session.complete(captured(session, events, ClientProjection()))
            assert result.kind == "poison", result
            self.model.poison(request)
            self.check_poisoned(request)
        else:
            scope_id = self.relay.scope_id()
            assert scope_id is not None
            end_digest = self.relay.digests(end).boundaries[-1]
            before = {o.id for o in self.relay.store.observations_at(scope_id, end_digest)}
            events = completed_events(items, self.snapshot)
            if driver is not None:  # the pipeline's own capture, committed by its Commit
                driver.feed(events)
                assert driver.committed is not None
                result = driver.committed
            else:
                result = session.complete(captured(session, events, sent_to_client(items)))
            reasoning = any(item["type"] == "reasoning" for item in items)
            admissible = reasoning and not disk_pressure
            assert result.kind == ("admit" if admissible else "observe"), result
            assert result.output_json == payload_text(items)
            observed = self.model.observe(
                start=request, envelope=canonical(visible), payload=payload_text(items),
                admissible=admissible, prior=pending.prior, generation=pending.generation,
                intent=pending.intent, snapshot=self.snapshot, prior_keys=pending.keys,
            )  # fmt: skip
            self.check_observed(pending, end, end_digest, before, observed.record)
            self.remember((*end, canonical(follow)))
        for key in pending.keys:  # referenced in publication: touched again at the commit
            self.model.touch(key)
        pending.completed = True
        if not hold:
            self.deliver(pending)

    def client_kept_unobserved_answer(self, request: History) -> None:
        """The client holds an assistant message the cache never saw, and goes on."""
        unseen = {"role": "assistant", "content": f"unobserved {self.fresh()}"}
        follow = {"role": "user", "content": f"q{self.fresh()}"}
        self.remember((*request, canonical(unseen), canonical(follow)))

    def deliver(self, pending: Pending) -> None:
        pending.session.delivered()
        self.model.resolve(pending.intent)

    def check_poisoned(self, start: History) -> None:
        scope_id = self.relay.scope_id()
        assert scope_id is not None
        digest = self.relay.digests(start).boundaries[-1]
        assert self.relay.store.poisoned_starts(scope_id, [digest]) == {digest}

    def check_observed(
        self, pending: Pending, end: History, end_digest: str, before: set[int],
        record: Record | None,
    ) -> None:  # fmt: skip
        """The rows ``_observe`` wrote are the model's decision."""
        store = self.relay.store
        scope_id = self.relay.scope_id()
        assert scope_id is not None
        new = [o for o in store.observations_at(scope_id, end_digest) if o.id not in before]
        if record is None:
            assert new == [], f"a repeat must not add a row: {new}"
        else:
            assert len(new) == 1, f"expected one new observation, got {new}"
            row = new[0]
            assert row.id == record.key
            assert (row.replayable, row.generation, row.intent_id, row.position) == (
                record.admitted,
                record.generation,
                pending.intent,
                len(pending.start),
            ), f"{row} vs {record}"
            # The plan is one link plus its chain digest; walking the links from the
            # store gives back exactly the dispatched plan, in order.
            plan = row.prior_plan
            assert (plan.count, plan.chain) == (len(pending.refs), plan_chain(pending.refs))
            walked = [] if plan.parent_id is None else store.lineage(
                scope_id, plan.parent_id, plan.count
            )  # fmt: skip
            assert tuple(o.ref for o in reversed(walked)) == pending.refs
            assert row.snapshot == record.snapshot
            payload = store.load_payload(row.id, max_bytes=1 << 20)
            if record.admitted:
                assert payload is not None and payload.output_json == record.payload.encode()
            else:
                assert payload is None, "a non-admitted observation must not store a payload"
        conflicted = end in self.model.conflicted
        assert (store.conflicted_ends(scope_id, [end_digest]) == {end_digest}) == conflicted, (
            f"end-conflict marker should be {'set' if conflicted else 'absent'}"
        )

    # --- rules ----------------------------------------------------------------------------------

    @initialize()
    def first_conversation(self) -> None:
        self.new_conversation(system=False)

    @rule(system=st.booleans(), screenshot=st.booleans())
    def new_conversation(self, system: bool, screenshot: bool = False) -> None:
        n = self.fresh()
        messages: list[Message] = [{"role": "system", "content": f"sys {n}"}] if system else []
        messages.append({"role": "user", "content": screenshot_turn(n) if screenshot
                         else f"hello {n}"})  # fmt: skip
        self.remember(tuple(canonical(m) for m in messages))

    def growing(self) -> list[History]:
        return [h for h in self.histories if len(h) < MAX_MESSAGES]

    def extend(self, history: History, shape: str, outcome: str, hold: bool) -> None:
        """The next assistant turn of ``history``; ``hold``: its delivery is still going
        on (its intent stays) when the next step happens."""
        pending = self.start(history)
        if pending is None:
            return
        visible, follow = self.new_visible(shape)
        hold = hold and len(self.pending) < MAX_PENDING
        self.finish(pending, visible, follow, outcome=outcome, hold=hold)
        if pending.completed and hold:
            self.pending.append(pending)

    @precondition(lambda self: bool(self.growing()))
    @rule(pick=picks, outcome=outcomes, hold=st.booleans())
    def next_text_turn(self, pick: int, outcome: str, hold: bool) -> None:
        """The next assistant turn of a branch: a text answer."""
        growing = self.growing()
        self.extend(growing[pick % len(growing)], "text", outcome, hold)

    @precondition(lambda self: bool(self.growing()))
    @rule(pick=picks, outcome=outcomes, hold=st.booleans())
    def next_tool_turn(self, pick: int, outcome: str, hold: bool) -> None:
        """The next assistant turn of a branch: a tool call (its result follows)."""
        growing = self.growing()
        self.extend(growing[pick % len(growing)], "tool", outcome, hold)

    @precondition(lambda self: bool(self.growing()))
    @rule(pick=picks, outcome=outcomes, hold=st.booleans())
    def next_patch_turn(self, pick: int, outcome: str, hold: bool) -> None:
        """The next assistant turn of a branch: a custom (ApplyPatch) call, its result next."""
        growing = self.growing()
        self.extend(growing[pick % len(growing)], "custom", outcome, hold)

    @precondition(lambda self: bool(self.growing()))
    @rule(pick=picks, outcome=outcomes, shape=shapes,
          hold=st.booleans())  # fmt: skip
    def next_turn_of_a_long_branch(self, pick: int, outcome: str, shape: str, hold: bool) -> None:
        """The same, on one of the longest branches still growing (deeper chains)."""
        growing = self.growing()
        longest = max(len(h) for h in growing)
        deep = [h for h in growing if len(h) == longest]
        self.extend(deep[pick % len(deep)], shape, outcome, hold)

    @rule(pick=picks, back=st.integers(1, 3), visible=st.integers(0, 3),
          shape=shapes, outcome=outcomes)  # fmt: skip
    def regenerate(self, pick: int, back: int, visible: int, shape: str, outcome: str) -> None:
        """An earlier turn generated again: with the same visible message as a known
        sibling (``visible`` > 0: a conflict, or a repeat of the very same output) or with
        a different one (a new branch)."""
        request = self.request_for(pick, back)
        pending = self.start(request)
        if pending is None:
            return
        message, follow = self.choose_visible(request, visible, shape)
        self.finish(pending, message, follow, outcome=outcome, hold=False)

    @precondition(lambda self: bool(self.model.records))
    @rule(pick=picks)
    def retry_identical_output(self, pick: int) -> None:
        """A recorded generation happens again with the very same output bytes: a repeat
        (or, when its plan changed since, a conflict)."""
        record = self.model.records[pick % len(self.model.records)]
        pending = self.start(record.start)
        if pending is None:
            return
        visible = json.loads(record.envelope)
        follow = self.follow_for(record.start, visible)
        self.finish(pending, visible, follow, outcome="admit", hold=False, same_output=True)

    @rule(pick=picks, back=st.integers(0, 2), outcome=outcomes, resend_fails=st.booleans())
    def upstream_refuses_replay(
        self, pick: int, back: int, outcome: str, resend_fails: bool
    ) -> None:
        """The upstream refuses a request's replayed blocks (its key rotated, say) before
        generating: they are retired for good, and the request is resent without replay;
        that resend then ends like any generation, or fails in its turn."""
        request = self.request_for(pick, back)
        pending = self.start(request)
        if pending is None:
            return
        refusal = pending.session.refused(REFUSED)
        if not pending.prior:  # nothing was replayed: an ordinary upstream failure
            assert refusal is None
            pending.session.abort("upstream_failed")
            self.model.poison(request)
            self.model.resolve(pending.intent)
            self.check_poisoned(request)
            return
        assert refusal is not None and refusal.resend is not None
        assert refusal.error.envelope()["error"]["message"] == (
            "The encrypted content <redacted> could not be verified."
        )
        plan = [r for r in map(self.model.by_ref, pending.prior) if r is not None]
        self.model.reject(plan, pending.intent, self.relay.last_intent, request)
        assert session_plan_is_empty(pending.session)
        assert "reasoning" not in json.dumps(refusal.resend["input"])
        assert pending.session.refused(REFUSED) is None, "a resend is refused like any request"
        resent = Pending(pending.session, request, self.relay.last_intent, pending.generation,
                         (), ())  # fmt: skip
        if resend_fails:
            resent.session.abort("upstream_failed")
            self.model.poison(request)
            self.model.resolve(resent.intent)
            return
        visible, follow = self.new_visible("text")
        self.finish(resent, visible, follow, outcome=outcome, hold=False)

    @precondition(lambda self: bool(self.growing()))
    @rule(pick=picks)
    def turn_through_the_pipeline(self, pick: int) -> None:
        """The next text turn of a branch driven as the chat shell drives it: a whole
        ChatPipeline whose actions are performed against the real cache (the decision,
        a capacity bypass's poison before the send, dispatch, the pipeline's capture
        committed before the terminal frame, the resolve after [DONE])."""
        growing = self.growing()
        driver = PipelineDriver(self.relay, growing[pick % len(growing)])
        pending = self.start(driver.history, driver=driver)
        names = [type(action).__name__ for action in driver.performed]
        send = names.index("SendUpstream")
        if pending is None:  # bypassed: poisoned before anything was forwarded
            assert names[:send] == ["Begin", "Poison", "Log"], names
            return
        assert names[:send] == ["Begin", "Log", "Dispatch"], names
        visible, follow = self.new_visible("text")
        self.finish(pending, visible, follow, outcome="admit", hold=True, driver=driver)
        performed = driver.performed
        commit = next(i for i, a in enumerate(performed) if isinstance(a, Commit))
        terminal = next(i for i, a in enumerate(performed) if isinstance(a, Queue)
                        and a.crash_point == "before_terminal_frame")  # fmt: skip
        assert commit < terminal, "a terminal frame before the commit"
        driver.end()
        resolve = performed.index(Resolve())  # only once the client took [DONE]
        assert performed[resolve - 1] == Flush(crash_point="after_done_frame")
        self.model.resolve(pending.intent)

    @precondition(lambda self: len(self.pending) < MAX_PENDING)
    @rule(pick=picks, back=st.integers(0, 2))
    def dispatch_concurrent(self, pick: int, back: int) -> None:
        """A generation dispatched and still in flight: its intent competes at its start."""
        pending = self.start(self.request_for(pick, back))
        assert pending is not None
        self.pending.append(pending)

    @precondition(lambda self: any(not p.completed for p in self.pending))
    @rule(which=picks, visible=st.integers(0, 3), shape=shapes,
          outcome=outcomes, hold=st.booleans())  # fmt: skip
    def finish_concurrent(
        self, which: int, visible: int, shape: str, outcome: str, hold: bool
    ) -> None:
        open_ = [p for p in self.pending if not p.completed]
        pending = open_[which % len(open_)]
        message, follow = self.choose_visible(pending.start, visible, shape)
        self.finish(pending, message, follow, outcome=outcome, hold=hold)
        if not pending.completed or not hold:
            self.pending.remove(pending)

    @precondition(lambda self: any(p.completed for p in self.pending))
    @rule(which=picks)
    def deliver_held(self, which: int) -> None:
        held = [p for p in self.pending if p.completed]
        pending = held[which % len(held)]
        self.deliver(pending)
        self.pending.remove(pending)

    @rule(pick=picks, index=picks)
    def edit_earlier_message(self, pick: int, index: int) -> None:
        """The client edits one message of a branch: a new branch whose suffix differs."""
        history = self.histories[pick % len(self.histories)]
        i = index % len(history)
        message = json.loads(history[i])
        n = self.fresh()
        calls = message.get("tool_calls")
        if calls and calls[0]["type"] == "custom":
            calls[0]["custom"]["input"] = f"*** Begin Patch\n+edited {n}\n*** End Patch"
        elif calls:
            calls[0]["function"]["arguments"] = f'{{"path":"edited{n}.py"}}'
        else:
            message["content"] = f"edited {n}"
        self.remember((*history[:i], canonical(message), *history[i + 1 :]))

    def stop_generations(self, how: str) -> list[History]:
        """The relay stops: a graceful shutdown aborts the sessions in flight (poisoning
        those not yet observed); after a crash the intents stay for startup recovery to
        poison, delivering ones included. The starts the model now holds poisoned."""
        poisoned = []
        for pending in self.pending:
            if how != "crash":  # the pipeline's ending: a committed output is known
                pending.session.abort("shutdown", poison=not pending.completed)
            if how == "crash" or not pending.completed:
                self.model.poison(pending.start)
                poisoned.append(pending.start)
            self.model.resolve(pending.intent)
        self.pending.clear()
        return poisoned

    @rule(how=st.sampled_from(["graceful", "crash", "disabled_idle", "disabled_serving"]))
    def restart(self, how: str) -> None:
        """Close the store and reopen the same file, after a graceful stop or a crash;
        serving a while with caching off leaves a coverage gap: the next enabled open
        advances generations (a cache-off run that forwards nothing leaves none)."""
        exists = self.relay.scope_id() is not None
        poisoned = self.stop_generations(how)
        kept = ("scopes", "observations", "payloads", "payload_bytes")
        before = {key: self.relay.store.stats()[key] for key in kept}
        self.relay.restart(disabled=how.removeprefix("disabled_") if "disabled" in how else None)
        after = self.relay.store.stats()
        assert {key: after[key] for key in kept} == before, "a restart lost committed state"
        assert after["intents"] == 0
        for start in poisoned:
            self.check_poisoned(start)
        self.model.generation += int(exists and how == "disabled_serving")
        self.model.start_barrier(self.clock.wall(), self.clock.monotonic())

    @rule(how=st.sampled_from(["graceful", "crash"]))
    def offline_backup_and_restore(self, how: str) -> None:
        """The relay stops (gracefully, or killed with generations in flight); its store is
        backed up and the backup restored into a new live file, and the relay goes on with
        that file. The copy keeps every row, with a fresh secret (the old scope digest is
        no longer anyone's), its open intents recovered (poisoned) and a coverage gap,
        which the enabled start consumes by advancing the old scope's generation: nothing
        recorded before replays, even through the old scope. New conversations replay."""
        old_scope, old_generation = self.relay.scope, self.relay.generation()
        poisoned = self.stop_generations(how)
        starts = [self.relay.digests(start).boundaries[-1] for start in poisoned]
        old_digests = {h: self.relay.digests(h) for h in self.histories}
        kept = ("scopes", "observations", "payloads", "payload_bytes", "markers")
        before = {key: self.relay.store.stats()[key] for key in kept}
        backup = self.relay.restore_from_backup()
        self.check_verified(backup)
        store = self.relay.store
        after = store.stats()
        assert {key: after[key] for key in kept[:-1]} == {key: before[key] for key in kept[:-1]}
        assert after["intents"] == 0 and after["markers"] >= before["markers"]
        assert self.relay.scope.digest != old_scope.digest, "the copy must have a new secret"
        assert self.relay.scope_id() is None  # no request reached the new scope yet
        old = store.find_scope(old_scope.digest)
        assert (old is None) == (old_generation is None)
        if old is not None and old_generation is not None:
            assert old.generation == old_generation + 1  # the gap quarantined it
            assert store.poisoned_starts(old.id, starts) == set(starts)  # recovered
            for history, digests in old_digests.items():
                plan = plan_replay(
                    digests, messages_of(history), ScopedSource(store, old.id),
                    generation=old.generation, now=self.clock.wall(),
                )  # fmt: skip
                assert plan.blocks == (), f"a pre-snapshot block replays: [{describe(history)}]"
        event(f"backup restored ({how})")
        self.model.restored_from_backup()
        self.model.start_barrier(self.clock.wall(), self.clock.monotonic())

    def check_verified(self, backup: Path) -> None:
        """``relay cache verify`` on the backup finds exactly the model's damage: the
        tampered payloads (a changed letter may also break the block's JSON or its
        fields), no broken link anywhere; the reclaimed payloads are notes, not damage."""
        tally = verify_store(backup).tally
        tampered = self.model.tampered - self.model.reclaimed
        damage = dict(tally.damage)
        assert damage.pop("payload_digest_mismatch", 0) == len(tampered), tally.damage
        assert set(damage) <= {"payload_malformed", "call_pairing_broken", "duplicate_item"}
        assert set(tally.examples.get("payload_digest_mismatch", ())) <= tampered
        notes = tally.notes
        assert notes.get("payload_reclaimed", 0) == len(self.model.reclaimed), notes
        assert set(notes) <= {"payload_reclaimed"}, notes  # no intent left, none unlinked
        assert tally.records == len(self.model.records)

    @precondition(lambda self: not self.pending and bool(self.growing()))
    @rule(pick=picks, room_after_release=st.booleans())
    def request_on_a_full_disk(self, pick: int, room_after_release: bool) -> None:
        """The disk fills up. The next safety write (the dispatch intent) fails, releases
        the reserve and is retried once. With room after that, the request goes ahead and
        its answer is observed without its payload (disk pressure); the reserve is
        allocated again at the first admission after the disk has room. Without, the
        cache latches: nothing is forwarded, no request is cached, the store is refused
        on reopening while its .guard exists, and after the operator deletes the guard
        startup recovery runs as after a crash."""
        growing = self.growing()
        request = growing[pick % len(growing)]
        disk, guard = self.relay.disk, guard_path(self.relay.path)
        assert self.relay.cache.safety is not None
        reserve = self.relay.cache.safety.guard.reserve
        if not reserve.exists():  # released by an earlier full disk: back once there is room
            assert self.relay.cache.safety.guard.ensure_reserve()
        disk.full, disk.room_after_release, disk.failures = True, room_after_release, 0
        try:
            if room_after_release:
                pending = self.start(request)
                assert pending is not None
                assert disk.failures == 1 and not reserve.exists(), "the reserve was not spent"
                visible, follow = self.new_visible("text")
                self.finish(pending, visible, follow, outcome="admit", hold=False,
                            disk_pressure=True)  # fmt: skip
                assert not guard.exists()
                event("full disk: the reserve made room")
                return
            session = self.relay.session(request)
            with pytest.raises(StoreLatched):
                session.dispatch()
            assert disk.failures == 2 and guard.exists(), "two failures must latch"
            event("full disk: latched")
            session.abort("cache_unavailable")  # nothing was dispatched: nothing to poison
            with pytest.raises(StoreLatched):
                self.relay.begin(request)  # latched: a cached request would need an intent
        finally:
            disk.full = False
        before = self.relay.store.stats()
        self.relay.cache.close()
        with pytest.raises(StoreLatched, match=r"\.guard exists"):
            self.relay._open()
        guard.unlink()  # the operator's last step (docs/replay-cache.md: disk pressure)
        self.relay.cache = self.relay._open()
        self.model.start_barrier(self.clock.wall(), self.clock.monotonic())  # a new start
        assert self.relay.store.stats() == before, "the latch changed the store"

    @rule()
    def advance_generation(self) -> None:
        """Every existing scope starts a new generation (a scope created later starts at
        generation 1): nothing recorded before replays. (Scopes of restored backups'
        earlier secrets advance too; the model has done with them.)"""
        exists = self.relay.scope_id() is not None
        scopes = self.relay.store.stats()["scopes"]
        with self.relay.store.transaction():
            assert self.relay.store.advance_generations() == scopes
        self.model.generation += int(exists)

    @rule()
    def unobservable_generation(self) -> None:
        """Traffic the cache cannot observe (direct Responses calls) fences the scope:
        every position in flight is poisoned and the generation advances."""
        exists = self.relay.scope_id() is not None
        # As the passthrough does: its decision, then its guard performed (the fence).
        began = self.relay.cache.decide_passthrough("gpt-5", None, "req_fence")
        assert began.guard == "fence" and began.session is None
        began.write_guard()
        for pending in self.pending:
            self.model.poison(pending.start)
            self.check_poisoned(pending.start)
        self.model.generation += int(exists)

    @precondition(lambda self: any(r.admitted and r.key not in self.model.tampered
                                   and r.key not in self.model.reclaimed
                                   for r in self.model.records))  # fmt: skip
    @rule(pick=picks, where=picks)
    def tamper_payload(self, pick: int, where: int) -> None:
        """One stored payload byte changes: that block (and whatever needs it) never
        replays again, and a plan that would have used it names the digest mismatch."""
        self.model.now = self.clock.wall()
        candidates = [r for r in self.model.records
                      if r.admitted and r.key not in self.model.tampered
                      and r.key not in self.model.reclaimed]  # fmt: skip
        record = candidates[pick % len(candidates)]
        relied_on = [
            h for h in self.histories
            if record in (self.model.expected(h, assistant_positions(h)) or [])
        ]  # fmt: skip
        self.relay.tamper(record.key, where)
        self.model.tampered.add(record.key)
        for history in relied_on:
            plan, _ = self.relay.plan(history)
            assert (Reason.PAYLOAD_DIGEST_MISMATCH, record.key) in [
                (r.reason, r.observation_id) for r in plan.rejections
            ], f"[{describe(history)}]: {plan.rejections}"

    @rule(seconds=st.sampled_from([1, 3600, 25 * 3600, 16 * DAY]),
          new_snapshot=st.booleans())  # fmt: skip
    def time_passes(self, seconds: float, new_snapshot: bool) -> None:
        """Payloads idle past retention expire; an older model snapshot stops being
        accepted a day after it was last seen, unless it is still the latest."""
        self.clock.advance(seconds)
        self.clocks_read()
        if new_snapshot:
            self.snapshot = f"gpt-5-snapshot-{self.fresh()}"

    def clocks_read(self) -> None:
        """The relay reads its clock after every move (its next request or cleanup run
        would): the deletion barrier sees each clock state."""
        self.relay.watched.wall()
        self.model.clock_read(self.clock.wall(), self.clock.monotonic())

    @rule(days=st.sampled_from([29.0, 30.0, 31.0]))
    def weeks_pass(self, days: float) -> None:
        """About a month passes on both clocks: the deletion barrier opens at 30 days."""
        self.clock.advance(days * DAY)
        self.clocks_read()

    @rule(seconds=st.sampled_from([40 * DAY, -2 * DAY, 262.0, -262.0, 30.0, -30.0, -40 * DAY]))
    def wall_clock_moves(self, seconds: float) -> None:
        """The wall clock steps (NTP, a manual change, a restored VM) while monotonic time
        stands still: a step back, or a drift over 60 s, restarts the deletion barrier."""
        self.clock.jump_wall(seconds)
        self.clocks_read()

    @rule()
    def cleanup_runs(self) -> None:
        """An hourly cleanup run: exactly the payloads the model lets go are reclaimed
        (none while the barrier is closed); observations and markers all stay."""
        self.model.now = self.clock.wall()
        before = self.relay.store.stats()
        expected = self.model.cleanup()
        for key in expected:  # coarse touches never cut a payload's idle window short
            assert self.model.used[key] < self.model.barrier_last[0] - RETENTION, key
        result = self.relay.cleanup.run()
        assert (result is not None) == self.model.barrier_open
        reclaimed = 0 if result is None else result.reclaimed
        assert reclaimed == len(expected), (result, sorted(expected))
        event(f"cleanup: barrier {'open' if result else 'closed'}, reclaimed {min(reclaimed, 3)}+")
        after = self.relay.store.stats()
        assert after["payloads"] == before["payloads"] - reclaimed
        for table in ("observations", "markers", "scopes", "dependencies"):
            assert after[table] == before[table], table

    # --- invariants -----------------------------------------------------------------------------

    @invariant()
    def retention_matches(self) -> None:
        """The payloads kept, their touch times and the barrier are exactly the model's."""
        model = self.model
        kept = {key for key in model.touched if key not in model.reclaimed}
        loaded = self.relay.store.load_payloads(list(model.touched), max_bytes=1 << 20)
        assert set(loaded) == kept
        for key in kept:
            row = loaded[key]
            assert isinstance(row, StoredPayload) and row.touched_at == model.touched[key], key
        assert self.relay.watched.barrier.open == model.barrier_open

    @invariant()
    def generation_matches(self) -> None:
        generation = self.relay.generation()
        assert generation is None or generation == self.model.generation

    @invariant()
    def intents_and_markers_match(self) -> None:
        """Unresolved intents and safety markers are exactly the model's."""
        store, scope_id = self.relay.store, self.relay.scope_id()
        intents = {i.id: i.start_digest for i in store.unresolved_intents()}
        digest = self.relay.digests
        assert intents == {i: digest(s).boundaries[-1] for i, s in self.model.intents.items()}
        if scope_id is None:
            return
        poisoned = {digest(start).boundaries[-1] for start in self.model.poisoned}
        conflicted = {digest(end).boundaries[-1] for end in self.model.conflicted}
        rejected = {digest(end).boundaries[-1] for end in self.model.rejected}
        assert store.poisoned_starts(scope_id, poisoned) == poisoned
        assert store.conflicted_ends(scope_id, conflicted) == conflicted
        assert store.rejected_ends(scope_id, rejected) == rejected
        markers = len(poisoned) + len(conflicted) + len(rejected) + self.model.archived_markers
        assert store.stats()["markers"] == markers, "a marker too many"

    @invariant()
    def every_plan_agrees_with_the_model(self) -> None:
        self.model.now = self.clock.wall()
        for history in self.histories:
            plan, digests = self.relay.plan(history)
            check_plan(self.model, history, plan, digests)


ReplayMachine.TestCase.settings = settings(
    max_examples=1000 if LONG else 75,
    stateful_step_count=80 if LONG else 40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestReplayStateMachine = ReplayMachine.TestCase


# --- examples: the trickiest transitions, step by step -------------------------------------


def session_plan_is_empty(session: CacheSession) -> bool:
    """After a refusal the session's plan replays nothing and names why."""
    plan = session.plan
    return not plan.blocks and any(r.reason is Reason.UPSTREAM_REJECTED for r in plan.rejections)


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    opened = Relay(tmp_path / "cache.sqlite", ManualClock())
    yield opened
    opened.close()


@pytest.mark.parametrize("ancestor_first", [True, False], ids=["ancestor-first", "child-first"])
def test_identical_retries_after_a_generation_advance(relay: Relay, ancestor_first: bool) -> None:
    """After a generation advance, identical outputs seen again become new-generation
    records; whether a child keeps its provenance depends on what was dispatched with it."""
    u0, a1, u2, a3 = user("hi"), said("one"), user("more"), said("two")
    _, x = answer(relay, (u0,), "one", 1)
    _, y = answer(relay, (u0, a1, u2), "two", 2)
    whole = (u0, a1, u2, a3, user("next"))
    assert replayed(relay, whole) == (["rs_1", "rs_2"], [])
    with relay.store.transaction():
        relay.store.advance_generations()
    assert replayed(relay, whole)[0] == []

    if ancestor_first:
        answer(relay, (u0,), "one", 0, items=x)  # a repeat in the new generation: a new row
        answer(relay, (u0, a1, u2), "two", 0, items=y)  # dispatched with X again: same plan
        assert replayed(relay, whole) == (["rs_1", "rs_2"], [])
    else:
        # Y again while X is stale: dispatched without X, so its provenance differs.
        answer(relay, (u0, a1, u2), "two", 0, items=y)
        answer(relay, (u0,), "one", 0, items=x)
        scope_id = relay.scope_id()
        assert scope_id is not None
        end = relay.digests(whole).boundaries[4]
        assert relay.store.conflicted_ends(scope_id, [end]) == {end}
        assert replayed(relay, (u0, a1, u2)) == (["rs_1"], [])
        blocks, reasons = replayed(relay, whole)
        assert blocks == []  # X may not sit beneath the retry of Y made without it
        assert Reason.DESCENDANT_WITHOUT_BLOCK in reasons


@pytest.mark.parametrize("rival", ["delivered", "aborted"])
def test_a_held_generation_competes_with_its_rivals_but_not_itself(
    relay: Relay, rival: str
) -> None:
    """Two generations in flight at one position. An observation committed but not yet
    delivered keeps its intent: it blocks the other's block, never its own."""
    u0 = user("hi")
    first, second = relay.session((u0,)), relay.session((u0,))
    first.dispatch()
    second.dispatch()
    answer(relay, (u0,), "one", 1, session=first, deliver=False)
    one = (u0, said("one"), user("next"))
    assert replayed(relay, one) == ([], [Reason.COMPETING_INTENT])  # the second is in flight
    if rival == "aborted":
        second.abort("client_disconnected")  # unknown output at this position: poisoned
        first.delivered()
        assert replayed(relay, one) == ([], [Reason.START_POISONED])
        return
    answer(relay, (u0,), "two", 2, session=second, deliver=False)
    two = (u0, said("two"), user("next"))
    assert replayed(relay, two) == ([], [Reason.COMPETING_INTENT])  # the first is delivering
    first.delivered()
    assert replayed(relay, two) == (["rs_2"], [])  # only its own intent is left
    assert replayed(relay, one) == ([], [Reason.COMPETING_INTENT])
    second.delivered()
    assert replayed(relay, one) == (["rs_1"], [])


@pytest.mark.parametrize("damage", [b"\xff", b" "], ids=["not-utf8", "utf8"])
def test_a_payload_damaged_on_disk_is_refused_not_failed(relay: Relay, damage: bytes) -> None:
    """Payload text is read as its stored bytes: damage, whether or not it leaves valid
    UTF-8, fails the hash check (no replay, a receipt) rather than the request."""
    u0 = user("hi")
    answer(relay, (u0,), "one", 1)
    follow = (u0, said("one"), user("more"))
    assert replayed(relay, follow) == (["rs_1"], [])
    conn = relay.store._conn
    assert conn is not None
    conn.execute("UPDATE payloads SET output_json = CAST(CAST(output_json AS BLOB) || ? AS TEXT)",
                 (damage,))  # fmt: skip
    assert replayed(relay, follow) == ([], [Reason.PAYLOAD_DIGEST_MISMATCH])
    session = relay.session(follow)
    session.dispatch()  # no StoreError: the request goes out without replay
    assert session.plan.blocks == ()
    session.abort("test")


def test_dispatch_renews_a_payload_past_its_admission_age(relay: Relay) -> None:
    """Retention is idle time: a block selected for dispatch is touched, one never used
    again expires 30 days after admission."""
    u0, v0 = user("hi"), user("elsewhere")
    answer(relay, (u0,), "one", 1)
    answer(relay, (v0,), "other", 2)
    relay.clock.advance(16 * DAY)
    session, _ = answer(relay, (u0, said("one"), user("more")), "two", 3)
    assert [json.loads(b.text)[0]["id"] for b in session.plan.blocks] == ["rs_1"]  # touched now
    relay.clock.advance(16 * DAY)
    assert replayed(relay, (u0, said("one"), user("more"))) == (["rs_1"], [])
    assert replayed(relay, (v0, said("other"), user("more"))) == ([], [Reason.RECORD_EXPIRED])
