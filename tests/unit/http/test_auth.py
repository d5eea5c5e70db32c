from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from relay.errors import ConfigError
from relay.http.auth import (
    bearer_matches,
    ensure_private_dir,
    load_or_create_secret,
    load_or_create_token,
)


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


# --- the data directory ---------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("existing", [0o755, 0o777, 0o500, 0o700])
def test_an_existing_data_dir_is_made_private(tmp_path: Path, existing: int) -> None:
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(existing)
    ensure_private_dir(data)
    assert mode(data) == 0o700


def test_a_new_data_dir_is_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        ensure_private_dir(tmp_path / "a" / "data")
    finally:
        os.umask(old)
    assert mode(tmp_path / "a" / "data") == 0o700


def test_a_symlink_to_an_own_directory_is_followed(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir(mode=0o755)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    ensure_private_dir(tmp_path / "link")
    assert mode(tmp_path / "real") == 0o700


def test_someone_elses_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "theirs").mkdir(mode=0o755)
    (tmp_path / "link").symlink_to(tmp_path / "theirs")
    owner = (tmp_path / "theirs").stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)  # we are someone else now
    with pytest.raises(ConfigError, match=r"a directory of uid \d+, not of this user") as caught:
        ensure_private_dir(tmp_path / "theirs")
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match=r"is a symlink to .*theirs, a directory of uid"):
        ensure_private_dir(tmp_path / "link")
    assert mode(tmp_path / "theirs") == 0o755  # left alone


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files of another user")
def test_a_symlink_another_user_could_re_point_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "mine")
    os.lchown(tmp_path / "link", 65534, 65534)
    with pytest.raises(ConfigError, match="symlink owned by uid 65534"):
        ensure_private_dir(tmp_path / "link")


def test_a_file_in_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("x")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        ensure_private_dir(tmp_path / "data")


def test_a_mode_that_cannot_be_changed_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)

    def refuse(fd: int, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", refuse)
    with pytest.raises(ConfigError, match=r"cannot make .* private \(mode 0755, needs 0700\)"):
        ensure_private_dir(data)
    monkeypatch.setattr(os, "fchmod", lambda fd, mode: None)  # a file system ignoring chmod
    with pytest.raises(ConfigError, match="its mode stays 0755"):
        ensure_private_dir(data)


def test_a_kept_secret_is_created_once_private_and_whole(tmp_path: Path) -> None:
    path = tmp_path / "offline-fake.key"
    secret = load_or_create_secret(path, what="sealing key")
    assert len(secret) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_secret(path, what="sealing key") == secret
    path.chmod(0o644)
    assert load_or_create_secret(path, what="sealing key") == secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


@pytest.mark.parametrize("stored", ["", "abc", "zz" * 32, "00" * 31])
def test_a_damaged_kept_secret_is_refused(tmp_path: Path, stored: str) -> None:
    path = tmp_path / "offline-fake.key"
    path.write_text(stored)
    with pytest.raises(ConfigError, match=r"offline-fake.key: the stored sealing key is damaged"):
        load_or_create_secret(path, what="sealing key")
