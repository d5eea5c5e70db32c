"""relay.app.offline: the offline upstream comes from the relay.offline_upstream entry point
(the relay never imports the fake), and a missing one is one clear configuration error."""

from __future__ import annotations

from typing import Any

import pytest

from fakeupstream.embedded import create
from fakeupstream.fake import FakeUpstream
from relay.app import offline
from relay.clock import ManualClock
from relay.errors import ConfigError


def test_the_installed_fake_is_the_offline_upstream() -> None:
    factory = offline.load_offline_upstream()
    assert factory is create
    fake = factory(clock=ManualClock(), secret=bytes(32))
    assert isinstance(fake, FakeUpstream)
    assert not fake.controls  # relay serve's offline upstream serves no /__fake/ control


def test_no_installed_offline_upstream_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def none(*, group: str) -> list[Any]:
        assert group == offline.ENTRY_POINT_GROUP
        return []

    monkeypatch.setattr(offline, "entry_points", none)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is not set and no offline upstream"):
        offline.load_offline_upstream()
