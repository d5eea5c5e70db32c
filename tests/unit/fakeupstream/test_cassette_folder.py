"""Where the recorder writes: unscrubbed cassettes only into a private directory (0700,
ours, no symlink), as 0600 files; a refused directory records nothing."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from live.cassettes import CassetteFolder, record_cassettes


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """A umask that would leave new files group- and world-readable."""
    old = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(old)


def test_a_private_directory_is_made_0700_and_its_files_0600(
    tmp_path: Path, loose_umask: None
) -> None:
    target = tmp_path / "deep" / "private"
    folder = CassetteFolder.open(target, private=True)
    try:
        first = folder.write("one", suffix=".yaml")
        second = folder.write("two", suffix=".yaml")
    finally:
        folder.close()
    assert mode(target) == 0o700
    assert (first.name, second.name) == ("cassette-001.yaml", "cassette-002.yaml")
    assert first.read_text() == "one" and second.read_text() == "two"
    assert mode(first) == mode(second) == 0o600


def test_an_existing_private_directory_is_used(tmp_path: Path) -> None:
    target = tmp_path / "mine"
    target.mkdir(mode=0o700)
    (target / "cassette-001.yaml").write_text("older")
    folder = CassetteFolder.open(target, private=True)
    try:
        assert folder.write("new", suffix=".yaml").name == "cassette-002.yaml"
    finally:
        folder.close()
    assert (target / "cassette-001.yaml").read_text() == "older"  # never overwritten


@pytest.mark.parametrize("loose", [0o750, 0o705, 0o755, 0o777])
def test_a_directory_others_can_read_is_refused(tmp_path: Path, loose: int) -> None:
    target = tmp_path / "open"
    target.mkdir()
    target.chmod(loose)
    with pytest.raises(PermissionError, match=f"has mode {loose:04o}.*chmod 700"):
        CassetteFolder.open(target, private=True)


def test_a_symlink_is_refused_even_to_a_private_directory(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(PermissionError, match="is a symlink"):
        CassetteFolder.open(link, private=True)


def test_a_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("")
    with pytest.raises(NotADirectoryError):
        CassetteFolder.open(target, private=True)


def test_shareable_cassettes_may_go_into_an_ordinary_directory(tmp_path: Path) -> None:
    target = tmp_path / "public"
    target.mkdir()
    target.chmod(0o755)
    folder = CassetteFolder.open(target, private=False)
    try:
        written = folder.write("x", suffix=".yaml")
    finally:
        folder.close()
    assert written.read_text() == "x"


def test_a_refused_directory_records_nothing(tmp_path: Path) -> None:
    target = tmp_path / "open"
    target.mkdir()
    target.chmod(0o755)
    recorder = record_cassettes("http://127.0.0.1:9/v1", target, shareable=False)
    with pytest.raises(PermissionError), recorder:
        pytest.fail("the recorder must refuse before it starts")
    assert list(target.iterdir()) == []


def test_the_upstream_must_be_an_http_url(tmp_path: Path) -> None:
    with (
        pytest.raises(ValueError, match=r"must be http\(s\)://HOST"),
        record_cassettes("api.openai.com/v1", tmp_path / "c", shareable=True),
    ):
        pytest.fail("no proxy for a URL without a scheme")
