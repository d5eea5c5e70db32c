"""Token accounting by replay outcome (pure): what each upstream answer cost, against what
the relay did with the request's history.

A request's outcome is read from its ``X-Relay-Replay`` value (relay.core.replay_header),
the one place every path already states it: replayed (with how many blocks), eligible but
nothing to replay, replay refused and resent, bypassed (capacity, the deterministic
canonical limit, fenced direct Responses traffic, an underivable history), not a
reasoning model, or the cache off. Its cost is the upstream's ``usage`` from the final
Responses event. Tallies are keyed by (hour, body shape, model, outcome): bounded labels,
nothing that identifies a conversation or its content.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, Final

from relay.core.receipts import Reason
from relay.errors import OperatorError

HOUR_S: Final = 3600
MAX_MODELS: Final = 32  # distinct model labels kept; later new ones count as "other"
OTHER: Final = "other"
_MODEL: Final = re.compile(r"[A-Za-z0-9._:/-]{1,64}")
# Terminal Responses events that carry the answer's usage.
USAGE_EVENTS: Final = frozenset({"response.completed", "response.incomplete", "response.failed"})


class Outcome(StrEnum):
    REPLAYED = "replayed"
    NOTHING = "nothing_to_replay"  # eligible: no earlier turn, unmatched, or a plan rejection
    RESENT = "rejected_resent"  # the upstream refused the replayed state; resent without
    CAPACITY = "bypass_capacity"
    LIMIT = "bypass_limit"  # over the canonical limits: deterministic, no replay possible
    FENCED = "bypass_fenced"  # direct /v1/responses traffic: forwarded as sent, scopes fenced
    UNDERIVABLE = "bypass_underivable"  # a Responses-shaped history with no exact mapping
    NOT_REASONING = "not_reasoning"
    CACHE_OFF = "cache_off"
    OTHER = "other"  # a Chat Completions provider, or a value this version does not know


# Outcomes that count as "with replay" when comparing cached shares.
WITH_REPLAY: Final = frozenset({Outcome.REPLAYED})
_BY_REASON: Final[Mapping[str, Outcome]] = {
    Reason.CAPACITY_BYPASS.value: Outcome.CAPACITY,
    Reason.CANONICAL_LIMIT.value: Outcome.LIMIT,
    Reason.UNDERIVABLE_HISTORY.value: Outcome.UNDERIVABLE,
    "not_a_reasoning_model": Outcome.NOT_REASONING,
    "responses_passthrough": Outcome.FENCED,
    "replay_rejected": Outcome.RESENT,
    "chat_provider": Outcome.OTHER,
}
_REPLAYED: Final = re.compile(r"replayed=(\d{1,9})")
_NONE: Final = re.compile(r"none; reason=([a-z0-9_]{1,64})")


def classify(header: str | None) -> tuple[Outcome, int]:
    """The outcome of a request and its replayed block count, from its ``X-Relay-Replay``
    value (``None``: the request never got that far, e.g. a chat provider error)."""
    if header is None:
        return Outcome.OTHER, 0
    if header == "off":
        return Outcome.CACHE_OFF, 0
    if (m := _REPLAYED.fullmatch(header)) is not None:
        blocks = int(m.group(1))
        return (Outcome.REPLAYED, blocks) if blocks else (Outcome.NOTHING, 0)
    if (m := _NONE.fullmatch(header)) is not None:
        reason = m.group(1)
        if reason in _BY_REASON:
            return _BY_REASON[reason], 0
        # nothing_to_replay, unmatched, or a plan's first rejection (relay.core.receipts)
        if reason in ("nothing_to_replay", "unmatched") or reason in Reason._value2member_map_:
            return Outcome.NOTHING, 0
    return Outcome.OTHER, 0


@dataclass(frozen=True)
class Usage:
    """One answer's ``usage``; a count the upstream did not send is 0."""

    input_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0


