"""A replay the upstream refuses is recovered: the relay resends without it.

Contract (the relay side is being built): on the upstream's rejection of a request that
carried replayed blocks, the relay logs ``replay_rejected``, sends the request again as
plain visible history, and counts both in ``/api/cache/reasoning`` under
``stats.replay`` (``dispatched``, ``accepted``, ``rejected``, ``resent``). The client
sees only the successful answer.
"""

from __future__ import annotations

from live.checks import check
from live.client import Message
from live.context import CheckContext, continuity
from live.conversation import user
from live.corrupt import corrupt_one_ciphertext
from live.fake_replies import say
from live.verdict import CheckFailed, Verdict, expect, passed


@check("rejected_replay_recovered", "a replay the upstream refuses is resent without it")
def rejected_replay_recovered(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    chat = ctx.client(relay)
    messages: list[Message] = [user("Reply with exactly the word: alpha")]
    first = chat.chat("turn1", messages, script=say("alpha"))
    ctx.wait_event(relay, "cache_observed", first.request_id)
    relay.stop()
    damaged = corrupt_one_ciphertext(relay.cache_path)
    relay.start()
    messages += [first.message(), user("Reply with exactly the word: beta")]
    chat.queue(say("beta"))  # offline: the refused call consumes one script, the resend the other
    second = chat.chat("turn2", messages, script=say("beta"), expect_ok=False)
    plan = ctx.plan(relay, second)
    expect(plan.replayed >= 1, f"turn2: the damaged block was not dispatched ({plan})")
    counters = relay.replay_stats()
    if not second.ok:
        raise CheckFailed(
            f"the client got {second.describe()}: the relay did not resend without the "
            "refused block"
        )
    if counters is None:
        raise CheckFailed("turn2 succeeded but /api/cache/reasoning has no stats.replay")
    expect(
        counters.get("rejected", 0) >= 1 and counters.get("resent", 0) >= 1,
        f"stats.replay after the refusal: {counters}",
    )
    ctx.wait_event(relay, "replay_rejected", second.request_id)
    if ctx.offline:
        calls = ctx.calls()
        expect(
            len(calls) == 3, f"expected turn1, the refused call and the resend; got {len(calls)}"
        )
        refused, resent = calls[1], calls[2]
        expect(
            refused.get("status") == 400 and continuity(refused).get("invalid", 0) >= 1,
            f"the refused call: status {refused.get('status')}, probe {continuity(refused)}",
        )
        expect(
            resent.get("status") == 200 and continuity(resent).get("replayed") == 0,
            f"the resend: status {resent.get('status')}, probe {continuity(resent)}",
        )
    return passed(
        f"one character of observation {damaged.observation_id}'s ciphertext changed; the "
        f"upstream refused it, the relay resent without it (stats.replay {counters}), client 200"
    )
