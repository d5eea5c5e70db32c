"""Offline A/B of what replay buys: one Cursor-like 20-turn agent session through the relay
with the reasoning cache on and off, against the fake's prompt cache (which, like
OpenAI's, caches the prompt and the generated turn, so a history that drops the
reasoning item misses where it was). Run with ``-s`` for the table."""

from __future__ import annotations

from pathlib import Path

from tests.support.agent_session import TURNS, TurnUsage, run_session
from tests.support.stack import running_stack


def session(data_dir: Path, cache: bool) -> tuple[list[TurnUsage], list[int]]:
    """The session's usages, and how many reasoning items each upstream request carried."""
    env = {"REASONING_CACHE_ENABLED": "1" if cache else "0"}
    with running_stack(data_dir, env) as stack:
        usages = run_session(stack)
        replayed = [
            sum(1 for item in record.body["input"] if item.get("type") == "reasoning")
            for record in stack.fake.requests
        ]
    return usages, replayed


def table(on: list[TurnUsage], off: list[TurnUsage]) -> str:
    rows = [
        "turn  cached on  cached off  prompt on  prompt off  reasoning on  reasoning off",
    ]
    for a, b in zip(on, off, strict=True):
        rows.append(
            f"{a.turn:4d}  {a.cached_share:9.1%}  {b.cached_share:10.1%}  {a.prompt_tokens:9d}"
            f"  {b.prompt_tokens:10d}  {a.reasoning_tokens:12d}  {b.reasoning_tokens:13d}"
        )
    total = [
        sum(u.cached_tokens for u in s[1:]) / sum(u.prompt_tokens for u in s[1:]) for s in (on, off)
    ]
    rows.append(f"turns 2-{len(on)}: cached share {total[0]:.1%} on, {total[1]:.1%} off")
    return "\n".join(rows)


def test_replayed_reasoning_keeps_the_prompt_cache_hitting(tmp_path: Path) -> None:
    on, replayed_on = session(tmp_path / "on", cache=True)
    off, replayed_off = session(tmp_path / "off", cache=False)
    print("\n" + table(on, off))
    assert len(on) == len(off) == TURNS
    # The relay replayed every earlier turn's reasoning with the cache on, none with it off.
    assert replayed_on == list(range(TURNS))
    assert replayed_off == [0] * TURNS
    # The first request of each arm is cold; the system prompt and tools pass 1,024 tokens.
    assert on[0].cached_tokens == off[0].cached_tokens == 0
    assert on[0].prompt_tokens == off[0].prompt_tokens > 1024
    for a, b in zip(on[1:], off[1:], strict=True):
        assert a.cached_share > b.cached_share, (a, b)
        assert a.reasoning_tokens == b.reasoning_tokens > 0  # the same scripted answers
    assert all(a.prompt_tokens > b.prompt_tokens for a, b in zip(on[1:], off[1:], strict=True))
