"""What a check works with: relays it starts, clients, the relay's log, the fake's records.

One :class:`CheckContext` per check. Relays it starts get their own data directory and
are stopped when the check ends (their replay counters read first). Offline, the fake
upstream is reset before the check, so :meth:`CheckContext.calls` is this check's calls.
"""

from __future__ import annotations

import ast
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from live.budget import Budget, Ledger
from live.client import ChatClient, DirectClient, Turn
from live.processes import Event, FakeProcess, RelayProcess
from live.settings import Settings, StrictProvider
from live.verdict import CheckFailed
from scenarios.wait import WaitTimeout, wait_until

# Relay events that say an upstream refused what the relay sent for a request.
REJECTION_EVENTS = ("replay_rejected", "request_failed", "stream_failed")


@dataclass(frozen=True)
class RunEnv:
    """What every check of one run shares."""

    settings: Settings
    upstream_base_url: str  # what relays get as OPENAI_BASE_URL (maybe the recorder)
    direct_base_url: str  # the upstream itself, for exact-body direct calls
    api_key: str
    work_dir: Path  # data directories (ciphertext, tokens): deleted after the run
    log_dir: Path  # relay and fake logs: kept with the results
    budget: Budget
    fake: FakeProcess | None = None
    strict: StrictProvider | None = None


@dataclass(frozen=True)
class Plan:
    """The relay's ``cache_plan`` line for one request."""

    replayed: int
    replay_bytes: int
    rejected: tuple[str, ...]


@dataclass
class CheckContext:
    name: str
    run: RunEnv
    ledger: Ledger = field(init=False)
    relays: list[RelayProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.run.budget)
        if self.run.fake is not None:
            self.run.fake.reset()

    @property
    def settings(self) -> Settings:
        return self.run.settings

    @property
    def offline(self) -> bool:
        return self.run.settings.offline

    @property
    def model(self) -> str:
        return self.run.settings.model

    # --- relays and clients -----------------------------------------------------------

    def relay(
        self,
        label: str = "relay",
        *,
        env: Mapping[str, str] | None = None,
        strict_provider: bool = False,
    ) -> RelayProcess:
        """A started relay (cache on) on a fresh data directory, pointed at the upstream."""
        name = f"{self.name}-{label}"
        data_dir = self.run.work_dir / name
        data_dir.mkdir(mode=0o700)
        log_dir = self.run.log_dir / self.name
        log_dir.mkdir(exist_ok=True)
        relay_env = {
            "OPENAI_API_KEY": self.run.api_key,
            "OPENAI_BASE_URL": self.run.upstream_base_url,
            "RELAY_IDLE_TIMEOUT_MS": str(self.settings.idle_timeout_ms),
            **self.settings.relay_env,
            **(env or {}),
        }
        strict = self.run.strict
        if strict_provider and strict is not None:
            spec = {
                strict.name: {
                    "kind": "chat",
                    "base_url": strict.base_url,
                    "api_key_env": strict.key_env,
                    "strict": True,
                }
            }
            relay_env["RELAY_PROVIDERS"] = json.dumps(spec)
            relay_env[strict.key_env] = strict.key
        scrub = [strict.key_env] if strict is not None and not strict_provider else []
        relay = RelayProcess(
            name,
            relay_env,
            log_dir=log_dir,
            data_dir=data_dir,
            relay_token=f"live-relay-{secrets.token_hex(12)}",
            admin_token=f"live-admin-{secrets.token_hex(12)}",
            scrub=scrub,
        )
        self.relays.append(relay)
        relay.start()
        return relay

    def client(self, relay: RelayProcess) -> ChatClient:
        fake = self.run.fake
        return ChatClient(relay, self.ledger, self.settings, fake.script if fake else None)

    def direct(self) -> DirectClient:
        return DirectClient(self.run.direct_base_url, self.run.api_key, self.ledger, self.settings)

    def close(self) -> None:
        for relay in self.relays:
            relay.stop()

    # --- what the relay said -------------------------------------------------------------

    def plan(self, relay: RelayProcess, turn: Turn) -> Plan:
        """The ``cache_plan`` of ``turn``'s request (logged before it was dispatched)."""
        for event, fields in relay.events_for(turn.request_id):
            if event == "cache_plan":
                return Plan(
                    replayed=int(fields.get("replayed", "0")),
                    replay_bytes=int(fields.get("replay_bytes", "0")),
                    rejected=tuple(_string_list(fields.get("rejected", "[]"))),
                )
        skipped = [
            f.get("reason") for e, f in relay.events_for(turn.request_id) if e == "cache_skipped"
        ]
        detail = f" (cache_skipped: {', '.join(map(str, skipped))})" if skipped else ""
        raise CheckFailed(f"{turn.label}: the relay logged no cache_plan{detail}")

    def replayed(self, relay: RelayProcess, turn: Turn) -> int:
        return self.plan(relay, turn).replayed

    def rejections(self, relay: RelayProcess, turn: Turn) -> list[Event]:
        """Events saying an upstream refused or failed this request."""
        return [e for e in relay.events_for(turn.request_id) if e[0] in REJECTION_EVENTS]

    def expect_replay(self, relay: RelayProcess, turn: Turn, *, at_least: int = 1) -> int:
        """``turn`` replayed at least ``at_least`` blocks and the upstream took them:
        answered 200 with no rejection logged."""
        plan = self.plan(relay, turn)
        if plan.replayed < at_least:
            raise CheckFailed(
                f"{turn.label}: replayed={plan.replayed}, expected >= {at_least} "
                f"(rejected: {list(plan.rejected)})"
            )
        refused = self.rejections(relay, turn)
        if refused or not turn.ok:
            raise CheckFailed(f"{turn.label}: the upstream refused the replay: {refused}")
        return plan.replayed

    def expect_no_replay(self, relay: RelayProcess, turn: Turn) -> Plan | None:
        """``turn`` replayed nothing (no plan at all counts: the cache skipped it)."""
        plans = [f for e, f in relay.events_for(turn.request_id) if e == "cache_plan"]
        if not plans:
            return None
        plan = self.plan(relay, turn)
        if plan.replayed:
            raise CheckFailed(f"{turn.label}: replayed={plan.replayed}, expected no replay")
        return plan

    def wait_event(
        self, relay: RelayProcess, event: str, request_id: str | None, timeout: float = 15.0
    ) -> dict[str, str]:
        def found() -> dict[str, str] | None:
            for name, fields in relay.events_for(request_id):
                if name == event:
                    return fields
            return None

        try:
            return wait_until(found, timeout=timeout, what=f"relay event {event}")
        except WaitTimeout:
            raise CheckFailed(f"the relay logged no {event} for {request_id}") from None

    # --- what the fake upstream received (offline) ----------------------------------------

    def calls(self) -> list[dict[str, Any]]:
        if self.run.fake is None:
            raise RuntimeError("upstream records exist only offline")
        return self.run.fake.calls()


