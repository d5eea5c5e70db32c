"""relay.upstream.models.UpstreamModels: the cache in front of the upstream's model list
(fresh for TTL_S, a failure remembered for RETRY_S, one fetch shared by concurrent callers,
never an error), on a manual clock with a scripted fetch."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from relay.clock import ManualClock
from relay.transport.upstream import origin_of
from relay.upstream.model_list import UpstreamModel
from relay.upstream.models import RETRY_S, TTL_S, ModelsUnavailable, UpstreamModels

GPT5 = (UpstreamModel("gpt-5", 1, "system"),)
O3 = (UpstreamModel("o3", 2, "system"),)
Outcome = tuple[UpstreamModel, ...] | Exception


class ScriptedFetch:
    """Answers each fetch with the next outcome; ``hold`` makes fetches wait for ``release``."""

    def __init__(self, *outcomes: Outcome, hold: bool = False) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0
        self.entered = asyncio.Event()  # a fetch has started
        self.release = asyncio.Event()
        if not hold:
            self.release.set()

    async def __call__(self) -> tuple[UpstreamModel, ...]:
        self.calls += 1
        self.entered.set()
        await self.release.wait()
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def test_a_listing_is_kept_for_the_ttl_then_fetched_again() -> None:
    async def test() -> None:
        clock = ManualClock()
        fetch = ScriptedFetch(GPT5, O3)
        models = UpstreamModels(fetch, clock, origin="http://up")
        assert await models.current() == GPT5
        clock.advance(TTL_S - 0.001)
        assert await models.current() == GPT5
        assert fetch.calls == 1
        clock.advance(0.001)
        assert await models.current() == O3
        assert fetch.calls == 2

    run(test)


def test_concurrent_callers_share_one_fetch() -> None:
    async def test() -> None:
        fetch = ScriptedFetch(GPT5, hold=True)
        models = UpstreamModels(fetch, ManualClock(), origin="http://up")
        callers = [asyncio.ensure_future(models.current()) for _ in range(50)]
        await fetch.entered.wait()  # started after all 50 callers were queued and waiting
        assert fetch.calls == 1
        fetch.release.set()
        assert await asyncio.gather(*callers) == [GPT5] * 50
        assert fetch.calls == models.fetches == 1

    run(test)


def test_a_caller_that_goes_away_does_not_cancel_the_shared_fetch() -> None:
    async def test() -> None:
        fetch = ScriptedFetch(GPT5, hold=True)
        models = UpstreamModels(fetch, ManualClock(), origin="http://up")
        leaving = asyncio.ensure_future(models.current())
        staying = asyncio.ensure_future(models.current())
        await fetch.entered.wait()
        leaving.cancel()
        fetch.release.set()
        assert await staying == GPT5
        assert leaving.cancelled()

    run(test)


@pytest.mark.parametrize(
    ("failure", "line"),
    [
        (ModelsUnavailable("unreachable"), "reason=unreachable upstream=http://up"),
        (ModelsUnavailable("http_status", 401), "reason=http_status status=401 upstream="),
        (ModelsUnavailable("malformed", 200), "reason=malformed status=200"),
        (ModelsUnavailable("timeout"), "reason=timeout"),
        (ModelsUnavailable("too_large"), "reason=too_large"),
        (KeyError("sk-secret-in-a-message"), "reason=error kind=KeyError upstream="),
    ],
)
def test_a_failure_lists_no_upstream_models_and_logs_one_line(
    failure: Exception, line: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def test() -> None:
        models = UpstreamModels(ScriptedFetch(failure), ManualClock(), origin="http://up")
        with caplog.at_level(logging.INFO, logger="relay"):
            assert await models.current() == ()

    run(test)
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert message.startswith("models_upstream_unavailable ")
    assert line in message and "fallback=aliases" in message
    assert "sk-secret" not in message  # an exception's text never reaches the log


def test_a_failure_is_retried_after_the_retry_interval_not_before() -> None:
    async def test() -> None:
        clock = ManualClock()
        fetch = ScriptedFetch(ModelsUnavailable("timeout"), GPT5)
        models = UpstreamModels(fetch, clock, origin="http://up")
        assert await models.current() == ()
        clock.advance(RETRY_S - 0.001)
        assert await models.current() == ()
        assert fetch.calls == 1  # a down upstream costs one fetch per interval
        clock.advance(0.001)
        assert await models.current() == GPT5

    run(test)


def test_a_failed_refresh_drops_the_old_listing() -> None:
    async def test() -> None:
        clock = ManualClock()
        fetch = ScriptedFetch(GPT5, ModelsUnavailable("http_status", 500))
        models = UpstreamModels(fetch, clock, origin="http://up")
        assert await models.current() == GPT5
        clock.advance(TTL_S)
        assert await models.current() == ()

    run(test)


def test_the_wall_clock_does_not_age_a_listing() -> None:
    async def test() -> None:
        clock = ManualClock()
        fetch = ScriptedFetch(GPT5, O3)
        models = UpstreamModels(fetch, clock, origin="http://up")
        await models.current()
        clock.jump_wall(10 * TTL_S)
        assert await models.current() == GPT5
        assert fetch.calls == 1

    run(test)


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://api.openai.com/v1/models", "https://api.openai.com"),
        ("http://user:sk-secret@gateway.local:8080/v1/models", "http://gateway.local:8080"),
        ("http://[::1]:9000/v1/models", "http://[::1]:9000"),
    ],
)
def test_the_origin_in_logs_and_errors_never_carries_credentials(url: str, origin: str) -> None:
    assert origin_of(url) == origin
