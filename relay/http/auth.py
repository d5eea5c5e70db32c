"""The relay token: given by RELAY_TOKEN, or generated once and kept in the data directory;
and the other secrets kept there the same way (:func:`load_or_create_secret`)."""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from relay.errors import ConfigError

TOKEN_FILE = "relay-token"  # noqa: S105 - a file name, not a secret


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (and parents) owner-only (0700), or make an existing one so.

    Refuses (:class:`ConfigError`, one line naming the path and the fix) a path that is
    not a directory, a directory of another user or a symlink to one (or a symlink another
    user could re-point), and a directory whose mode cannot be made 0700.
    """
    where = f"the data directory {path} (RELAY_DATA_DIR)"
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except FileExistsError:
        raise ConfigError(
            f"{where} exists and is not a directory; remove it or choose another"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot create {where}: {exc.strerror}") from None
    me = os.geteuid()
    try:
        link = path.lstat()
        # O_DIRECTORY: what the path names now; the checks and the chmod act on that.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"cannot open {where}: {exc.strerror}") from None
    try:
        found = os.fstat(fd)
        if stat.S_ISLNK(link.st_mode) and link.st_uid not in (me, 0):
            raise ConfigError(
                f"{where} is a symlink owned by uid {link.st_uid}, who could re-point it; "
                "use a directory (or a symlink) of your own"
            )
        if found.st_uid != me:
            kind = f"a symlink to {os.path.realpath(path)}, " if stat.S_ISLNK(link.st_mode) else ""
            raise ConfigError(
                f"{where} is {kind}a directory of uid {found.st_uid}, not of this user (uid "
                f"{me}); the relay keeps its token and cache there: use a directory you own"
            )
        if stat.S_IMODE(found.st_mode) & 0o777 != 0o700:
            try:
                os.fchmod(fd, 0o700)
            except OSError as exc:
                raise ConfigError(
                    f"cannot make {where} private (mode {stat.S_IMODE(found.st_mode):04o}, "
                    f"needs 0700): {exc.strerror}"
                ) from None
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            if mode & 0o077:  # e.g. a file system that ignores chmod
                raise ConfigError(
                    f"cannot make {where} private: its mode stays {mode:04o} after chmod "
                    "0700; use a directory on a file system with Unix permissions"
                )
    finally:
        os.close(fd)


def load_or_create_token(data_dir: Path) -> tuple[str, Path]:
    """Return the stored token, creating it (0600, in a 0700 directory) on first start."""
    token, path, _created = open_token(data_dir)
    return token, path


def open_token(data_dir: Path) -> tuple[str, Path, bool]:
    """The stored token, its file, and whether this call generated it (the banner says
    so: a new token where one was expected means another data directory)."""
    ensure_private_dir(data_dir)
    path = data_dir / TOKEN_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            path.chmod(0o600)
        token = path.read_text(encoding="utf-8").strip()
        if len(token) < 16:
            raise ConfigError(
                f"{path}: the stored relay token is too short; delete the file to generate a "
                "new one or set RELAY_TOKEN"
            ) from None
        return token, path, False
    token = "rr-" + secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return token, path, True


def load_or_create_secret(path: Path, *, what: str) -> bytes:
    """32 random bytes kept (hex, 0600) at ``path``: created once, the same on every later
    call. The file is written whole under a temporary name and linked into place, so a crash
    never leaves a short one; of two racing first calls, both get the one that was linked.
    ``what`` names it in the one-line error for an unreadable or damaged file."""
    try:
        return _read_secret(path, what)
    except FileNotFoundError:
        pass
    temporary = path.with_name(f".{path.name}.tmp-{secrets.token_hex(8)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(secrets.token_hex(32) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # another start linked its own first
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return _read_secret(path, what)


def _read_secret(path: Path, what: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "r", encoding="utf-8") as handle:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            os.fchmod(fd, 0o600)
        text = handle.read().strip()
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) != 32:
        raise ConfigError(
            f"{path}: the stored {what} is damaged (expected 64 hex digits); delete the file "
            "to generate a new one"
        )
    return secret


def bearer_matches(header: str | None, token: str) -> bool:
    """Constant-time check of an ``Authorization: Bearer <token>`` header."""
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode("utf-8"), token.encode("utf-8"))
