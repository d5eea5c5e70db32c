"""The cassette format: vcrpy's own, with the timing of each answer as extra fields.

A cassette is what ``live/cassettes.py`` recorded between the relay and an upstream. It is
written and read with vcrpy's serializers (``vcr.serialize`` with
``vcr.serializers.yamlserializer``, or ``jsonserializer`` for a ``.json`` file), so vcrpy
and its tools read it as any other cassette. Each response dict carries two extra keys
vcrpy ignores:

- ``chunks``: ``[[delay_ms, size], ...]``, the body as it arrived: each piece's size in
  bytes and how long after the previous piece it came (the first: after the request was
  sent). The sizes add up to the body's length.
- ``ended``: how the answer ended: ``finish`` (the whole body), ``close`` (the upstream
  broke off mid-body), ``client_gone`` (the client left first) or ``stopped`` (recording
  ended mid-answer).

The cassette's ``metadata`` (vcrpy keeps it) names the recorder, the upstream base URL and
whether the cassette was scrubbed to be shareable. A plain vcrpy cassette (no extras)
reads as answers sent in one piece, at once.

vcrpy is a test dependency: it is imported when a cassette is read or written, so the
fake itself runs without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from fakeupstream.cassette_scrub import (
    apply_edits,
    body_edits,
    rechunk,
    scrub_body,
    scrub_headers,
    scrub_uri,
)

Ended = Literal["finish", "close", "client_gone", "stopped"]
ENDINGS: tuple[Ended, ...] = ("finish", "close", "client_gone", "stopped")
RECORDER = "live.cassettes"


class CassetteError(ValueError):
    """A cassette that cannot be read; the message says which file and what is wrong."""


@dataclass(frozen=True)
class Chunk:
    delay_ms: float  # after the previous chunk (the first: after the request was sent)
    data: bytes


@dataclass(frozen=True)
class Interaction:
    """One request and the answer to it, as it went over the wire."""

    method: str
    uri: str
    request_headers: tuple[tuple[str, str], ...]
    request_body: bytes
    status: int
    reason: str
    response_headers: tuple[tuple[str, str], ...]
    chunks: tuple[Chunk, ...]
    ended: Ended = "finish"

    @property
    def response_body(self) -> bytes:
        return b"".join(chunk.data for chunk in self.chunks)

    def response_header(self, name: str) -> str:
        wanted = name.lower()
        return next((v for k, v in self.response_headers if k.lower() == wanted), "")

    @property
    def streamed(self) -> bool:
        return self.response_header("content-type").lower().startswith("text/event-stream")


@dataclass(frozen=True)
class Cassette:
    interactions: tuple[Interaction, ...]
    upstream_base_url: str = ""  # "": unknown (a cassette vcrpy recorded)
    shareable: bool = False

    def served_path(self, interaction: Interaction) -> str:
        """The path the fake answers this interaction at: the recorded URL's path under
        the upstream base, put under ``/v1`` (the fake's base)."""
        path = urlsplit(interaction.uri).path
        base = urlsplit(self.upstream_base_url).path.rstrip("/")
        if self.upstream_base_url and (path == base or path.startswith(base + "/")):
            return "/v1" + path[len(base) :]
        return path


# --- scrubbing -------------------------------------------------------------------------


def scrub_interaction(interaction: Interaction, *, shareable: bool) -> Interaction:
    """Credentials always out; with ``shareable`` every ``encrypted_content`` digested,
    the answer's chunk boundaries moved along with the bytes."""
    scrubbed = replace(
        interaction,
        uri=scrub_uri(interaction.uri),
        request_headers=scrub_headers(interaction.request_headers),
        response_headers=scrub_headers(interaction.response_headers),
    )
    if not shareable:
        return scrubbed
    body = interaction.response_body
    edits = body_edits(body, sse=interaction.streamed)
    sizes = [len(chunk.data) for chunk in interaction.chunks]
    delays = [chunk.delay_ms for chunk in interaction.chunks]
    new_body = apply_edits(body, edits)
    chunks = []
    start = 0
    for delay, size in rechunk(sizes, delays, edits):
        chunks.append(Chunk(delay, new_body[start : start + size]))
        start += size
    headers = scrubbed.response_headers
    if interaction.ended == "finish":  # a whole body: its declared length follows the digests
        headers = tuple(
            (name, str(len(new_body)) if name.lower() == "content-length" else value)
            for name, value in headers
        )
    return replace(
        scrubbed,
        request_body=scrub_body(interaction.request_body, sse=False),
        response_headers=headers,
        chunks=tuple(chunks),
    )


def scrub_cassette(cassette: Cassette, *, shareable: bool) -> Cassette:
    return Cassette(
        tuple(scrub_interaction(i, shareable=shareable) for i in cassette.interactions),
        upstream_base_url=scrub_uri(cassette.upstream_base_url),
        shareable=shareable,
    )


# --- vcrpy's dicts -----------------------------------------------------------------------


def _vcr() -> Any:
    """vcrpy, imported here: a test dependency, needed only to read or write a cassette."""
    import vcr.request  # noqa: PLC0415
    import vcr.serialize  # noqa: PLC0415
    import vcr.serializers.jsonserializer  # noqa: PLC0415
    import vcr.serializers.yamlserializer  # noqa: PLC0415

    return vcr


def _serializer(fmt: str) -> Any:
    if fmt == "json":
        return _vcr().serializers.jsonserializer
    if fmt == "yaml":
        return _vcr().serializers.yamlserializer
    raise CassetteError(f"unknown cassette format {fmt!r}; use yaml or json")


def format_of(path: Path) -> str:
    return "json" if path.suffix.lower() == ".json" else "yaml"


def _header_dict(headers: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for name, value in headers:
        grouped.setdefault(name, []).append(value)
    return grouped


def dumps(cassette: Cassette, fmt: str = "yaml") -> str:
    """The cassette as vcrpy writes one (``vcr.serialize.serialize``)."""
    vcr = _vcr()
    requests = [
        vcr.request.Request(i.method, i.uri, i.request_body, _header_dict(i.request_headers))
        for i in cassette.interactions
    ]
    responses = [
        {
            "status": {"code": i.status, "message": i.reason},
            "headers": _header_dict(i.response_headers),
            "body": {"string": i.response_body},
            "chunks": [[round(c.delay_ms, 3), len(c.data)] for c in i.chunks],
            "ended": i.ended,
        }
        for i in cassette.interactions
    ]
    metadata = {
        "recorder": RECORDER,
        "upstream_base_url": cassette.upstream_base_url,
        "shareable": cassette.shareable,
    }
    cassette_dict = {"requests": requests, "responses": responses, "metadata": metadata}
    return cast(str, vcr.serialize.serialize(cassette_dict, _serializer(fmt)))


def loads(text: str, fmt: str = "yaml", *, source: str = "cassette") -> Cassette:
    """A cassette vcrpy can read (``vcr.serialize.deserialize``), extras where present."""
    try:
        loaded = _vcr().serialize.deserialize(text, _serializer(fmt))
    except CassetteError:
        raise
    except Exception as error:  # yaml, json and vcrpy's own complaints
        raise CassetteError(f"{source} is not a vcrpy cassette: {error}") from None
    requests, responses = loaded[0], loaded[1]
    metadata = loaded[2] if len(loaded) > 2 and isinstance(loaded[2], Mapping) else {}
    interactions = []
    for position, (request, response) in enumerate(zip(requests, responses, strict=True)):
        where = f"{source}: interaction {position}"
        interactions.append(_interaction(request, response, where))
    return Cassette(
        tuple(interactions),
        upstream_base_url=str(metadata.get("upstream_base_url") or ""),
        shareable=metadata.get("shareable") is True,
    )


def load(path: Path) -> Cassette:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CassetteError(f"cannot read the cassette {path}: {error}") from None
    return loads(text, format_of(path), source=str(path))


def _interaction(request: Any, response: Any, where: str) -> Interaction:
    if not isinstance(response, Mapping):
        raise CassetteError(f"{where}: the response is not a mapping")
    status = response.get("status")
    code = status.get("code") if isinstance(status, Mapping) else None
    if isinstance(code, bool) or not isinstance(code, int):
        raise CassetteError(f"{where}: the response has no integer status.code")
    reason = str(status.get("message") or "") if isinstance(status, Mapping) else ""
    body = response.get("body")
    raw = body.get("string") if isinstance(body, Mapping) else None
    content = raw.encode("utf-8") if isinstance(raw, str) else raw if raw is not None else b""
    if not isinstance(content, bytes):
        raise CassetteError(f"{where}: the response body.string is not text")
    ended = response.get("ended", "finish")
    if ended not in ENDINGS:
        raise CassetteError(f"{where}: 'ended' must be one of {', '.join(ENDINGS)}")
    request_body = request.body if request.body is not None else b""
    if not isinstance(request_body, bytes):
        raise CassetteError(f"{where}: the request body is not text")
    return Interaction(
        method=str(request.method).upper(),
        uri=str(request.uri),
        request_headers=_header_pairs(request.headers, where),
        request_body=request_body,
        status=code,
        reason=reason,
        response_headers=_header_pairs(response.get("headers") or {}, where),
        chunks=_chunks(response.get("chunks"), content, where),
        ended=ended,
    )


def _header_pairs(headers: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(headers, Mapping):
        raise CassetteError(f"{where}: headers must be a mapping of names to value lists")
    pairs = []
    for name, values in headers.items():
        for value in values if isinstance(values, list) else [values]:
            pairs.append((str(name), str(value)))
    return tuple(pairs)


def _chunks(raw: Any, body: bytes, where: str) -> tuple[Chunk, ...]:
    if raw is None:  # recorded by vcrpy itself: one piece, at once
        return (Chunk(0.0, body),) if body else ()
    if not isinstance(raw, list):
        raise CassetteError(f"{where}: 'chunks' must be a list of [delay_ms, size] pairs")
    chunks = []
    start = 0
    for pair in raw:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in pair)
            or pair[0] < 0
            or not isinstance(pair[1], int)
            or pair[1] < 0
        ):
            raise CassetteError(f"{where}: each chunk must be [delay_ms >= 0, size >= 0]")
        chunks.append(Chunk(float(pair[0]), body[start : start + pair[1]]))
        start += pair[1]
    if start != len(body):
        raise CassetteError(
            f"{where}: the chunk sizes add up to {start} bytes but the body has {len(body)}"
        )
    return tuple(chunks)
