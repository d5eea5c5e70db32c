"""The Tornado side of cassette playback: while a cassette is loaded every ``/v1/`` request
is answered from it (:class:`CassetteHandler`); ``/__fake/cassette`` loads, shows and
unloads one (:class:`CassetteControlHandler`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tornado.httputil import HTTPServerRequest
from tornado.routing import Matcher

from fakeupstream.answers import Answer, error_answer, raw_answer
from fakeupstream.cassette import CassetteError, Interaction
from fakeupstream.cassette_playback import Mismatch, Playback
from fakeupstream.handlers import ResponsesHandler, _Base
from fakeupstream.rules import ApiError, check_auth
from fakeupstream.scripts import file_under, parse_toxics
from fakeupstream.toxics import Op, Send, Toxics

if TYPE_CHECKING:
    from fakeupstream.fake import FakeUpstream

# Not replayed: how the recorded body was framed on its connection (the fake frames its
# own) and its length (the handler declares the length of what it sends).
_FRAMING = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


class PlayingCassette(Matcher):
    """Routes every ``/v1/`` request to :class:`CassetteHandler` while a cassette plays."""

    def __init__(self, fake: FakeUpstream) -> None:
        self.fake = fake

    def match(self, request: HTTPServerRequest) -> dict[str, Any] | None:
        playing = self.fake.playback is not None
        return {} if playing and (request.path or "").startswith("/v1/") else None


class CassetteHandler(ResponsesHandler):
    """Any method under ``/v1/``: record, find the recorded answer, send it as recorded."""

    SUPPORTED_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
    _planned: list[Op] | None = None

    def prepare(self) -> None:
        """Every method is played (the Responses handler allows only POST)."""

    async def get(self) -> None:
        await self.play()

    async def post(self) -> None:
        await self.play()

    async def put(self) -> None:
        await self.play()

    async def patch(self) -> None:
        await self.play()

    async def delete(self) -> None:
        await self.play()

    async def play(self) -> None:
        fake = self.fake
        playback = fake.playback
        started = fake.clock.monotonic()
        record = fake._record(self.request)
        try:
            record.body = json.loads(self.request.body)
        except (ValueError, RecursionError):
            record.body = None
        try:
            check_auth(self.request.headers.get("Authorization"), fake.api_keys)
            answer = self._recorded(playback)
        except ApiError as failure:
            answer = error_answer(failure)
        record.stream = answer.stream
        elapsed_ms = int((fake.clock.monotonic() - started) * 1000)
        ended = await self._deliver(record, answer, Toxics(), elapsed_ms)
        if answer.stream and self._planned is not None:
            sent = b"".join(op.data for op in self._planned if isinstance(op, Send))
            sent = sent[: record.sent_bytes]
            whole = sent[: sent.rfind(b"\n\n") + 2] if b"\n\n" in sent else b""
            record.events = raw_answer(whole).parsed if whole else []
        fake._finished(record, ended)

    def _recorded(self, playback: Playback | None) -> Answer:
        """The recorded answer to this request (its writes planned), or the 4xx why not."""
        if playback is None:  # unloaded between routing and now
            raise ApiError(409, "no cassette is loaded (POST /__fake/cassette loads one)")
        found = playback.take(self.request.method or "", self.request.path, self.request.body)
        if isinstance(found, Mismatch):
            raise ApiError(400, found.message, code="cassette_mismatch")
        self._planned = playback.ops(found, self.fake.rng)
        return recorded_answer(found)

    def operations(self, answer: Answer, toxics: Toxics) -> list[Op]:
        if self._planned is None:  # an error of the fake's own
            return super().operations(answer, toxics)
        return self._planned


def recorded_answer(interaction: Interaction) -> Answer:
    body = interaction.response_body
    try:
        parsed: Any = json.loads(body)
    except (ValueError, RecursionError):
        parsed = body.decode("utf-8", "replace")
    headers = tuple(
        (name, value)
        for name, value in interaction.response_headers
        if name.lower() not in _FRAMING
    )
    frames = [chunk.data for chunk in interaction.chunks]
    return Answer(
        interaction.status, frames, [parsed], stream=interaction.streamed, headers=headers
    )


class CassetteControlHandler(_Base):
    """``GET``: what plays; ``POST {"path", "timing"?, "match_body"?, "toxics"?}``: load a
    cassette (answers every ``/v1/`` request from then on); ``DELETE``: stop playing."""

    def get(self) -> None:
        playback = self.fake.playback
        self.send_json(200, {"playing": playback.status() if playback else None})

    def post(self) -> None:
        try:
            raw = json.loads(self.request.body or b"null")
            if not isinstance(raw, dict) or not isinstance(raw.get("path"), str):
                raise CassetteError("give {'path': PATH} (and optionally timing, match_body)")
            unknown = sorted(set(raw) - {"path", "timing", "match_body", "toxics"})
            if unknown:
                raise CassetteError(f"unknown key(s) {', '.join(unknown)}")
            timing = raw.get("timing", 1.0)
            if isinstance(timing, bool) or not isinstance(timing, int | float):
                raise CassetteError("'timing' must be a number >= 0")
            match_body = raw.get("match_body", True)
            if not isinstance(match_body, bool):
                raise CassetteError("'match_body' must be true or false")
            self.fake.playback = Playback.open(
                file_under(self.fake.files_dir, raw["path"], "path"),
                timing=float(timing),
                match_body=match_body,
                toxics=parse_toxics(raw.get("toxics", {})),
            )
        except ValueError as error:  # CassetteError, ScriptError and JSONDecodeError too
            self.send_json(400, {"error": {"message": str(error), "type": "invalid_cassette"}})
            return
        self.send_json(200, {"playing": self.fake.playback.status()})

    def delete(self) -> None:
        self.fake.playback = None
        self.send_json(200, {"playing": None})
