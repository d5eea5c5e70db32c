"""The fake upstream as the relay's offline upstream (entry point ``relay.offline_upstream``
``fake``): what ``relay serve`` answers from when no OPENAI_API_KEY is set.

Only the model API is served: no ``/__fake/`` control (their 404 is OpenAI's ``Invalid
URL``), so no local user or web page can script answers, read the prompts the relay sent,
make the fake stream a file or rotate its key. ``secret`` is the sealing key the relay keeps
in its data directory, so the fake's ciphertext still verifies after a restart.
"""

from __future__ import annotations

from fakeupstream.fake import FakeUpstream
from relay.clock import Clock


def create(*, clock: Clock, secret: bytes) -> FakeUpstream:
    return FakeUpstream(clock=clock, secret=secret, controls=False)
