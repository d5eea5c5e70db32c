"""The Chat-provider checks bind on real runs: a strict-provider scenario passes, and the
same history with a restored reasoning_content moved to another message, or with a client
success the provider never produced, fails the right check."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from scenarios.checker import CHAT_PATH, check_history
from scenarios.library import REGISTRY, load_all
from scenarios.play import PlayResult, play
from scenarios.seed import Seed
from tests.support.history_files import load_mutated, recorded_events

pytestmark = pytest.mark.scenario

load_all()


@pytest.fixture
def chain(seed: Seed) -> Iterator[PlayResult]:
    result = play(REGISTRY["strict_tool_chain_needs_the_cache"].build(seed), seed, keep=True)
    yield result
    shutil.rmtree(result.run_dir, ignore_errors=True)


def _chat_calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "upstream_exchange" and e["path"] == CHAT_PATH]


def test_the_chain_restores_and_the_checks_pass(chain: PlayResult) -> None:
    report = chain.report
    assert report.ok, report.describe()
    hops = report.stats["chat_calls"] - 4  # off1, off2, on0 and the last turn besides hops
    assert report.stats["restored_reasoning"] == sum(range(1, hops + 2))
    assert (report.stats["wrong_restores"], report.stats["empty_fills"]) == (0, 0)


def test_reasoning_moved_to_another_message_is_a_wrong_restore(chain: PlayResult) -> None:
    events = recorded_events(chain)
    last = _chat_calls(events)[-1]
    messages = last["body"]["messages"]
    first, second = messages[1]["reasoning_content"], messages[3]["reasoning_content"]
    messages[1]["reasoning_content"], messages[3]["reasoning_content"] = second, first
    report = check_history(load_mutated(chain, events))
    assert report.count("no_wrong_restore") == 2, report.describe()
    assert "minted for a different visible assistant message" in report.describe()


def test_a_success_the_provider_never_produced_is_a_false_success(chain: PlayResult) -> None:
    events = recorded_events(chain)
    answers = [e for e in events if e["kind"] == "client_answer" and e["outcome"] == "success"]
    answers[-1]["text"] += " (and more)"
    report = check_history(load_mutated(chain, events))
    assert report.count("no_false_success") == 1, report.describe()
    # The same run without the Chat calls in the model: every success would be unbacked.
    stripped = [e for e in events if e["kind"] != "upstream_exchange"]
    assert check_history(load_mutated(chain, stripped), ("no_false_success",)).count(
        "no_false_success"
    ) == len(answers)
