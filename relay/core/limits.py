"""The versioned canonical limits of the visible-history identity (design §2, §9).

The limits are part of the identity: they are framed into every scope, so the same scoped
history always gets the same accept/refuse decision, and changing a limit (or the format
version) changes every digest instead of silently reinterpreting old records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# Bump when canonical bytes, framing, normalization or scope fields change meaning. Records
# made under another version never match again (their scopes differ): misses, never a
# wrong replay; retention removes them. 2: UTF-8 canonical text rendered by orjson.
# 3: null or empty assistant fields (refusal, annotations, audio, function_call,
# tool_calls) hash as absent. Null-free messages keep their bytes, but histories that
# hashed apart now hash together: records and markers made under 2 at a history with such
# a field would go unseen at the merged identity (a later record hidden from the
# descendant check, a poison or conflict no longer found), so 2's records must not match.
IDENTITY_FORMAT_VERSION: Final = 3

# Largest piece the serializer ever hands to a consumer. Not part of the identity: chunking
# never changes the bytes, only how they are fed to the hash.
CHUNK_BYTES: Final = 64 * 1024


@dataclass(frozen=True)
class CanonicalLimits:
    """Deterministic bounds on the canonical scope + history (checked before emission)."""

    max_bytes: int = 32 * 1024 * 1024  # canonical JSON bytes, scope and history together
    max_messages: int = 6_400  # history messages
    max_nodes: int = 2_000_000  # JSON values (objects, arrays, scalars), scope included
    max_depth: int = 64  # container nesting inside one document (scope or message)

    def as_json(self) -> dict[str, int]:
        """The limits as a JSON object, for framing into the scope."""
        return {
            "max_bytes": self.max_bytes,
            "max_messages": self.max_messages,
            "max_nodes": self.max_nodes,
            "max_depth": self.max_depth,
        }


CANONICAL_LIMITS: Final = CanonicalLimits()
