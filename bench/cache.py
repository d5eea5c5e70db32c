"""Benchmarks of the cache's per-request path, called by the lead bench (no CLI here).

Everything goes through the real objects the chat handler uses: ``ReplayCache.begin``
(eligibility and identity), ``CacheSession.dispatch`` (planning, then the intent, pins
and touches in one ``BEGIN IMMEDIATE`` transaction) and ``CacheSession.complete`` (the
observation commit), over a real SQLite store (WAL, ``synchronous=FULL``) in a temporary
directory. Nothing here asserts a time limit.
"""

from __future__ import annotations

import cProfile
import functools
import hashlib
import json
import pstats
import random
import statistics
import tempfile
import time
from base64 import b64encode
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.identity import (
    SIZES,
    best_of,
    cursor_history,
    paired_ratio,
    recorded_request,
    sampled_times,
)
from relay.app.runtime import Runtime
from relay.cache.replay_cache import ReplayCache
from relay.cache.session import CacheSession
from relay.clock import SystemClock
from relay.core.capture import PAYLOAD_DOMAIN, ClientProjection, OutputCapture, finish_capture
from relay.core.history_digest import HistoryDigests, history_digests
from relay.core.hot_blocks import HotBlocks
from relay.core.plan_memo import PlanMemo
from relay.core.planner import Plan, plan_replay
from relay.core.records import EMPTY_PLAN, Observation, ScopeRow
from relay.core.responses_events import decode
from relay.core.scope import Scope, build_scope
from relay.settings.config import Config
from relay.settings.routing import resolve_model
from relay.storage.scoped_source import ScopedSource
from relay.translate.events import ChatCompletion
from relay.translate.request import translate_request
from relay.translate.request_types import TranslatedRequest
from relay.translate.responses_to_chat import project_output, response_to_chat_completion

KEY = "sk-bench"
TOKEN = "bench-relay-token-0123456789"
SNAPSHOT = "gpt-5-2025-08-07"
CIPHERTEXT_BYTES = 1536  # an encrypted reasoning item of a few KiB, as real ones are


def bench_config(data_dir: Path) -> Config:
    return Config(
        data_dir=data_dir,
        relay_token=TOKEN,
        openai_api_key=KEY,
        openai_base_url="http://127.0.0.1:9/v1",  # never contacted
        reasoning_cache_enabled=True,
    )


def open_cache(config: Config) -> ReplayCache:
    return ReplayCache.open(
        config,
        SystemClock(),
        upstream_url=config.responses_url,
        upstream_credential=KEY,
        relay_token=TOKEN,
        new_id=Runtime.new_id,
    )


def translated(config: Config, body: dict[str, Any]) -> TranslatedRequest:
    target = resolve_model(body.get("model"), config.model_aliases)
    return translate_request(
        body, target, reasoning_summaries=config.reasoning_summaries_as_content
    )


def identity_of(config: Config, cache: ReplayCache, request: TranslatedRequest,
                body: dict[str, Any]) -> tuple[Scope, HistoryDigests]:  # fmt: skip
    """The scope and digests ``begin`` computes for this request (same inputs)."""
    assert cache.store is not None
    url = config.responses_url.split("://", 1)
    origin, endpoint = url[0] + "://" + url[1].split("/", 1)[0], "/" + url[1].split("/", 1)[1]
    scope = build_scope(
        secret=cache.store.secret, upstream_origin=origin, endpoint=endpoint, credential=KEY,
        relay_token=TOKEN, caller=request.caller, upstream_body=request.upstream_body,
        openai_beta=None, body_shape=request.shape,
    )  # fmt: skip
    return scope, history_digests(
        scope, body["messages"], exclude_reasoning_content=config.reasoning_summaries_as_content
    )


