"""REASONING_CACHE_URL (relay.settings.database_url): libpq's own parser decides what is
valid, and no message or description ever carries the password."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from relay.errors import ConfigError
from relay.settings.config import load_config
from relay.settings.database_url import parse_database_url

PASSWORD = "s3cret-pass-9q"


@pytest.mark.parametrize(
    ("raw", "description"),
    [
        (f"postgresql://relay:{PASSWORD}@db.internal:6432/cache", "postgresql://relay@db.internal:6432/cache"),
        (f"postgres://relay:{PASSWORD}@db/cache?sslmode=require", "postgresql://relay@db/cache"),
        (f"host=db port=5433 dbname=cache user=relay password={PASSWORD}", "postgresql://relay@db:5433/cache"),
        ("postgresql:///cache?host=/run/postgresql", "postgresql://[/run/postgresql]/cache"),
        ("dbname=cache", "postgresql:///cache"),
    ],
)  # fmt: skip
def test_urls_and_key_value_strings_are_described_without_a_password(
    raw: str, description: str
) -> None:
    url = parse_database_url("REASONING_CACHE_URL", raw)
    assert url.description == description and str(url) == description
    assert PASSWORD not in repr(url) and url.conninfo == raw


@pytest.mark.parametrize(
    "raw",
    [f"mysql://root:{PASSWORD}@db/x", f"postgresql://relay:{PASSWORD}@db:notaport/x",
     f"host=db password={PASSWORD} bogus_option=1", "just-a-word"],
)  # fmt: skip
def test_an_invalid_value_is_refused_in_one_line_without_echoing_it(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"^REASONING_CACHE_URL: ") as refused:
        load_config({"REASONING_CACHE_URL": raw})
    assert PASSWORD not in str(refused.value) and "\n" not in str(refused.value)


def test_unset_keeps_the_sqlite_store_and_the_lease_is_validated() -> None:
    config = load_config({})
    assert config.reasoning_cache_url is None and config.reasoning_cache_lease_ms == 30_000
    assert PASSWORD not in repr(load_config({"REASONING_CACHE_URL": f"password={PASSWORD}"}))
    with pytest.raises(ConfigError, match=r"^REASONING_CACHE_LEASE_MS='100': expected"):
        load_config({"REASONING_CACHE_LEASE_MS": "100"})


@given(
    password=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=8),
    user=st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True),
    host=st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
)
def test_no_password_ever_reaches_the_description(password: str, user: str, host: str) -> None:
    """Whatever the password (URL-quoted in a URL, quoted in key=value form), the
    description shows user, host and database, and never the password."""
    assume(password not in f"postgresql://{user}@{host}/cache")
    spellings = [
        f"postgresql://{user}:{quote(password, safe='')}@{host}/cache",
        "host={} user={} dbname=cache password='{}'".format(
            host, user, password.replace("\\", "\\\\").replace("'", "\\'")
        ),
    ]
    for raw in spellings:
        url = parse_database_url("REASONING_CACHE_URL", raw)
        assert url.description == f"postgresql://{user}@{host}/cache"
        assert password not in repr(url)
