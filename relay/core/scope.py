"""The scope of a visible history (design §2), pure: what a history is keyed under.

Framing (every length a u64 big-endian count of canonical UTF-8 bytes):

- ``Scope.digest`` = SHA-256(``rrr/scope/v1\\0`` || len || scope)
- every history hash state starts from SHA-256(``rrr/history/v1\\0`` || len || scope)
  (tag ``rrr/history-without-reasoning-content/v1\\0`` when ``reasoning_content`` is
  excluded, so the two keyings never share a digest); :mod:`relay.core.history_digest`
  continues it message by message.

The scope is measured before it is emitted; a refusal raises
:class:`~relay.core.canonical.CanonicalRefused` and means: skip caching, no intent,
no marker.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from relay.core.canonical import U64, Budget, Fanout, frame
from relay.core.limits import CANONICAL_LIMITS, IDENTITY_FORMAT_VERSION, CanonicalLimits

SCOPE_TAG: Final = b"rrr/scope/v1\0"
HISTORY_TAGS: Final = (b"rrr/history/v1\0", b"rrr/history-without-reasoning-content/v1\0")

ENCRYPTED_REASONING_INCLUDE: Final = "reasoning.encrypted_content"

# Keys of the translated Responses body that are not scope configuration, and why:
# input          the visible history, hashed message by message instead
# instructions   derived from the leading system/developer messages (Chat) or mapped to
#                the first history message (Responses-shaped bodies): history, not scope
# stream, stream_options, background   transport only; must not split histories
# user           stands in the scope as the caller fingerprint, never raw
# model          stands in the scope on its own (also a targeting value)
# store, include replaced by their effective values (store false, merged include)
# prompt_cache_key, prompt_cache_retention   where and how long the upstream keeps its
#                prompt cache: routing and retention of a cache whose hits give the same
#                output as misses, never the model's context. A client may send a new key
#                per request; in the scope it would stop every replay for nothing.
# Everything else stays in: tools, reasoning (effort, summary, context), text (verbosity,
# format), truncation, max_output_tokens, ... each changes what the model reads or writes.
SCOPE_EXCLUDED_KEYS: Final = frozenset(
    {"input", "instructions", "stream", "stream_options", "background", "user", "model",
     "store", "include", "prompt_cache_key", "prompt_cache_retention"}
)  # fmt: skip


class Hasher(Protocol):
    """A hashlib object, as the history digests use it."""

    def update(self, data: bytes | memoryview, /) -> None: ...
    def copy(self) -> Hasher: ...
    def hexdigest(self) -> str: ...


def fingerprint(secret: bytes, label: str, value: str) -> str:
    """HMAC-SHA256 of a labelled value under the cache-local secret (hex)."""
    message = label.encode("ascii") + b"\0" + value.encode("utf-8", "surrogatepass")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def merged_include(include: Sequence[str] | None) -> list[str]:
    """The effective ``include`` of a cached request: the caller's values plus encrypted
    reasoning, deduplicated and sorted (a set, so order must not split scopes)."""
    return sorted({*(include or ()), ENCRYPTED_REASONING_INCLUDE})


def scope_config(upstream_body: Mapping[str, Any]) -> dict[str, Any]:
    """The translated configuration that scopes a history: the Responses body without the
    excluded keys, ``null`` values left out, plus effective ``store``/``include``."""
    config = {
        key: value
        for key, value in upstream_body.items()
        if key not in SCOPE_EXCLUDED_KEYS and value is not None
    }
    config["store"] = False
    config["include"] = merged_include(upstream_body.get("include"))
    return config


@dataclass(frozen=True)
class ScopeTargeting:
    """What fencing matches on: credential/model/caller (fingerprints, never raw values)."""

    credential: str
    model: str
    caller: str | None


def scope_targeting(
    secret: bytes, *, credential: str, model: str, caller: str | None
) -> ScopeTargeting:
    """The fencing targets of a generation (also framed into its scope)."""
    return ScopeTargeting(
        credential=fingerprint(secret, "openai-credential", credential),
        model=model,
        caller=None if caller is None else fingerprint(secret, "caller", caller),
    )


@dataclass(frozen=True)
class Scope:
    """A framed, measured scope; build with :func:`build_scope`."""

    digest: str
    targeting: ScopeTargeting
    limits: CanonicalLimits
    canonical_size: int  # bytes of the canonical scope, charged to the shared budget
    nodes: int
    # The framed scope object (fingerprints only, no raw secrets). It shares nested values
    # (tools, schemas) with the translated body: read-only, like that body.
    value: dict[str, Any] = field(repr=False, compare=False)
    # History hash states after the tag and framed scope (index: exclude_reasoning_content).
    _starts: tuple[Hasher, Hasher] = field(repr=False, compare=False)

    def history_start(self, *, exclude_reasoning_content: bool = False) -> Hasher:
        """A fresh copy of the history hash state before the first message."""
        return self._starts[exclude_reasoning_content].copy()


def build_scope(
    *,
    secret: bytes,
    upstream_origin: str,
    endpoint: str,
    credential: str,
    relay_token: str,
    caller: str | None,
    upstream_body: Mapping[str, Any],
    openai_beta: str | None,
    body_shape: str = "chat",
    limits: CanonicalLimits = CANONICAL_LIMITS,
) -> Scope:
    """Build the scope of one translated request.

    ``upstream_body`` is the translated Responses body; ``caller`` the client's ``user``
    value (``TranslatedRequest.caller``); ``body_shape`` ``"chat"`` or ``"responses"``
    (the two map histories differently, so they never share a scope); ``openai_beta`` the
    effective header or ``None``. Raises ``CanonicalRefused`` when the scope alone breaks
    a limit.
    """
    if len(secret) < 16:
        raise ValueError("the cache secret must be at least 16 bytes")
    model = upstream_body.get("model")
    if not isinstance(model, str):
        raise TypeError("the translated body must carry the resolved model as a string")
    targeting = scope_targeting(secret, credential=credential, model=model, caller=caller)
    value: dict[str, Any] = {
        "format": IDENTITY_FORMAT_VERSION,
        "limits": limits.as_json(),
        "upstream": {"origin": upstream_origin, "endpoint": endpoint},
        "credential": targeting.credential,
        "relay_token": fingerprint(secret, "relay-token", relay_token),
        "caller": targeting.caller,
        "body_shape": body_shape,
        "model": model,
        "config": scope_config(upstream_body),
        "openai_beta": openai_beta,
    }
    budget = Budget(limits)
    scope_hash = hashlib.sha256(SCOPE_TAG)
    starts = (hashlib.sha256(HISTORY_TAGS[0]), hashlib.sha256(HISTORY_TAGS[1]))
    text = budget.render_document(value)  # the tools' schemas: no walk over every value
    if text is None:  # more than a chunk, or refused: measured, then streamed
        size = budget.measure(value)
        frame(Fanout((scope_hash, *starts)), value, size)
    else:
        size = len(text)
        framed = U64.pack(size) + text
        for sink in (scope_hash, *starts):
            sink.update(framed)
    return Scope(scope_hash.hexdigest(), targeting, limits, size, budget.nodes, value, starts)
