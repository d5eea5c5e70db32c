"""The Tornado handlers: record the request, let :class:`FakeUpstream` decide the answer,
carry out the planned writes (:mod:`toxics`); and the ``/__fake/`` test controls."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from typing import TYPE_CHECKING, Any

import tornado.web
from tornado.http1connection import HTTP1Connection
from tornado.iostream import StreamClosedError

from fakeupstream.answers import Answer, error_answer
from fakeupstream.recorded import RecordedRequest
from fakeupstream.rules import ApiError, check_auth, parse_body
from fakeupstream.scripts import Script, ScriptError, parse_scripts
from fakeupstream.strict_chat import parse_strictness
from fakeupstream.toxics import End, Op, Pause, Send, Toxics, plan

if TYPE_CHECKING:
    from fakeupstream.fake import FakeUpstream

SSE_TYPE = "text/event-stream; charset=utf-8"
JSON_TYPE = "application/json"


class _Base(tornado.web.RequestHandler):
    def initialize(self, fake: FakeUpstream) -> None:
        self.fake = fake

    def set_default_headers(self) -> None:
        self.clear_header("Server")

    def send_json(self, status: int, value: Any) -> None:
        self.set_status(status)
        self.set_header("Content-Type", JSON_TYPE)
        self.finish(json.dumps(value, indent=2, ensure_ascii=False))

    def check_xsrf_cookie(self) -> None:
        """An API, not a browser form."""

    def send_invalid_url(self) -> None:
        """OpenAI's answer to a path or method it does not serve."""
        error = ApiError(404, f"Invalid URL ({self.request.method} {self.request.path})")
        self.set_status(404)
        self.set_header("Content-Type", JSON_TYPE)
        self.finish(error_answer(error).frames[0])


class ResponsesHandler(_Base):
    """``POST /v1/responses``: record, decide, deliver under the script's toxics."""

    def initialize(self, fake: FakeUpstream) -> None:
        super().initialize(fake)
        self._gone = asyncio.Event()

    def on_connection_close(self) -> None:
        self._gone.set()

    def prepare(self) -> None:
        if self.request.method != "POST":
            self.send_invalid_url()

    async def post(self) -> None:
        fake = self.fake
        started = fake.clock.monotonic()
        record = fake._record(self.request)
        toxics = Toxics()
        try:
            api_key = check_auth(self.request.headers.get("Authorization"), fake.api_keys)
            script = fake.next_script()  # consumed by every authenticated call
            toxics = script.toxics
            body = parse_body(self.request.body)
            record.body = body
            record.stream = body.get("stream") is True
            try:
                answer, record.continuity = self.decide(body, api_key, script)
            except Exception as error:  # a crash must still look like an API error
                failure = ApiError(500, f"The fake upstream failed: {error!r}", type="server_error")
                answer = error_answer(failure)
        except ApiError as failure:
            answer = error_answer(failure)
        elapsed_ms = int((fake.clock.monotonic() - started) * 1000)
        ended = await self._deliver(record, answer, toxics, elapsed_ms)
        fake._finished(record, ended)

    def decide(
        self, body: dict[str, Any], api_key: str, script: Script
    ) -> tuple[Answer, dict[str, Any]]:
        return self.fake.answer(body, api_key, script)

    async def _deliver(
        self, record: RecordedRequest, answer: Answer, toxics: Toxics, elapsed_ms: int
    ) -> str:
        record.status = answer.status
        self.set_status(answer.status)
        self.set_header("Content-Type", SSE_TYPE if answer.stream else JSON_TYPE)
        self.set_header("x-request-id", self.fake.request_id())
        self.set_header("openai-version", "2020-10-01")
        self.set_header("openai-processing-ms", str(elapsed_ms))
        for name, value in answer.headers:
            self.set_header(name, value)
        total = sum(len(frame) for frame in answer.frames)
        if not answer.stream:
            record.response = answer.parsed[0]
            # Declared up front so a cut JSON body is visibly short, not a shorter body.
            self.set_header("Content-Length", str(total))
        try:
            if answer.stream:
                # Each event goes out when flushed, as a streaming server sends it: without
                # TCP_NODELAY a reused connection holds small writes back (Nagle's
                # algorithm waits for the client's delayed ACK of the previous one).
                connection = self.request.connection
                if isinstance(connection, HTTP1Connection) and connection.stream is not None:
                    connection.stream.set_nodelay(True)
                await self.flush()  # headers go out at once, as OpenAI sends them
            for op in self.operations(answer, toxics):
                if isinstance(op, Pause):
                    interrupted = await self._wait(op.seconds)
                    if interrupted is not None:
                        return self._abort(interrupted)
                elif isinstance(op, Send):
                    self.write(op.data)
                    await self.flush()
                    record.sent_bytes += len(op.data)
                    if op.completes is not None and answer.stream:
                        record.events.append(answer.parsed[op.completes])
                        self.fake._notify()
                elif isinstance(op, End):
                    short = not answer.stream and record.sent_bytes < total
                    return await self._end("close" if short and op.kind == "finish" else op.kind)
        except StreamClosedError:
            return "client_gone"
        return "finish"

    def operations(self, answer: Answer, toxics: Toxics) -> list[Op]:
        """The writes that deliver ``answer`` (cassette playback plans its own)."""
        return plan(answer.frames, toxics, self.fake.rng)

    async def _end(self, kind: str) -> str:
        if kind == "finish":
            self.finish()
            return kind
        if kind == "hang":
            self.fake._notify()
            reason = await self._wait(None)
            return self._abort(reason or "stopped")
        return self._abort(kind)

    def _abort(self, reason: str) -> str:
        """Drop the connection without ending the HTTP body; RST for ``reset``."""
        connection = self.request.connection
        if isinstance(connection, HTTP1Connection) and connection.stream is not None:
            stream = connection.stream
            if reason == "reset" and stream.socket is not None:
                # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
                linger = struct.pack("ii", 1, 0)
                stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            stream.close()
        return reason

    async def _wait(self, seconds: float | None) -> str | None:
        """Sleep (``None``: forever) unless the client leaves or the fake stops first."""
        waiters = [
            asyncio.ensure_future(self._gone.wait()),
            asyncio.ensure_future(self.fake._stopping.wait()),
        ]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        if self.fake._stopping.is_set():  # stopping closes connections too: check it first
            return "stopped"
        if self._gone.is_set():
            return "client_gone"
        return None


