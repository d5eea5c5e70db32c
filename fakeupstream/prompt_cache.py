"""The fake's prompt cache: ``usage.input_tokens_details.cached_tokens`` as OpenAI counts it.

OpenAI caches the longest prefix of a prompt that an earlier request of the same
organization already had processed, in 128-token blocks once a prompt reaches 1,024
tokens (nothing is cached below that); cached prefixes stay for 5 to 10 minutes of
inactivity, or 24 hours with ``prompt_cache_retention: "24h"``. The fake does the same on
an approximation:

- **Tokens are characters / 4** (:data:`CHARS_PER_TOKEN`), counted over a canonical text
  of what the model sees (:func:`prompt_text`): ``instructions`` (and a
  ``previous_response_id`` marker), each tool, then each input item in order, one
  compact sorted-key JSON line each, with ids, ``status``, ``phase`` and content-part
  decorations left out (the relay sends them differently from how the model printed
  them). A reasoning item counts as its ``encrypted_content``: the model reads the
  reasoning the ciphertext carries, and its length stands for it.
- **What a request writes** is its prompt followed by what the model generated
  (:func:`continuation`: the output items as the next request would carry them), as a
  server's attention cache holds the whole sequence. So the next turn hits through the
  previous answer only when it carries that answer's reasoning item back exactly; a
  history with the reasoning dropped diverges where the reasoning was, and hits only the
  previous request's own prompt.
- **Partitions**: a hash of the API key (an organization), the model and
  ``prompt_cache_key``. Each partition is an LRU of at most :data:`MAX_PREFIXES` prefix
  digests (16 bytes and an expiry each), at most :data:`MAX_PARTITIONS` partitions, so
  a long-running fake holds at most 64 x 4,096 entries (about 45 MB with Python's
  overhead). A lookup or write refreshes the prefixes it touches (the TTL counts
  inactivity) and drops expired ones it meets.

Pure: time comes in as ``now`` (the fake passes its injected clock's monotonic seconds).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CHARS_PER_TOKEN = 4
MIN_CACHED_TOKENS = 1024
BLOCK_TOKENS = 128
DEFAULT_TTL_S = 300.0  # OpenAI's in-memory retention: "5 to 10 minutes of inactivity"
EXTENDED_TTL_S = 24 * 3600.0  # prompt_cache_retention: "24h"
MAX_PREFIXES = 4096  # per partition: a 500k-token prompt has about 3,900 block boundaries
MAX_PARTITIONS = 64

# Fields that are bookkeeping, not text the model reads.
_UNSEEN = frozenset({"id", "status", "phase"})


def tokens(text: str) -> int:
    """The approximate token count of ``text`` (at least 1, as a real prompt has)."""
    return max(1, len(text) // CHARS_PER_TOKEN)


def prompt_text(body: Mapping[str, Any], items: Sequence[Any]) -> str:
    """The canonical text of a request's prompt: instructions, tools, input items."""
    lines = []
    if body.get("previous_response_id") is not None:
        lines.append(_line({"previous_response_id": body["previous_response_id"]}))
    if body.get("instructions") is not None:
        lines.append(_line({"instructions": body["instructions"]}))
    lines += [_line({"tool": tool}) for tool in body.get("tools") or []]
    lines += [_line(seen_item(item)) for item in items]
    return "".join(lines)


def continuation(output: Sequence[Any]) -> str:
    """The canonical text of generated output items, as they follow the prompt."""
    return "".join(_line(seen_item(item)) for item in output)


def seen_item(item: Any) -> Any:
    """An input or output item as the model reads it (see the module docstring)."""
    if not isinstance(item, Mapping):
        return item
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "reasoning":
        token = item.get("encrypted_content")
        # Without ciphertext the item names stored reasoning by id; that id is its content.
        return {"type": kind, "encrypted_content": token} if token else {"type": kind, **item}
    if kind == "message":
        return {"type": kind, "role": item.get("role"), "content": _text(item.get("content"))}
    return {k: v for k, v in item.items() if k not in _UNSEEN}


