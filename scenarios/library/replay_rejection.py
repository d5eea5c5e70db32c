"""A replay the upstream refuses (its sealing key rotated): the turn is still answered,
the refused blocks are never offered again -- across restarts too -- and continuity is
rebuilt from the block generated in their place.

Input indices: without replay a message is one item; a replayed text answer is two
(reasoning, message).
"""

from __future__ import annotations

from scenarios.core import Ctx
from scenarios.dsl import (
    Branch,
    Chat,
    ClientGot,
    Holds,
    Matches,
    RelayOptions,
    RelayReported,
    ReplayOf,
    RestartRelay,
    RotateUpstreamKey,
    Scenario,
    UpstreamReceived,
)
from scenarios.library import scenario
from scenarios.library.replay import CACHE, chain, echo, intact
from scenarios.seed import Seed

NO_RESEND = RelayOptions(
    cache_enabled=True, idle_timeout_ms=1000, extra_env=(("RELAY_REPLAY_REJECTION_RESEND", "0"),)
)


def refused_then(turn: str, replayed: list[ReplayOf]) -> Holds:
    """``turn`` caused two upstream calls: the first replayed exactly ``replayed`` and was
    refused with 400 ``invalid_encrypted_content``; the second (the resend) replayed
    nothing. (UpstreamReceived looks at the last call; this looks at the first.)"""

    def check(ctx: Ctx) -> bool:
        calls = ctx.upstream_of(ctx.turn(turn))
        if len(calls) != 2:
            return False
        first, resend = calls
        return (
            first["status"] == 400
            and _replayed_at(first) == [r.at for r in replayed]
            and _replayed_at(resend) == []
        )

    return Holds(f"{turn}: refused with {len(replayed)} replayed blocks, resent without", check)


def _replayed_at(call: dict[str, object]) -> list[int]:
    body = call.get("body")
    items = body.get("input") if isinstance(body, dict) else None
    return [
        index
        for index, item in enumerate(items or [])
        if isinstance(item, dict)
        and item.get("type") == "reasoning"
        and isinstance(item.get("encrypted_content"), str)
    ]


@scenario()
def replay_rejected_after_key_rotation(seed: Seed) -> Scenario:
    """Two blocks replay; the upstream's key rotates; the next turn is refused, retired
    and resent once without replay, and the client sees one ordinary answer. After a
    restart the next turn replays the new block alone, and a branch that would replay a
    refused block sends it as plain text instead of offering it again."""
    s = Scenario("replay_rejected_after_key_rotation", relay=CACHE)
    s >> Chat("first", name="t1")
    s >> Chat("second", name="t2", stream=False)
    s << UpstreamReceived(replayed=chain("t1"), continuity=intact(1))
    s >> RotateUpstreamKey()
    s >> Chat("third", name="t3", stream=seed.choice("mode", ["sse", "json"]) == "sse")
    s << ClientGot(outcome="success", text=echo("third", 0))
    s << UpstreamReceived(calls=2, replayed=[], continuity=intact(0))
    s << refused_then("t3", chain("t1", "t2"))
    s << RelayReported(
        "replay_rejected", count=1, fields={"reason": "invalid_encrypted_content", "retired": "2"}
    )
    s >> RestartRelay(kill=seed.choice("restart", ["kill", "stop"]) == "kill")
    s >> Chat("fourth", name="t4")
    s << ClientGot(outcome="success", text=echo("fourth", 1))
    s << UpstreamReceived(calls=1, replayed=[ReplayOf("t3", at=5)], continuity=intact(1))
    s >> Branch("t2")
    s >> Chat("another third", name="alt")
    s << ClientGot(outcome="success", text=echo("another third", 0))
    s << UpstreamReceived(calls=1, replayed=[], continuity=intact(0))
    s << RelayReported("cache_plan", fields={"rejected": Matches("upstream_rejected")})
    s << RelayReported("replay_rejected", count=1)  # never offered again
    return s


@scenario()
def replay_rejected_without_resend(seed: Seed) -> Scenario:
    """With RELAY_REPLAY_REJECTION_RESEND=0 the refusal is the answer (the upstream's 400,
    ciphertext redacted), once: the block is retired, so the user's own retry succeeds
    without replay, and the turn after it replays the retry's block."""
    s = Scenario("replay_rejected_without_resend", relay=NO_RESEND)
    s >> Chat("first", name="t1")
    s >> RotateUpstreamKey()
    s >> Chat("second", name="t2", stream=seed.choice("mode", ["sse", "json"]) == "sse")
    s << ClientGot(
        outcome="error",
        status=400,
        error_code="invalid_encrypted_content",
        error_message="The encrypted content <redacted> could not be verified.",
    )
    s << UpstreamReceived(calls=1, replayed=chain("t1"))
    s >> Chat(None, name="retry")  # the user resends the same conversation
    s << ClientGot(outcome="success", text=echo("second", 0))
    s << UpstreamReceived(calls=1, replayed=[], continuity=intact(0))
    s >> Chat("third", name="t3")
    s << ClientGot(outcome="success", text=echo("third", 1))
    s << UpstreamReceived(calls=1, replayed=[ReplayOf("retry", at=3)], continuity=intact(1))
    s << RelayReported("replay_rejected", count=1, fields={"resend": "False"})
    return s
