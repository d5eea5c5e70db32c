"""Replay itself: after a restart, across JSON/SSE, for two conversations at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from live.checks import check
from live.client import Message, Turn
from live.context import CheckContext, ciphertexts, expect_intact, final_output, sent_input
from live.conversation import user, word
from live.fake_replies import say
from live.verdict import Verdict, expect, passed


@check("restart_replay", "exact encrypted blocks accepted after a relay restart")
def restart_replay(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    chat = ctx.client(relay)
    messages: list[Message] = [
        user("Pick a whole number between 1 and 50 and keep it to yourself. "
             "Reply with exactly the word: ready")
    ]  # fmt: skip
    first = chat.chat("turn1", messages, script=say("ready"))
    relay.restart()  # same data directory and port: only the store carries the block over
    messages += [first.message(), user("Reply with exactly the word: continued")]
    second = chat.chat("turn2", messages, stream=True, script=say("continued"))
    replayed = ctx.expect_replay(relay, second)
    how = "the upstream answered 200 with no rejection"
    if ctx.offline:
        calls = ctx.calls()
        expect(len(calls) == 2, f"expected 2 upstream calls, the fake got {len(calls)}")
        expect_intact(calls[1], "turn2")
        minted, sent = ciphertexts(final_output(calls[0])), ciphertexts(sent_input(calls[1]))
        expect(minted and sent == minted, "turn2 did not carry turn1's ciphertext byte for byte")
        how += "; the fake's probe says intact and the ciphertext is byte-identical"
    return passed(f"after a restart turn2 replayed {replayed} block(s); {how}")


@check("json_sse_transitions", "one conversation switching JSON → SSE → JSON keeps replaying")
def json_sse_transitions(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    chat = ctx.client(relay)
    messages: list[Message] = [user("Name one primary colour. Answer with one word.")]
    first = chat.chat("json1", messages, script=say("red"))
    messages += [first.message(), user("Name a different primary colour. One word.")]
    second = chat.chat("sse2", messages, stream=True, script=say("blue"))
    expect(second.tokens is not None, "sse2: the stream carried no usage chunk")
    counts = [ctx.expect_replay(relay, second, at_least=1)]
    messages += [second.message(), user("And the third primary colour? One word.")]
    third = chat.chat("json3", messages, script=say("yellow"))
    counts.append(ctx.expect_replay(relay, third, at_least=2))
    if ctx.offline:
        calls = ctx.calls()
        expect_intact(calls[1], "sse2", at_least=1)
        expect_intact(calls[2], "json3", at_least=2)
    return passed(f"SSE turn replayed {counts[0]}, the JSON turn after it {counts[1]}")


CONVERSATIONS = {"apple": "APPLE", "river": "RIVER"}


@check("concurrent_conversations", "two conversations at once each replay their own blocks")
def concurrent_conversations(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    chat = ctx.client(relay)
    histories: dict[str, list[Message]] = {
        key: [user(f"Remember the word {secret}. Reply with exactly the word: ok")]
        for key, secret in CONVERSATIONS.items()
    }

    def turn(key: str, label: str) -> Turn:
        # No fake scripts: the fake answers in arrival order, which threads do not fix.
        return chat.chat(f"{key}-{label}", histories[key])

    with ThreadPoolExecutor(max_workers=2) as pool:
        firsts = dict(zip(histories, pool.map(lambda k: turn(k, "turn1"), histories), strict=True))
        for key, first in firsts.items():
            histories[key] += [
                first.message(),
                user("Which word did I ask you to remember? Answer with that word only."),
            ]
        seconds = dict(zip(histories, pool.map(lambda k: turn(k, "turn2"), histories), strict=True))
    replayed = {key: ctx.expect_replay(relay, seconds[key]) for key in seconds}
    if ctx.offline:
        followups = [c for c in ctx.calls() if c.get("continuity", {}).get("replayed")]
        expect(len(followups) == 2, f"expected 2 replaying calls, the fake got {len(followups)}")
        for index, call in enumerate(followups):
            expect_intact(call, f"follow-up {index + 1}")
        secrets = [tuple(call["continuity"]["secrets"]) for call in followups]
        expect(secrets[0] != secrets[1], "both conversations replayed the same block")
    else:
        for key, second in seconds.items():
            expect(word(second.text) == key, f"{second.label}: answered {second.text[:60]!r}")
    return passed(
        "each follow-up replayed its own block ("
        + ", ".join(f"{k}: {n}" for k, n in replayed.items())
        + ")"
    )