def _text(content: Any) -> Any:
    """A message's content as one string where it is text (parts joined)."""
    if not isinstance(content, list):
        return content
    pieces = []
    for part in content:
        if isinstance(part, Mapping) and isinstance(part.get("text"), str):
            pieces.append(part["text"])
        elif isinstance(part, Mapping) and isinstance(part.get("refusal"), str):
            pieces.append(part["refusal"])
        else:  # an image, a file: its JSON stands for it
            pieces.append(json.dumps(part, sort_keys=True, ensure_ascii=False))
    return "".join(pieces)


def _line(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"


def boundaries(text: str) -> Iterator[tuple[int, bytes]]:
    """``(tokens, digest)`` of each cacheable prefix of ``text``, shortest first.

    The prefixes end at 1,024 tokens and every 128 tokens after; a digest is chained
    through the prefix, so equal digests mean equal prefixes.
    """
    state = hashlib.sha256(b"fake-prompt-cache/v1\0")
    done = 0
    count = MIN_CACHED_TOKENS
    while count * CHARS_PER_TOKEN <= len(text):
        end = count * CHARS_PER_TOKEN
        state.update(text[done:end].encode("utf-8", "surrogatepass"))
        done = end
        yield count, state.copy().digest()[:16]
        count += BLOCK_TOKENS


@dataclass(frozen=True)
class Partition:
    """Whose cache a request reads: organization (key digest), model, prompt_cache_key."""

    credential: str
    model: str
    key: str | None

    @classmethod
    def of(cls, body: Mapping[str, Any], api_key: str) -> Partition:
        credential = hashlib.sha256(b"fake-prompt-cache-org\0" + api_key.encode()).hexdigest()
        key = body.get("prompt_cache_key")
        return cls(
            credential[:32], str(body.get("model", "")), key if isinstance(key, str) else None
        )


def retention_s(body: Mapping[str, Any], default_s: float) -> float:
    """How long the prefixes this request writes stay after their last use."""
    return EXTENDED_TTL_S if body.get("prompt_cache_retention") == "24h" else default_s


class PromptCache:
    """Prefix digests per partition, each with the time it expires (LRU bounded)."""

    def __init__(
        self,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_prefixes: int = MAX_PREFIXES,
        max_partitions: int = MAX_PARTITIONS,
    ) -> None:
        if ttl_s < 0 or max_prefixes < 1 or max_partitions < 1:
            raise ValueError("ttl_s must be >= 0 and the bounds >= 1")
        self.ttl_s = ttl_s
        self.max_prefixes = max_prefixes
        self.max_partitions = max_partitions
        self._partitions: OrderedDict[Partition, OrderedDict[bytes, float]] = OrderedDict()

    def __len__(self) -> int:
        """Prefixes held, expired ones not yet dropped included."""
        return sum(len(prefixes) for prefixes in self._partitions.values())

    def clear(self) -> None:
        self._partitions.clear()

    def lookup(self, partition: Partition, text: str, now: float) -> int:
        """The cached tokens of a prompt: its longest live cached prefix (0: none)."""
        prefixes = self._partitions.get(partition)
        if prefixes is None:
            return 0
        for count, digest in reversed(list(boundaries(text))):
            expires = prefixes.get(digest)
            if expires is None:
                continue
            if expires > now:
                return count
            del prefixes[digest]
        return 0

    def write(self, partition: Partition, text: str, now: float, ttl_s: float) -> None:
        """Remember every cacheable prefix of ``text`` until ``now + ttl_s`` at least."""
        if ttl_s <= 0:
            return
        prefixes = self._partitions.get(partition)
        if prefixes is None:
            prefixes = self._partitions[partition] = OrderedDict()
            while len(self._partitions) > self.max_partitions:
                self._partitions.popitem(last=False)
        self._partitions.move_to_end(partition)
        expires = now + ttl_s
        for _, digest in boundaries(text):
            prefixes[digest] = max(expires, prefixes.get(digest, expires))
            prefixes.move_to_end(digest)
        while len(prefixes) > self.max_prefixes:
            prefixes.popitem(last=False)