def output_items(message: dict[str, Any], number: int) -> list[dict[str, Any]]:
    """The original Responses output an assistant message was generated from: reasoning
    with its ciphertext, the text as an ``output_text`` message, then each call."""
    token = b64encode(random.Random(number).randbytes(CIPHERTEXT_BYTES)).decode()
    items: list[dict[str, Any]] = [
        {"id": f"rs_bench_{number}", "type": "reasoning", "summary": [],
         "encrypted_content": "gAAAAA" + token},
    ]  # fmt: skip
    if message.get("content"):
        items.append({
            "id": f"msg_bench_{number}", "type": "message", "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "annotations": [], "text": message["content"]}],
        })  # fmt: skip
    for index, call in enumerate(message.get("tool_calls") or []):
        items.append({
            "id": f"fc_bench_{number}_{index}", "type": "function_call", "status": "completed",
            "call_id": call["id"], "name": call["function"]["name"],
            "arguments": call["function"]["arguments"],
        })  # fmt: skip
    return items


def populate(config: Config, cache: ReplayCache, request: TranslatedRequest,
             body: dict[str, Any]) -> int:  # fmt: skip
    """Admit every assistant block of this history, as the relay would have while the
    conversation grew: each record's plan is its predecessors' chain (capped so the plan
    stays within ``max_plan_records``). Returns the number of records."""
    store = cache.store
    assert store is not None
    scope, history = identity_of(config, cache, request, body)
    cap = config.reasoning_cache_max_plan_records - 1
    now = time.time()
    chain: list[Observation] = []
    with store.transaction():
        row = store.scope_for(scope.digest, scope.targeting)
        for number, block in enumerate(history.assistant_blocks):
            text = json.dumps(
                output_items(body["messages"][block.position], number),
                ensure_ascii=False, separators=(",", ":"),
            )  # fmt: skip
            raw = text.encode("utf-8")
            fingerprint = hashlib.sha256(PAYLOAD_DOMAIN + raw).hexdigest()
            depth = min(number, cap)
            observation = store.add_observation(
                scope_id=row.id, generation=row.generation, position=block.position,
                start_digest=block.start_digest, end_digest=block.end_digest,
                envelope_fingerprint=block.envelope_fingerprint,
                payload_fingerprint=fingerprint, output_hash=hashlib.sha256(raw).hexdigest(),
                prior_plan=chain[depth - 1].chain_plan if depth else EMPTY_PLAN, intent_id=None,
                snapshot=SNAPSHOT, replayable=True, now=now,
            )  # fmt: skip
            store.put_payload(observation.id, text, now)
            chain.append(observation)
    return len(chain)


def session_for(cache: ReplayCache, request: TranslatedRequest,
                body: dict[str, Any]) -> CacheSession:  # fmt: skip
    session = cache.begin(request, body, Runtime.new_id("bench-"))
    assert session is not None, f"not cached: {dict(cache.metrics.skipped)}"
    return session