def _string_list(raw: str) -> list[str]:
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return [raw]
    return [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]


# --- reading the fake's records -----------------------------------------------------------


def continuity(call: Mapping[str, Any]) -> dict[str, Any]:
    """The fake's continuity probe of one call (replayed, intact, misplaced, invalid)."""
    report = call.get("continuity")
    return dict(report) if isinstance(report, Mapping) else {}


def final_output(call: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The output items the fake minted for a call (from ``response.completed``)."""
    for event in call.get("events") or []:
        if isinstance(event, Mapping) and event.get("type") == "response.completed":
            return list(event.get("response", {}).get("output", []))
    response = call.get("response")
    if isinstance(response, Mapping):
        return list(response.get("output") or [])
    return []


def ciphertexts(items: list[Any]) -> list[str]:
    """Every reasoning item's ``encrypted_content`` among ``items``, in order."""
    return [
        item["encrypted_content"]
        for item in items
        if isinstance(item, Mapping)
        and item.get("type") == "reasoning"
        and isinstance(item.get("encrypted_content"), str)
    ]


def sent_input(call: Mapping[str, Any]) -> list[Any]:
    body = call.get("body")
    return list(body.get("input") or []) if isinstance(body, Mapping) else []


def expect_intact(call: Mapping[str, Any], label: str, *, at_least: int = 1) -> None:
    """The fake verified every replayed block: genuine, in its original place."""
    report = continuity(call)
    replayed, intact = report.get("replayed", 0), report.get("intact", 0)
    if replayed < at_least or intact != replayed:
        raise CheckFailed(
            f"{label}: the fake's continuity probe says replayed={replayed} intact={intact} "
            f"misplaced={report.get('misplaced')} invalid={report.get('invalid')}"
        )
