"""The built-in upstream's identity in scopes: a real upstream's origin comes from its URL
(``scheme://host:port``), the embedded offline fake's is a fixed label no URL can give."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from relay.cache.replay_cache import EMBEDDED_FAKE_ORIGIN, UpstreamIdentity

URLS = st.text() | st.from_regex(r"https?://[a-z0-9.:-]{1,30}(/[a-z0-9/]{0,20})?", fullmatch=True)


@given(URLS)
def test_no_url_gives_the_embedded_fake_origin(url: str) -> None:
    try:
        identity = UpstreamIdentity.of(url, "sk-test")
    except ValueError:  # not a URL at all (configuration refuses it first)
        identity = None
    assume(identity is not None)
    assert identity is not None
    assert "://" in identity.origin
    assert identity.origin != EMBEDDED_FAKE_ORIGIN
