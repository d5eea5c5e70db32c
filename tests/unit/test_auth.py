from __future__ import annotations

import stat
from pathlib import Path

import pytest

from relay.auth import bearer_matches, load_or_create_token
from relay.errors import ConfigError


def test_token_created_private_and_stable(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token, path = load_or_create_token(data)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert len(token) >= 32
    again, _ = load_or_create_token(data)
    assert again == token


def test_loose_token_file_is_tightened(tmp_path: Path) -> None:
    token, path = load_or_create_token(tmp_path)
    path.chmod(0o644)
    assert load_or_create_token(tmp_path)[0] == token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_truncated_token_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "relay-token").write_text("abc")
    with pytest.raises(ConfigError, match="too short"):
        load_or_create_token(tmp_path)


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("Bearer s3cret-token-value", True),
        ("bearer s3cret-token-value", True),
        ("Bearer s3cret-token-valuX", False),
        ("Bearer s3cret-token-value-longer", False),
        ("Basic s3cret-token-value", False),
        ("", False),
        (None, False),
    ],
)
def test_bearer_matches(header: str | None, ok: bool) -> None:
    assert bearer_matches(header, "s3cret-token-value") is ok
