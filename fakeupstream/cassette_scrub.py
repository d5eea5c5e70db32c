"""What a cassette may keep: credentials out of headers and URLs, ciphertext out of bodies.

Pure functions, shared by the recorder (``live/cassettes.py``) and the playback fake,
which compares a request with a recorded one after the same scrubbing.

- Headers: :func:`is_credential_header` names are dropped from every recording, shareable
  or not (``authorization``, ``proxy-authorization``, cookies, any ``*api-key``, every
  ``openai-*`` header but the two that only describe the answer).
- URLs: user info and credential-like query parameters are dropped.
- Bodies (shareable cassettes): every JSON string under a key ``encrypted_content``, at any
  depth, in a JSON body or in an SSE ``data:`` line, becomes ``sha256:<hex>`` of its UTF-8
  bytes. The value is replaced where it stands, so every other byte (the upstream's own
  formatting) stays; a document whose in-place result does not parse back to the
  structurally scrubbed value is written anew (:func:`scrub_document`). Text that is not
  JSON (a stream cut mid-event) gets the in-place pass alone, which also catches a value
  cut short by the end of a line. A value that already is such a digest stays: scrubbing
  is idempotent.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

CIPHERTEXT_KEY = "encrypted_content"
DIGEST_PREFIX = "sha256:"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")
# The key, then a JSON string -- or one cut short by the end of its line (a broken stream).
# Inside another string the key's quotes are escaped (\"), so this only finds real keys.
_IN_PLACE = re.compile(rb'"encrypted_content"[ \t\r\n]*:[ \t\r\n]*"((?:[^"\\\n]|\\.)*)', re.M)

_CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "cookie2", "set-cookie2"}
)
# openai-* headers that describe the answer, not the account; every other one is dropped.
_ANSWER_HEADERS = frozenset({"openai-version", "openai-processing-ms"})
_CREDENTIAL_QUERY = frozenset({"api-key", "api_key", "apikey", "key", "access_token", "token"})


def is_credential_header(name: str) -> bool:
    """True for a header no cassette may keep (request or response)."""
    lowered = name.strip().lower()
    if lowered in _CREDENTIAL_HEADERS or lowered.endswith("api-key"):
        return True
    return lowered.startswith("openai-") and lowered not in _ANSWER_HEADERS


def scrub_headers(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((name, value) for name, value in headers if not is_credential_header(name))


def scrub_uri(uri: str) -> str:
    """The URL without user info or credential-like query parameters."""
    parts = urlsplit(uri)
    netloc = parts.netloc.rpartition("@")[2]
    query = [
        (name, value)
        for name, value in parse_qsl(parts.query, keep_blank_values=True)
        if name.lower() not in _CREDENTIAL_QUERY
    ]
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), parts.fragment))


def digest(value: str) -> str:
    """``sha256:<hex>`` of the value; a value that already is a digest stays as it is."""
    if _DIGEST.match(value):
        return value
    raw = value.encode("utf-8", "surrogatepass")  # JSON allows lone surrogates
    return DIGEST_PREFIX + hashlib.sha256(raw).hexdigest()


def scrub_value(value: Any) -> Any:
    """A parsed JSON value with every ``encrypted_content`` string digested."""
    if isinstance(value, dict):
        return {
            key: digest(item)
            if key == CIPHERTEXT_KEY and isinstance(item, str)
            else scrub_value(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [scrub_value(item) for item in value]
    return value


@dataclass(frozen=True)
class Edit:
    """Replace ``text[start:end]`` with ``replacement``."""

    start: int
    end: int
    replacement: bytes


def apply_edits(text: bytes, edits: Sequence[Edit]) -> bytes:
    """``text`` with sorted, non-overlapping ``edits`` made."""
    pieces: list[bytes] = []
    position = 0
    for edit in edits:
        pieces += [text[position : edit.start], edit.replacement]
        position = edit.end
    pieces.append(text[position:])
    return b"".join(pieces)


def remap(offset: int, edits: Sequence[Edit]) -> int:
    """Where ``offset`` of the original text lands after ``edits``; an offset inside an
    edited span lands at the end of its replacement."""
    shift = 0
    for edit in edits:
        if offset <= edit.start:
            break
        if offset < edit.end:
            return edit.start + shift + len(edit.replacement)
        shift += len(edit.replacement) - (edit.end - edit.start)
    return offset + shift


def in_place_edits(text: bytes, base: int = 0) -> list[Edit]:
    """Digest every ``encrypted_content`` string token found textually in ``text``."""
    edits = []
    for found in _IN_PLACE.finditer(text):
        raw = found.group(1)
        closed = found.end() < len(text) and text[found.end() : found.end() + 1] == b'"'
        try:
            value = json.loads(b'"' + raw + b'"') if closed else None
        except ValueError:
            value = None
        if not isinstance(value, str):  # cut short or a broken escape: digest the raw text
            value = raw.decode("utf-8", "surrogateescape")
        replacement = digest(value).encode()
        if replacement != raw:
            edits.append(Edit(base + found.start(1), base + found.end(1), replacement))
    return edits


def scrub_document(text: bytes, base: int = 0) -> list[Edit]:
    """The edits that scrub one JSON document (or text that is not JSON)."""
    edits = in_place_edits(text)
    try:
        original = json.loads(text)
    except (ValueError, RecursionError):
        return [_shifted(edit, base) for edit in edits]
    expected = scrub_value(original)
    try:
        faithful = json.loads(apply_edits(text, edits)) == expected
    except (ValueError, RecursionError):
        faithful = False
    if faithful:
        return [_shifted(edit, base) for edit in edits]
    # An escaped key, a value in an unusual spelling: write the document anew.
    fresh = json.dumps(expected, separators=(",", ":")).encode()
    return [] if fresh == text else [Edit(base, base + len(text), fresh)]


def scrub_sse(text: bytes) -> list[Edit]:
    """The edits that scrub an SSE stream: each ``data:`` line is a document."""
    edits: list[Edit] = []
    position = 0
    for line in text.splitlines(keepends=True):
        content = line.rstrip(b"\r\n")
        if content.startswith(b"data:"):
            skip = 6 if content.startswith(b"data: ") else 5
            edits += scrub_document(content[skip:], position + skip)
        else:  # comments and other fields are no JSON, but may still carry a value
            edits += in_place_edits(content, position)
        position += len(line)
    return edits


def body_edits(body: bytes, *, sse: bool) -> list[Edit]:
    return scrub_sse(body) if sse else scrub_document(body)


def scrub_body(body: bytes, *, sse: bool) -> bytes:
    return apply_edits(body, body_edits(body, sse=sse))


def rechunk(
    sizes: Sequence[int], delays: Sequence[float], edits: Sequence[Edit]
) -> list[tuple[float, int]]:
    """Chunk boundaries moved through ``edits``: ``(delay, size)`` pairs of the edited
    text. A chunk left empty is dropped and its delay added to the next one's."""
    chunks: list[tuple[float, int]] = []
    end = 0
    before = 0
    waited = 0.0
    for size, delay in zip(sizes, delays, strict=True):
        end += size
        after = remap(end, edits)
        waited += delay
        if after > before:
            chunks.append((waited, after - before))
            before, waited = after, 0.0
    return chunks


def _shifted(edit: Edit, base: int) -> Edit:
    return Edit(edit.start + base, edit.end + base, edit.replacement)
