"""The fake upstream as the relay's offline upstream (entry point ``relay.offline_upstream``
``fake``): what ``relay serve`` answers from when no OPENAI_API_KEY is set."""

from __future__ import annotations

from fakeupstream.fake import FakeUpstream
from relay.clock import Clock


def create(*, clock: Clock) -> FakeUpstream:
    return FakeUpstream(clock=clock)