def bench_cache_scaling(sizes: Sequence[int] = SIZES, *, repeat: int = 7) -> dict[str, Any]:
    """``begin`` + ``dispatch`` against ``json.loads`` of the same request body.

    ``plan`` is the planning inside ``dispatch`` on its own (the same ``plan_replay`` over
    the same store and hot cache, outside a transaction): ``begin`` + ``plan`` is the
    issue's "identity + planning" (target ≤ 2x loads), ``begin`` + ``dispatch`` adds the
    intent. The hot cache is warm there, as it is for Cursor's next turn of the same
    conversation; ``plan_cold`` plans with an empty one and an empty plan memo (the first
    request after a start), verifying and caching every payload and every link.

    Per size, over a store holding every assistant block of the history: best seconds of
    ``json.loads`` and of ``begin`` (eligibility and identity; sampled round-robin like
    the identity bench, each session aborted before dispatch), and best and median of
    ``dispatch`` (planning, the intent transaction with its fsync, the upstream body; one
    request per sample, resolved with ``delivered`` outside the timing). ``total`` is
    best ``begin`` + best ``dispatch``; ``ratio`` = total / loads; the ratios of ``begin``
    and ``plan`` to loads are medians of paired rounds (:func:`paired_ratio`); cost per
    message; the blocks the plan replays.
    """
    request_template = recorded_request()
    rows = []
    for size in sizes:
        with tempfile.TemporaryDirectory() as data:
            config = bench_config(Path(data))
            cache = open_cache(config)
            try:
                text = json.dumps({**request_template, "messages": cursor_history(size)})
                body = json.loads(text)
                request = translated(config, body)
                records = populate(config, cache, request, body)

                def loads(text: str = text) -> object:
                    return json.loads(text)

                def begin(
                    cache: ReplayCache = cache, request: TranslatedRequest = request,
                    body: Any = body,
                ) -> None:  # fmt: skip
                    session_for(cache, request, body).abort("bench")  # never dispatched

                scope, history = identity_of(config, cache, request, body)
                assert cache.store is not None
                with cache.store.transaction():
                    row = cache.store.scope_for(scope.digest, scope.targeting)

                def planning(
                    cache: ReplayCache = cache, history: HistoryDigests = history,
                    body: Any = body, row: ScopeRow = row, cold: bool = False,
                ) -> Plan:  # fmt: skip
                    assert cache.store is not None
                    hot = cache._context.hot_blocks
                    return plan_replay(
                        history, body["messages"], ScopedSource(cache.store, row.id),
                        generation=row.generation, now=time.time(),
                        limits=cache._context.plan_limits,
                        hot=HotBlocks(hot.capacity_bytes) if cold else hot,
                        memo=PlanMemo() if cold else cache._context.plan_memo,
                    )  # fmt: skip

                samples = sampled_times(
                    {"loads": loads, "begin": begin, "plan": planning,
                     "plan_cold": functools.partial(planning, cold=True)},
                    repeat,
                )  # fmt: skip
                best = best_of(samples)
                dispatches: list[float] = []
                for _ in range(repeat + 1):  # the first round warms up
                    session = session_for(cache, request, body)
                    start = time.perf_counter()
                    session.dispatch()
                    dispatches.append(time.perf_counter() - start)
                    session.delivered()
                plan = session.plan
            finally:
                cache.close()
        dispatch = min(dispatches[1:])
        total = best["begin"] + dispatch
        rows.append({
            "messages": size, "body_bytes": len(text.encode("utf-8")), "records": records,
            "replayed_blocks": len(plan.blocks), "rejections": len(plan.rejections),
            "loads_seconds": best["loads"], "begin_seconds": best["begin"],
            "dispatch_seconds": dispatch, "plan_seconds": best["plan"],
            "plan_cold_seconds": best["plan_cold"],
            "ratio_identity_plan": paired_ratio(samples, ["begin", "plan"], "loads"),
            "ratio_identity_plan_cold": paired_ratio(samples, ["begin", "plan_cold"], "loads"),
            "dispatch_median_seconds": statistics.median(dispatches[1:]),
            "total_seconds": total,
            "ratio": total / best["loads"],
            "ratio_identity": paired_ratio(samples, ["begin"], "loads"),
            "us_per_message": total / size * 1e6,
            "identity_us_per_message": best["begin"] / size * 1e6,
            "dispatch_us_per_message": dispatch / size * 1e6,
        })  # fmt: skip

    def linearity(key: str) -> float:
        return rows[-1][key] / rows[-2][key] if len(rows) > 1 else 1.0

    return {
        "rows": rows,
        "linearity": linearity("us_per_message"),
        "linearity_identity": linearity("identity_us_per_message"),
        "target_ratio": 2.0,
    }


# --- SQLite commit costs -----------------------------------------------------------------


def completed_output(text: str, number: int) -> list[dict[str, Any]]:
    return output_items({"content": text}, number)


def feed_completion(
    session: CacheSession, output: list[dict[str, Any]]
) -> tuple[OutputCapture, ChatCompletion]:
    """A capture fed a completed upstream generation (as the chat pipeline feeds its
    own), and the Chat completion the client was sent for it."""
    capture = OutputCapture(project=project_output, max_bytes=session.capture_bytes)
    for index, item in enumerate(output):
        capture.feed(decode("response.output_item.done", {"output_index": index, "item": item}))
    response = {"status": "completed", "model": SNAPSHOT, "output": output}
    capture.feed(decode("response.completed", {"response": response}))
    return capture, response_to_chat_completion(
        response, completion_id="chatcmpl-bench", created=0, model="gpt-5",
        reasoning_summaries=False,
    )  # fmt: skip