class ChatCompletionsHandler(ResponsesHandler):
    """``POST /v1/chat/completions``: the same delivery, the strict Chat provider decides."""

    def decide(
        self, body: dict[str, Any], api_key: str, script: Script
    ) -> tuple[Answer, dict[str, Any]]:
        return self.fake.answer_chat(body, script)


class StrictHandler(_Base):
    """``GET``: the Chat strictness in force; ``POST {"rule"?, "prefix"?}``: change it."""

    def get(self) -> None:
        self.send_json(200, self.fake.chat.strictness.to_json())

    def post(self) -> None:
        chat = self.fake.chat
        try:
            chat.strictness = parse_strictness(
                json.loads(self.request.body or b"null"), chat.strictness
            )
        except ValueError as error:  # JSONDecodeError is one too
            self.send_json(400, {"error": {"message": str(error), "type": "invalid_strict"}})
            return
        self.send_json(200, chat.strictness.to_json())


class ScriptsHandler(_Base):
    def post(self) -> None:
        try:
            raw = json.loads(self.request.body or b"null")
            scripts = parse_scripts(raw, files_dir=self.fake.files_dir)
        except (ValueError, ScriptError) as error:
            message = str(error) if isinstance(error, ScriptError) else f"invalid JSON: {error}"
            self.send_json(400, {"error": {"message": message, "type": "invalid_script"}})
            return
        self.fake.enqueue_parsed(scripts)
        self.send_json(200, {"queued": self.fake.queued})


class RequestsHandler(_Base):
    async def get(self) -> None:
        wait_for = int(self.get_query_argument("wait_for", "0"))
        timeout = float(self.get_query_argument("timeout", "10"))
        if wait_for > 0:
            # On timeout, answer with what there is; the caller compares counts.
            with contextlib.suppress(TimeoutError):
                await self.fake.wait_for_requests(wait_for, within_s=timeout)
        self.send_json(200, [record.to_json() for record in self.fake.requests])


class ResetHandler(_Base):
    def post(self) -> None:
        self.fake.reset()
        self.send_json(200, {"reset": True})


class RotateKeyHandler(_Base):
    def post(self) -> None:
        self.send_json(200, {"rotations": self.fake.rotate_key()})


class HealthHandler(_Base):
    def get(self) -> None:
        fake = self.fake
        self.send_json(200, {"ok": True, "queued": fake.queued, "requests": fake.received})


class InvalidUrlHandler(_Base):
    def prepare(self) -> None:
        self.send_invalid_url()