def _count(value: Any) -> int:
    # Diagnostics only: a malformed count is 0 here (the converter is where it is refused).
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def parse_usage(usage: Any) -> Usage | None:
    """A Responses ``usage`` object as a :class:`Usage` (``None``: not an object)."""
    if not isinstance(usage, Mapping):
        return None
    details = usage.get("input_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    out_details = usage.get("output_tokens_details")
    out_details = out_details if isinstance(out_details, Mapping) else {}
    # cache_write_tokens: under input_tokens_details where present, or at the top level.
    write = details.get("cache_write_tokens", usage.get("cache_write_tokens"))
    return Usage(
        input_tokens=_count(usage.get("input_tokens")),
        cached_tokens=_count(details.get("cached_tokens")),
        cache_write_tokens=_count(write),
        output_tokens=_count(usage.get("output_tokens")),
        reasoning_tokens=_count(out_details.get("reasoning_tokens")),
    )


def usage_of_event(event_type: str, data: Any) -> Usage | None:
    """The usage of a terminal Responses event (or of a non-streaming answer's final
    ``response`` object, ``event_type`` ``"response"``); ``None`` for any other event."""
    if event_type == "response":
        return parse_usage(data.get("usage")) if isinstance(data, Mapping) else None
    if event_type not in USAGE_EVENTS or not isinstance(data, Mapping):
        return None
    response = data.get("response")
    return parse_usage(response.get("usage")) if isinstance(response, Mapping) else None


@dataclass
class Tally:
    """What a set of answers cost. ``answers`` counts those with a usage."""

    requests: int = 0
    answers: int = 0
    blocks: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    def add(self, other: Tally) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @classmethod
    def of(cls, usage: Usage | None, blocks: int) -> Tally:
        if usage is None:
            return cls(requests=1, blocks=blocks)
        return cls(
            requests=1,
            answers=1,
            blocks=blocks,
            input_tokens=usage.input_tokens,
            cached_tokens=usage.cached_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            output_tokens=usage.output_tokens,
            reasoning_tokens=usage.reasoning_tokens,
        )

    def to_json(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


TALLY_FIELDS: Final = tuple(f.name for f in fields(Tally))


@dataclass(frozen=True, order=True)
class Key:
    hour: int  # wall seconds at the start of the UTC hour
    shape: str  # "chat" or "responses": the request body's shape
    model: str  # bounded (model_label)
    outcome: str  # an Outcome value


def hour_of(wall: float) -> int:
    return int(wall // HOUR_S) * HOUR_S


def model_label(model: Any, known: set[str], limit: int = MAX_MODELS) -> str:
    """A model name safe as a label: a plain name, at most ``limit`` distinct ones (a client
    may send any string as a model). ``known`` is updated here."""
    if not isinstance(model, str) or not _MODEL.fullmatch(model):
        return OTHER
    if model in known:
        return model
    if len(known) >= limit:
        return OTHER
    known.add(model)
    return model


@dataclass
class Tallies:
    """Tallies by :class:`Key`; bounded by the labels' bounds times the hours kept."""

    by_key: dict[Key, Tally]

    def __init__(self, by_key: Mapping[Key, Tally] | None = None) -> None:
        self.by_key = dict(by_key or {})

    def add(self, key: Key, tally: Tally) -> None:
        self.by_key.setdefault(key, Tally()).add(tally)

    def merge(self, other: Tallies) -> None:
        for key, tally in other.by_key.items():
            self.add(key, tally)

    def since(self, hour: int) -> Tallies:
        return Tallies({k: v for k, v in self.by_key.items() if k.hour >= hour})


@dataclass(frozen=True)
class Share:
    """Input tokens served from the prompt cache, of all input tokens."""

    cached: int
    total: int

    @property
    def ratio(self) -> float | None:
        return None if self.total == 0 else self.cached / self.total

    def to_json(self) -> dict[str, Any]:
        ratio = self.ratio
        return {"cached": self.cached, "input": self.total,
                "share": None if ratio is None else round(ratio, 4)}  # fmt: skip


@dataclass(frozen=True)
class Summary:
    """One window of :class:`Tallies`: what replay buys."""

    with_replay: Share
    without_replay: Share
    by_outcome: Mapping[str, Tally]
    total: Tally

    def to_json(self) -> dict[str, Any]:
        return {
            "withReplay": self.with_replay.to_json(),
            "withoutReplay": self.without_replay.to_json(),
            "requests": self.total.requests,
            "inputTokens": self.total.input_tokens,
            "cachedTokens": self.total.cached_tokens,
            "cacheWriteTokens": self.total.cache_write_tokens,
            "outputTokens": self.total.output_tokens,
            "reasoningTokens": self.total.reasoning_tokens,
            "replayedBlocks": self.total.blocks,
            "byOutcome": {k: v.to_json() for k, v in sorted(self.by_outcome.items())},
        }


def summarize(tallies: Iterable[tuple[Key, Tally]]) -> Summary:
    with_replay, without, total = Tally(), Tally(), Tally()
    by_outcome: dict[str, Tally] = {}
    for key, tally in tallies:
        (with_replay if key.outcome in WITH_REPLAY else without).add(tally)
        by_outcome.setdefault(key.outcome, Tally()).add(tally)
        total.add(tally)
    return Summary(
        Share(with_replay.cached_tokens, with_replay.input_tokens),
        Share(without.cached_tokens, without.input_tokens),
        by_outcome,
        total,
    )


# --- RELAY_TOKEN_PRICES: estimated cost and saving --------------------------------------

PRICE_KEYS: Final = ("input", "cached_input", "output")


@dataclass(frozen=True)
class Price:
    """US dollars (or any one currency) per million tokens."""

    input: float
    cached_input: float
    output: float


class PriceError(OperatorError):
    """RELAY_TOKEN_PRICES is not what it should be (the message is one line; the
    configuration turns it into a ConfigError naming the variable)."""


def parse_prices(data: Any) -> dict[str, Price]:
    """``{"model": {"input": 1.25, "cached_input": 0.125, "output": 10}}`` (parsed JSON),
    per million tokens. Raises :class:`PriceError` with one line saying what to fix."""
    if not isinstance(data, dict):
        raise PriceError(": expected a JSON object mapping model names to prices")
    prices: dict[str, Price] = {}
    for model, spec in data.items():
        if not isinstance(spec, dict):
            raise PriceError(f"[{model!r}]: expected an object with {', '.join(PRICE_KEYS)}")
        unknown = sorted(set(spec) - set(PRICE_KEYS))
        if unknown:
            raise PriceError(f"[{model!r}]: unknown key {unknown[0]!r}; accepted: {PRICE_KEYS}")
        values: dict[str, float] = {}
        for name in PRICE_KEYS:
            value = spec.get(name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise PriceError(
                    f"[{model!r}].{name}: expected a price per million tokens (a number >= 0)"
                )
            values[name] = float(value)
        prices[model] = Price(**values)
    return prices


def estimate(tallies: Iterable[tuple[Key, Tally]], prices: Mapping[str, Price]) -> dict[str, Any]:
    """Estimated spend, and what replay saved: the replaying requests' extra cached share
    (over the model's share without replay in the same window) priced as the difference
    between an input and a cached input token. Models without a price are left out."""
    per_model: dict[str, list[Tally]] = {}
    for key, tally in tallies:
        if key.model not in prices:
            continue
        pair = per_model.setdefault(key.model, [Tally(), Tally()])
        pair[0 if key.outcome in WITH_REPLAY else 1].add(tally)
    cost = saving = 0.0
    for model, (with_replay, without) in per_model.items():
        price = prices[model]
        for t in (with_replay, without):
            cost += (
                (t.input_tokens - t.cached_tokens) * price.input
                + t.cached_tokens * price.cached_input
                + t.output_tokens * price.output
            ) / 1e6
        base = Share(without.cached_tokens, without.input_tokens).ratio or 0.0
        extra = with_replay.cached_tokens - base * with_replay.input_tokens
        saving += max(0.0, extra) * (price.input - price.cached_input) / 1e6
    return {"models": sorted(per_model), "cost": round(cost, 6), "saving": round(saving, 6)}


# --- added time to first token: a fixed histogram, so hours add up -----------------------

# Upper bounds in milliseconds; the last bucket is everything above.
LATENCY_BOUNDS_MS: Final = (1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 75, 100, 150, 250, 500, 1000)
OVERFLOW_MS: Final = 10**6


def latency_bucket(seconds: float) -> int:
    ms = max(0.0, seconds) * 1000
    for bound in LATENCY_BOUNDS_MS:
        if ms <= bound:
            return bound
    return OVERFLOW_MS


def percentile(histogram: Mapping[int, int], q: float) -> int | None:
    """The bucket bound under which ``q`` (0..1) of the observations fall (``None``: none)."""
    total = sum(histogram.values())
    if total == 0:
        return None
    need = q * total
    seen = 0
    for bound in sorted(histogram):
        seen += histogram[bound]
        if seen >= need:
            return bound
    return max(histogram)


def latency_summary(histogram: Mapping[int, int]) -> dict[str, Any]:
    return {
        "count": sum(histogram.values()),
        "p50Ms": percentile(histogram, 0.5),
        "p95Ms": percentile(histogram, 0.95),
    }


# --- per hour: events by reason (rejections, fences) and the latency histogram ----------


@dataclass
class HourDelta:
    """What happened since the last flush: tallies, reason counts and latency buckets.

    Bounded by construction: bounded labels times the (one or two) hours a flush
    interval spans."""

    tallies: Tallies
    events: Counter[tuple[int, str, str]]  # (hour, "rejected" | "fenced", reason)
    latency: Counter[tuple[int, int]]  # (hour, bucket bound ms)

    def __init__(self) -> None:
        self.tallies = Tallies()
        self.events = Counter()
        self.latency = Counter()

    def empty(self) -> bool:
        return not (self.tallies.by_key or self.events or self.latency)

    def merge(self, other: HourDelta) -> None:
        self.tallies.merge(other.tallies)
        self.events.update(other.events)
        self.latency.update(other.latency)
