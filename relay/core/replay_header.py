"""``X-Relay-Replay``: what a relayed answer's request replayed, for a client or a test
to see without the relay's log. Pure.

- ``replayed=<n>``: n stored reasoning blocks went upstream with the request;
- ``none; reason=<code>``: none did, and why: a plan's first rejection (relay.core.receipts'
  reason codes: ``stale_generation``, ``memory_pressure``, ...), ``unmatched`` (a visible
  assistant message no record ends at), ``nothing_to_replay`` (no earlier assistant turn),
  a cache skip (``not_a_reasoning_model``, ``underivable_history``, ``canonical_limit``,
  ``capacity_bypass``), ``replay_rejected`` (the upstream refused the replayed state and
  the request was resent without it), ``responses_passthrough`` (``/v1/responses``:
  forwarded as sent) or ``chat_provider`` (a Chat Completions provider);
- ``off``: the reasoning cache is off.
"""

from __future__ import annotations

from typing import Final

from relay.core.planner import Plan

HEADER: Final = "X-Relay-Replay"
OFF: Final = "off"
UNMATCHED: Final = "unmatched"
NOTHING: Final = "nothing_to_replay"
REPLAY_REJECTED: Final = "replay_rejected"
PASSTHROUGH: Final = "responses_passthrough"
CHAT_PROVIDER: Final = "chat_provider"


def none(reason: str) -> str:
    return f"none; reason={reason}"


def for_plan(plan: Plan) -> str:
    if plan.blocks:
        return f"replayed={len(plan.blocks)}"
    if plan.rejections:
        return none(plan.rejections[0].reason.value)
    return none(UNMATCHED if plan.unmatched else NOTHING)
