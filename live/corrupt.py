"""Damage one stored ciphertext so the upstream must refuse its replay.

Used while the relay is stopped: the store is opened through the storage package
(:class:`relay.storage.replay_store.ReasoningStore`, which takes the file's exclusive lock),
one character in the middle of one ``encrypted_content`` value is swapped for another
base64 character, and the record's ``output_hash`` is updated to the new bytes. The
relay's own integrity checks therefore still pass (the block is dispatched); only the
upstream, which authenticates its ciphertext, can tell. This is how a stale or revoked
ciphertext looks to the relay.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from relay.clock import SystemClock
from relay.storage.replay_store import ReasoningStore

_TOKEN = re.compile(r'"encrypted_content"\s*:\s*"([A-Za-z0-9_\-+/=]{16,})"')
_MAX_PAYLOAD_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Corruption:
    observation_id: int
    position: int
    offset: int  # index of the changed character in the stored payload text


def corrupt_one_ciphertext(cache_path: Path) -> Corruption:
    """Change one character of the newest stored block's ciphertext; raise if none."""
    with ReasoningStore.open(cache_path, clock=SystemClock()) as store:
        for record in store.recent_records(model=None, limit=20):
            if record.payload_bytes is None:
                continue
            payload = store.load_payload(record.id, max_bytes=_MAX_PAYLOAD_BYTES)
            if payload is None:
                continue
            stored = payload.output_json.decode("utf-8")
            match = _TOKEN.search(stored)
            if match is None:
                continue
            offset = (match.start(1) + match.end(1)) // 2
            old = stored[offset]
            text = stored[:offset] + ("B" if old == "A" else "A") + stored[offset + 1 :]
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
            with store.transaction(), store._writer("damage a payload for a live check") as conn:
                conn.execute(
                    "UPDATE payloads SET output_json = ? WHERE observation_id = ?",
                    (text, record.id),
                )
                conn.execute(
                    "UPDATE observations SET output_hash = ? WHERE id = ?", (digest, record.id)
                )
            return Corruption(record.id, record.position, offset)
    raise RuntimeError(f"{cache_path} holds no stored block with an encrypted_content value")
