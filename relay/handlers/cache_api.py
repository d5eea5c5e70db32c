"""``/api/cache/reasoning``: inspect and clear the strict-provider reasoning cache.

Management only: ``Authorization: Bearer <RELAY_ADMIN_TOKEN>``; the relay token is never
accepted, and without RELAY_ADMIN_TOKEN the API does not exist (404). Encrypted Responses
records appear as metadata only (sizes, digest prefixes, model, ages): ciphertext is never
shown, and restored ``reasoning_content`` text only with ``include=reasoning``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from relay.errors import InvalidRequest, NotFound, Unauthorized
from relay.handlers.base import BaseHandler
from relay.http.auth import bearer_matches
from relay.storage.strict_store import StrictEntry, StrictTally

MAX_LIMIT: Final = 200
DEFAULT_LIMIT: Final = 50
RECENT_RECORDS: Final = 20
MAX_ENTRY_ID: Final = 2**63 - 1  # SQLite's largest rowid
GET_PARAMS: Final = frozenset({"provider", "model", "limit", "before", "include"})
DELETE_PARAMS: Final = frozenset({"provider", "toolCallId"})


def iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def entry_id(raw: str | None) -> int | None:
    """The ``before`` parameter: an entry id, which is a positive SQLite integer."""
    if raw is None:
        return None
    digits = raw.lstrip("0")
    # ASCII only: str.isdigit() also accepts digits int() refuses (superscripts).
    if not (raw.isascii() and raw.isdigit()) or len(digits) > len(str(MAX_ENTRY_ID)):
        value = None
    else:
        value = int(raw, 10)
    if value is None or not 1 <= value <= MAX_ENTRY_ID:
        raise InvalidRequest(
            f"'before' must be an entry id from 'nextBefore' (a whole number from 1 to "
            f"{MAX_ENTRY_ID}); got {raw[:40]!r}",
            param="before",
        )
    return value


def clamp_limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    try:
        value = int(raw, 10)
    except ValueError:
        raise InvalidRequest(
            f"'limit' must be a whole number; got {raw!r}", param="limit"
        ) from None
    return max(1, min(MAX_LIMIT, value))


class CacheApiHandler(BaseHandler):
    requires_auth = False  # its own token, checked below

    def prepare(self) -> None:
        super().prepare()
        admin = self.runtime.config.admin_token
        if admin is None:
            raise NotFound("the cache API is off: set RELAY_ADMIN_TOKEN to enable it")
        header = self.request.headers.get("Authorization")
        if not bearer_matches(header, admin):
            raise Unauthorized(
                "missing or wrong admin token: send 'Authorization: Bearer <RELAY_ADMIN_TOKEN>' "
                "(the relay token is not accepted here)"
            )

    def _params(self, allowed: frozenset[str]) -> dict[str, str]:
        params: dict[str, str] = {}
        for name, values in self.request.query_arguments.items():
            if name not in allowed:
                raise InvalidRequest(
                    f"unknown query parameter {name!r}; allowed: {', '.join(sorted(allowed))}",
                    param=name,
                )
            if len(values) != 1:
                raise InvalidRequest(f"give {name!r} once", param=name)
            try:
                params[name] = values[0].decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidRequest(f"{name!r} must be UTF-8 text", param=name) from None
            if not params[name]:
                raise InvalidRequest(f"{name!r} must not be empty", param=name)
        return params

    def get(self) -> None:
        params = self._params(GET_PARAMS)
        include = params.get("include")
        if include not in (None, "reasoning"):
            raise InvalidRequest("'include' accepts only 'reasoning'", param="include")
        before = entry_id(params.get("before"))
        limit = clamp_limit(params.get("limit"))
        strict = self.runtime.strict
        page = strict.entries(
            provider=params.get("provider"),
            model=params.get("model"),
            limit=limit,
            before_id=before,
        )
        body = {
            "stats": self._stats(),
            "entries": [_entry(e, with_text=include == "reasoning") for e in page.entries],
            "pagination": {"limit": limit, "nextBefore": page.next_before_id},
            "encryptedRecords": self._encrypted(params.get("model")),
        }
        self.finish(json.dumps(body, ensure_ascii=False))

    def delete(self) -> None:
        params = self._params(DELETE_PARAMS)
        if len(params) > 1:
            raise InvalidRequest("give either 'provider' or 'toolCallId', not both")
        strict = self.runtime.strict
        if "provider" in params:
            deleted, scope = strict.clear_provider(params["provider"]), "provider"
        elif "toolCallId" in params:
            deleted, scope = strict.delete_tool_call(params["toolCallId"]), "toolCallId"
        else:
            deleted, scope = strict.clear(), "all"
        self.finish(json.dumps({"deleted": deleted, "scope": scope}))

    def _stats(self) -> dict[str, Any]:
        stats = self.runtime.strict.stats()
        metrics = stats.metrics
        hits, misses = sum(metrics.hits.values()), sum(metrics.misses.values())
        looked_up = hits + misses
        store = stats.store
        by_provider: dict[str, dict[str, int]] = {}
        by_model: dict[str, dict[str, int]] = {}
        if store is not None:
            by_provider = {
                p: {"entries": t.entries, "chars": t.chars} for p, t in store.by_provider.items()
            }
            by_model = {
                m: {"entries": t.entries, "chars": t.chars} for m, t in store.by_model.items()
            }
        _add_counts(by_provider, metrics, index=0)
        _add_counts(by_model, metrics, index=1)
        return {
            "memoryEntries": stats.memory_entries,
            "dbEntries": None if store is None else store.entries,
            "totalEntries": stats.memory_entries if store is None else store.entries,
            "totalChars": 0 if store is None else store.chars,
            "hits": hits,
            "misses": misses,
            "replays": sum(metrics.replays.values()),
            "replayRate": f"{100 * hits / looked_up:.1f}%" if looked_up else "0.0%",
            "byProvider": by_provider,
            "byModel": by_model,
            "oldestEntry": iso(None if store is None else store.oldest_created_at),
            "newestEntry": iso(None if store is None else store.newest_created_at),
            # The encrypted replay cache's outcomes since startup (relay.core.replay_stats).
            "replay": self.runtime.cache.metrics.replay.to_json(),
        }

    def _encrypted(self, model: str | None) -> dict[str, Any] | None:
        store = self.runtime.cache.store
        if store is None:
            return None
        now = self.runtime.clock.wall()
        counts = store.stats()
        hot = self.runtime.cache.hot_blocks
        memo = self.runtime.cache.plan_memo
        retention = self.runtime.retention
        return {
            "observations": counts["observations"],
            "payloads": counts["payloads"],
            "payloadBytes": counts["payload_bytes"],
            "markers": counts["markers"],
            "hotCache": {
                "entries": len(hot),
                "bytes": hot.bytes,
                "capacityBytes": hot.capacity_bytes,
                "hits": hot.hits,
            },
            # Chain verdicts remembered across plans (relay.core.plan_memo).
            "planMemo": {"entries": len(memo), "hits": memo.hits},
            # Payload cleanup since startup and the deletion barrier (relay.cache.retention).
            "retention": None if retention is None else retention.to_json(),
            "recent": [
                {
                    "id": r.id,
                    "model": r.model,
                    "snapshot": r.snapshot,
                    "position": r.position,
                    "replayable": r.replayable,
                    "payloadBytes": r.payload_bytes,
                    "endDigest": r.end_digest_prefix,
                    "ageSeconds": round(max(0.0, now - r.observed_at), 3),
                    "idleSeconds": None
                    if r.touched_at is None
                    else round(max(0.0, now - r.touched_at), 3),
                }
                for r in store.recent_records(model=model, limit=RECENT_RECORDS)
            ],
        }


def _tallies(tallies: Mapping[str, StrictTally]) -> dict[str, dict[str, int]]:
    return {name: {"entries": t.entries, "chars": t.chars} for name, t in tallies.items()}


def _add_counts(table: dict[str, dict[str, int]], metrics: Any, *, index: int) -> None:
    """Fold the per-(provider, model) counters into a per-provider or per-model table."""
    for name in ("hits", "misses", "replays"):
        counter: Counter[tuple[str, str]] = getattr(metrics, name)
        for key, count in counter.items():
            row = table.setdefault(key[index], {"entries": 0, "chars": 0})
            row[name] = row.get(name, 0) + count


def _entry(entry: StrictEntry, *, with_text: bool) -> Mapping[str, Any]:
    out: dict[str, Any] = {
        "id": entry.id,
        "toolCallId": entry.tool_call_ids[0] if entry.tool_call_ids else None,
        "toolCallIds": list(entry.tool_call_ids),
        "provider": entry.provider,
        "model": entry.model,
        "charCount": entry.chars,
        "digest": entry.text_digest[:12],
        "intact": entry.intact,
        "createdAt": iso(entry.created_at),
        "expiresAt": iso(entry.expires_at),
    }
    if with_text:
        out["reasoning"] = entry.reasoning
    return out
