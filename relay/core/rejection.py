"""Is an upstream error a refusal of the state the relay replayed? (pure)

When the upstream cannot use replayed output items -- its encryption key rotated, an
organisation setting changed, an item expired on its side -- it answers 4xx before it
generates anything. Such a *replay rejection* must retire the replayed blocks (they would
be refused on every retry) and, since nothing was generated, the request may be sent once
more without them. Anything else stays an ordinary upstream error.

The strings are OpenAI's, as its API answers them (the fake upstream's
``fakeupstream/rules.py`` produces each one):

- ``invalid_encrypted_content``: "The encrypted content <prefix...> could not be
  verified." (variants add "Reason: Encrypted content could not be decrypted or parsed."
  or name the item: "The encrypted content for item rs_... could not be verified."; some
  carry ``code: null``, so the message is matched too);
- 404: "Item with id 'rs_...' not found. Items are not persisted when `store` is set to
  false. ..." (a reasoning item sent without its encrypted content);
- 400: "Item 'rs_...' of type 'reasoning' was provided without its required following
  item.";
- 400: "Item 'fc_...' of type 'function_call' was provided without its required
  'reasoning' item: 'rs_...'.";
- 400: "Duplicate item found with id rs_.... Remove duplicate items from your input and
  try again."
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import Any, Final


class RejectionKind(StrEnum):
    """Which of the upstream's replay refusals it was (a bounded metrics label)."""

    INVALID_ENCRYPTED_CONTENT = "invalid_encrypted_content"
    ITEM_NOT_FOUND = "item_not_found"
    MISSING_FOLLOWING_ITEM = "missing_following_item"
    MISSING_REASONING_ITEM = "missing_reasoning_item"
    DUPLICATE_ITEM = "duplicate_item"
    NAMES_REPLAYED_ITEM = "names_replayed_item"  # any other 4xx naming a replayed id


_ENCRYPTED_CODE: Final = "invalid_encrypted_content"
_PATTERNS: Final = (
    (RejectionKind.INVALID_ENCRYPTED_CONTENT, re.compile(r"\bencrypted content\b.*\bcould not be")),
    (RejectionKind.ITEM_NOT_FOUND, re.compile(r"\bItem with id '[^']*' not found\b")),
    (
        RejectionKind.MISSING_FOLLOWING_ITEM,
        re.compile(r"\bof type 'reasoning' was provided without its required following item\b"),
    ),
    (
        RejectionKind.MISSING_REASONING_ITEM,
        re.compile(r"\bwas provided without its required 'reasoning' item\b"),
    ),
    (RejectionKind.DUPLICATE_ITEM, re.compile(r"\bDuplicate item found with id\b")),
)
# Item ids as OpenAI spells them (rs_, msg_, fc_ ... then url-safe characters).
_ITEM_ID: Final = re.compile(r"\b[a-z]{1,8}_[A-Za-z0-9_-]{6,}")


def classify_rejection(
    status: int, envelope: Mapping[str, Any], replayed_ids: Collection[str]
) -> RejectionKind | None:
    """The kind of replay rejection an upstream error answer is, or ``None``.

    Only a 4xx answer to a request that replayed something can be one (the caller knows
    the answer came before any output: it is an HTTP error status). ``replayed_ids``: the
    ``id`` of every item the request replayed.
    """
    if not replayed_ids or not 400 <= status < 500:
        return None
    error = envelope.get("error")
    if not isinstance(error, Mapping):
        return None
    message = error.get("message")
    message = message if isinstance(message, str) else ""
    if error.get("code") == _ENCRYPTED_CODE:
        return RejectionKind.INVALID_ENCRYPTED_CONTENT
    for kind, pattern in _PATTERNS:
        if pattern.search(message):
            return kind
    if any(found in replayed_ids for found in _ITEM_ID.findall(message)):
        return RejectionKind.NAMES_REPLAYED_ITEM
    return None


# A ciphertext prefix the upstream quotes back ("The encrypted content gAAAAABp... could
# not be verified."): opaque state, so it is not passed on to a client or a log.
_QUOTED_CIPHERTEXT: Final = re.compile(r"(encrypted content )(?!for item\b)\S+")


def redact_ciphertext(message: str) -> str:
    """``message`` without the ciphertext prefix an upstream error may quote."""
    return _QUOTED_CIPHERTEXT.sub(r"\1<redacted>", message)