def feed_generation(
    session: CacheSession, output: list[dict[str, Any]]
) -> tuple[OutputCapture, ClientProjection]:
    """A capture fed a completed upstream generation; what the client was sent."""
    capture, completion = feed_completion(session, output)
    return capture, ClientProjection.from_completion(completion)


def bench_commits(*, rounds: int = 31, messages: int = 10) -> dict[str, Any]:
    """Median milliseconds of each synchronous commit a cached request makes, on a real
    store at ``synchronous=FULL`` (each commit waits for its fsync):

    - ``dispatch``: ``CacheSession.dispatch`` at a small history (planning over a
      populated store, intent, pins, touches: one transaction);
    - ``observation``: ``CacheSession.complete`` admitting a new generation (capture
      decision, observation, payload, dependencies, intent phase: one transaction);
    - ``delivered``: resolving the intent (one transaction);
    - ``one_row``: a one-row write transaction, the floor of any commit.
    """
    samples: dict[str, list[float]] = {"dispatch": [], "observation": [], "delivered": [],
                                       "one_row": []}  # fmt: skip
    with tempfile.TemporaryDirectory() as data:
        config = bench_config(Path(data))
        cache = open_cache(config)
        try:
            store = cache.store
            assert store is not None
            body = json.loads(json.dumps({**recorded_request(),
                                          "messages": cursor_history(messages)}))  # fmt: skip
            request = translated(config, body)
            populate(config, cache, request, body)
            for number in range(rounds + 1):
                session = session_for(cache, request, body)
                start = time.perf_counter()
                session.dispatch()
                dispatched = time.perf_counter()
                capture, sent = feed_generation(
                    session, completed_output(f"answer {number}", number)
                )
                completing = time.perf_counter()
                result = session.complete(finish_capture(capture, sent))
                completed = time.perf_counter()
                session.delivered()
                delivered = time.perf_counter()
                assert result.kind == "admit", result.reason
                with store.transaction():
                    store.set_meta("bench-counter", number)
                written = time.perf_counter()
                if number:  # the first round warms up
                    samples["dispatch"].append(dispatched - start)
                    samples["observation"].append(completed - completing)
                    samples["delivered"].append(delivered - completed)
                    samples["one_row"].append(written - delivered)
        finally:
            cache.close()
    return {
        "rounds": rounds,
        "history_messages": messages,
        "median_ms": {name: statistics.median(values) * 1000 for name, values in samples.items()},
        "min_ms": {name: min(values) * 1000 for name, values in samples.items()},
    }


def profile_cache_path(size: int, *, top: int = 12) -> list[tuple[str, float, float]]:
    """cProfile of ``begin`` + ``dispatch`` at ``size`` messages: the top functions by
    own time, as (name, own seconds, cumulative seconds) per request."""
    with tempfile.TemporaryDirectory() as data:
        config = bench_config(Path(data))
        cache = open_cache(config)
        try:
            body = json.loads(json.dumps({**recorded_request(),
                                          "messages": cursor_history(size)}))  # fmt: skip
            request = translated(config, body)
            populate(config, cache, request, body)
            runs = 3
            profiler = cProfile.Profile()
            for _ in range(runs):
                profiler.enable()
                session = session_for(cache, request, body)
                session.dispatch()
                profiler.disable()
                session.delivered()
        finally:
            cache.close()
    stats = pstats.Stats(profiler)
    rows: list[tuple[str, float, float]] = []
    for (path, line, name), (_, _, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        label = f"{Path(path).name}:{line}({name})" if line else name
        rows.append((label, own / runs, cumulative / runs))
    rows.sort(key=lambda row: row[1], reverse=True)
    return rows[:top]
