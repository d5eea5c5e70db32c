"""Benchmarks of the visible-history identity, called by the lead bench (no CLI here).

Both functions time with ``time.perf_counter``, interleave the contenders and keep each
one's best of ``repeat`` samples (a loaded machine only ever adds time), and report
ratios against a stdlib baseline measured on the same data in the same process.
"""

from __future__ import annotations

import copy
import hashlib
import json
import statistics
import struct
import time
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from relay.core.canonical import Budget, frame
from relay.core.envelope import normalize_message
from relay.core.history_digest import history_digests
from relay.core.rendered_messages import RenderedMessages
from relay.core.scope import Scope, build_scope
from tests.support import recordings

U64 = struct.Struct(">Q")

RECORDING = recordings.request_path("context_single_tool_calls")
PARALLEL_RECORDING = recordings.request_path("context_parallel_tool_call")
MIN_SAMPLE_SECONDS = 0.02  # small histories run several times per sample
SIZES = (10, 100, 1000, 6400)


def recorded_request() -> dict[str, Any]:
    return json.loads(RECORDING.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def cursor_like_history(count: int) -> list[dict[str, Any]]:
    """The recorded ``context_single_tool_calls`` history repeated to ``count`` messages
    (the history of the first identity measurements; call ids repeat)."""
    messages = recorded_request()["messages"]
    return [messages[i % len(messages)] for i in range(count)]


@cache
def _rounds() -> tuple[tuple[dict[str, Any], tuple[dict[str, Any], ...]], ...]:
    """Every recorded tool round: an assistant message with its calls, and their results."""
    rounds = []
    for path in (RECORDING, PARALLEL_RECORDING):
        messages = json.loads(path.read_text(encoding="utf-8"))["messages"]
        for index, message in enumerate(messages):
            if message["role"] == "assistant" and message.get("tool_calls"):
                ids = {call["id"] for call in message["tool_calls"]}
                results = tuple(
                    m for m in messages[index + 1 :]
                    if m["role"] == "tool" and m["tool_call_id"] in ids
                )  # fmt: skip
                rounds.append((message, results))
    return tuple(rounds)


def cursor_history(count: int) -> list[dict[str, Any]]:
    """A Cursor-like history of ``count`` messages built from the recordings' shapes.

    The recorded system prompt, then turns: a recorded user message, one to three
    recorded tool rounds (an assistant message with text content and its tool calls,
    ``index`` included, then each call's tool result, the parallel round's two among
    them), and an assistant text answer (a slice of a recorded file read, so it has the
    recordings' escaping profile). Call ids are made unique per round, as a real
    conversation's are, so call pairing holds and the history can be planned. A history
    never ends inside a tool round (the trailing slots become user messages). Every
    message is a fresh object.
    """
    request = recorded_request()
    system, users = request["messages"][0], [m for m in request["messages"] if m["role"] == "user"]
    rounds = _rounds()
    texts = [m["content"] for _, results in rounds for m in results if len(m["content"]) > 400]
    history: list[dict[str, Any]] = [system]
    turn = used = 0
    while len(history) < count:
        history.append(users[turn % len(users)])
        for _ in range(1 + turn % 3):
            assistant, results = rounds[used % len(rounds)]
            used += 1
            assistant = copy.deepcopy(assistant)
            for call in assistant["tool_calls"]:
                call["id"] = f"{call['id']}_{used}"
            history.append(assistant)
            history += [{**r, "tool_call_id": f"{r['tool_call_id']}_{used}"} for r in results]
        text = texts[turn % len(texts)]
        history.append({"role": "assistant", "content": text[: 300 + 97 * turn % 900]})
        turn += 1
    history = history[:count]
    # No unanswered calls at the end: from the last incomplete round on, user messages.
    for index in range(len(history) - 1, -1, -1):
        calls = history[index].get("tool_calls") or []
        if calls:
            answered = {m.get("tool_call_id") for m in history[index + 1 :]}
            if not all(call["id"] in answered for call in calls):
                history[index:] = [users[0]] * (len(history) - index)
            break
    return json.loads(json.dumps(history))  # type: ignore[no-any-return]


def bench_scope(body: dict[str, Any] | None = None) -> Scope:
    body = body if body is not None else recorded_request()
    return build_scope(
        secret=b"bench-secret-0123456789",
        upstream_origin="https://api.openai.com",
        endpoint="/v1/responses",
        credential="sk-bench",
        relay_token="rr-bench",
        caller=body.get("user"),
        upstream_body={"model": body.get("model", "gpt-5"), "tools": body.get("tools") or []},
        openai_beta=None,
    )


def sampled_times(
    contenders: dict[str, Callable[[], object]], repeat: int
) -> dict[str, list[float]]:
    """Seconds per call of each contender in each of ``repeat`` rounds, sampled
    round-robin (so round ``i`` of every contender ran within moments of the others)."""
    loops = {}
    for name, run in contenders.items():
        start = time.perf_counter()
        run()
        once = max(time.perf_counter() - start, 1e-7)
        loops[name] = max(1, int(MIN_SAMPLE_SECONDS / once))
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, run in contenders.items():
            start = time.perf_counter()
            for _ in range(loops[name]):
                run()
            samples[name].append((time.perf_counter() - start) / loops[name])
    return samples


def best_of(samples: dict[str, list[float]]) -> dict[str, float]:
    return {name: min(values) for name, values in samples.items()}


def paired_ratio(
    samples: dict[str, list[float]], numerator: Sequence[str], denominator: str
) -> float:
    """The median over rounds of sum(numerator) / denominator, each round's contenders
    taken together: this VM's speed drifts by half over seconds, and a ratio of bests
    taken from different moments would measure the drift."""
    rounds = range(len(samples[denominator]))
    return statistics.median(
        sum(samples[name][i] for name in numerator) / samples[denominator][i] for i in rounds
    )


def bench_canonical_vs_stdlib(history: Sequence[Any], *, repeat: int = 9) -> dict[str, Any]:
    """Canonicalize+hash throughput against the stdlib floor on the same history.

    Floor: ``json.dumps(m, sort_keys=True)`` per message into one SHA-256. Ours:
    normalization, one-pass measuring and rendering (:meth:`Budget.render_text`) and framing
    into one SHA-256 (``canonical``), and the full ``history_digests`` (plus a digest per
    boundary and an envelope fingerprint per assistant message). Ratios are floor time /
    our time, i.e. our throughput as a fraction of the floor's (target ≥ 0.5), as the
    median of the rounds' ratios (:func:`paired_ratio`).
    """
    history = json.loads(json.dumps(list(history)))  # fresh objects, as a request has
    scope = bench_scope()

    def floor() -> str:
        digest = hashlib.sha256()
        for message in history:
            digest.update(json.dumps(message, sort_keys=True).encode("utf-8"))
        return digest.hexdigest()

    def canonical() -> str:
        digest = hashlib.sha256()
        budget = Budget()
        values = [normalize_message(message) for message in history]
        documents = [budget.render_text(value) for value in values]  # measured before any
        for value, (size, text) in zip(values, documents, strict=True):
            if text is None:
                frame(digest, value, size)
            else:
                digest.update(U64.pack(size) + text)
        return digest.hexdigest()

    def identity() -> object:
        return history_digests(scope, history)

    samples = sampled_times({"floor": floor, "canonical": canonical, "identity": identity}, repeat)
    best = best_of(samples)
    canonical_bytes = sum(Budget().measure(normalize_message(message)) for message in history)
    return {
        "messages": len(history),
        "canonical_bytes": canonical_bytes,
        "floor_seconds": best["floor"],
        "canonical_seconds": best["canonical"],
        "identity_seconds": best["identity"],
        "canonical_mb_per_s": canonical_bytes / best["canonical"] / 1e6,
        "ratio_canonical_to_floor": paired_ratio(samples, ["floor"], "canonical"),
        "ratio_identity_to_floor": paired_ratio(samples, ["floor"], "identity"),
        "target": 0.5,
    }


def bench_identity_scaling(
    sizes: Sequence[int] = SIZES,
    *,
    repeat: int = 7,
    history: Callable[[int], list[dict[str, Any]]] = cursor_history,
) -> dict[str, Any]:
    """Identity (scope + all prefix digests) against ``json.loads`` of the request body.

    Per size: best seconds of each, ``ratio`` = identity / loads (target ≤ 2; the median
    of the rounds' ratios, see :func:`paired_ratio`), and the
    identity cost per message; ``linearity`` compares the per-message cost of the largest
    size with that of the second largest (≈ 1 when cost is linear in history length).
    """
    request = recorded_request()
    rows = []
    for size in sizes:
        body = json.dumps({**request, "messages": history(size)})

        def loads(body: str = body) -> object:
            return json.loads(body)

        parsed = json.loads(body)  # parsed once, outside the timing: only identity counts

        def identity_only(parsed: dict[str, Any] = parsed) -> object:
            return history_digests(bench_scope(parsed), parsed["messages"])

        # As ReplayCache computes it on a session's next turn: its messages' renderings
        # remembered from the turn before (the same history, parsed again).
        memo = RenderedMessages()
        history_digests(bench_scope(parsed), json.loads(body)["messages"], memo=memo)

        def identity_warm(parsed: dict[str, Any] = parsed, memo: RenderedMessages = memo) -> object:
            return history_digests(bench_scope(parsed), parsed["messages"], memo=memo)

        samples = sampled_times(
            {"loads": loads, "identity": identity_only, "identity_warm": identity_warm}, repeat
        )
        best = best_of(samples)
        rows.append(
            {
                "messages": size,
                "body_bytes": len(body.encode("utf-8")),
                "loads_seconds": best["loads"],
                "identity_seconds": best["identity"],
                "ratio": paired_ratio(samples, ["identity"], "loads"),
                "identity_us_per_message": best["identity"] / size * 1e6,
                "identity_warm_seconds": best["identity_warm"],
            }
        )
    per_message = [row["identity_us_per_message"] for row in rows]
    linearity = per_message[-1] / per_message[-2] if len(rows) > 1 else 1.0
    return {"rows": rows, "linearity": linearity, "target_ratio": 2.0}
