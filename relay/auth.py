"""The relay token: given by RELAY_TOKEN, or generated once and kept in the data directory."""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path

from relay.errors import ConfigError

TOKEN_FILE = "relay-token"  # noqa: S105 - a file name, not a secret


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (and parents) owner-only; tighten an existing one we own."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_uid == os.getuid():
        path.chmod(0o700)


def load_or_create_token(data_dir: Path) -> tuple[str, Path]:
    """Return the stored token, creating it (0600, in a 0700 directory) on first start."""
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
        return token, path
    token = "rr-" + secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return token, path


def bearer_matches(header: str | None, token: str) -> bool:
    """Constant-time check of an ``Authorization: Bearer <token>`` header."""
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode("utf-8"), token.encode("utf-8"))
