"""The Tornado app and :class:`FakeUpstream`: state, routing, and moving bytes.

Deciding what to answer is delegated: :mod:`rules` (rejections), :mod:`scripts` (queued
behaviour and the default reply), :mod:`events` (the Response and its SSE events),
:mod:`ciphertext` (tokens and the continuity probe) and :mod:`toxics` (how the bytes go
out). Handlers here only record, call those, and carry out the planned writes.

Routes: ``POST /v1/responses``; ``POST /v1/chat/completions`` (a strict thinking-mode Chat
provider, :mod:`chat_provider`); test controls under the reserved prefix ``/__fake/``
(``POST scripts``, ``GET requests[?wait_for=N&timeout=S]``, ``POST reset``, ``GET health``,
``GET|POST strict`` -- the Chat strictness, ``{"rule": ..., "prefix": ...}``); anything else
gets OpenAI's ``Invalid URL`` 404. Both model endpoints share the auth, the script queue,
the records and the toxics.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import secrets
import socket
import struct
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import tornado.web
from tornado.http1connection import HTTP1Connection
from tornado.httpserver import HTTPServer
from tornado.httputil import HTTPServerRequest
from tornado.iostream import StreamClosedError
from tornado.netutil import bind_sockets

from fakeupstream.chat_provider import ChatProvider
from fakeupstream.ciphertext import Cipher, Follower, History, Ledger, Sealed, probe
from fakeupstream.events import build, sse_frame
from fakeupstream.rules import (
    ApiError,
    check_auth,
    input_items,
    is_reasoning_model,
    parse_body,
    validate,
)
from fakeupstream.scripts import (
    HttpError,
    Script,
    ScriptError,
    default_output,
    parse_script,
    parse_scripts,
)
from fakeupstream.strict_chat import Strictness, parse_strictness
from fakeupstream.toxics import End, Pause, Send, Toxics, plan
from relay.clock import Clock, SystemClock

log = logging.getLogger("fakeupstream")
SSE_TYPE = "text/event-stream; charset=utf-8"
JSON_TYPE = "application/json"


@dataclass
class RecordedRequest:
    """One request as the fake saw it, and what it sent back (updated while sending)."""

    method: str
    path: str
    headers: dict[str, str]
    received_at: float  # wall clock
    peer: str = ""  # the client's address and port: equal on one reused connection
    body: Any = None  # parsed JSON; None when it did not parse
    continuity: dict[str, Any] | None = None  # ContinuityReport / ChatContinuity .to_json()
    status: int | None = None
    stream: bool = False
    events: list[Any] = field(default_factory=list)  # SSE events fully sent, parsed
    response: Any = None  # the JSON body sent (Response or error envelope)
    sent_bytes: int = 0
    ended: str | None = None  # finish | close | reset | hang | client_gone | stopped

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Answer:
    status: int
    frames: list[bytes]  # one per SSE event; a JSON body is one frame
    parsed: list[Any]  # what each frame carries, for the record
    stream: bool = False
    headers: tuple[tuple[str, str], ...] = ()


class FakeUpstream:
    """A scriptable fake of OpenAI's Responses API on a real loopback socket."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        seed: int | None = None,
        api_keys: Collection[str] | None = None,
        secret: bytes | None = None,
        record_path: str | None = None,
        max_records: int = 1000,
        strict: Strictness | Mapping[str, Any] | str | None = None,
    ) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.rng = random.Random(seed)
        self.api_keys = frozenset(api_keys) if api_keys is not None else None
        # The HMAC key is the one value not drawn from the seeded generator.
        key = secret if secret is not None else secrets.token_bytes(32)
        self.cipher = Cipher(key)
        # Chat: reasoning_content signed under the same key; ``strict`` is the default rule.
        self.chat = ChatProvider(key, strict)
        self.ledger = Ledger()
        # The newest ``max_records`` requests; ``received`` counts them all. The cap keeps
        # a long-running embedded fake (relay without an API key) from growing forever.
        self.requests: list[RecordedRequest] = []
        self.received = 0
        self.max_records = max_records
        self.record_path = record_path
        self.base_url = ""
        self.port: int | None = None
        self._queue: deque[Script] = deque()
        self._server: HTTPServer | None = None
        self._stopping = asyncio.Event()
        self._changed = asyncio.Event()

    # --- lifecycle ---------------------------------------------------------------

    def make_app(self) -> tornado.web.Application:
        args = {"fake": self}
        return tornado.web.Application(
            [
                (r"/v1/responses", ResponsesHandler, args),
                (r"/v1/chat/completions", ChatCompletionsHandler, args),
                (r"/__fake/strict", StrictHandler, args),
                (r"/__fake/scripts", ScriptsHandler, args),
                (r"/__fake/requests", RequestsHandler, args),
                (r"/__fake/reset", ResetHandler, args),
                (r"/__fake/health", HealthHandler, args),
            ],
            default_handler_class=InvalidUrlHandler,
            default_handler_args=args,
            compress_response=False,
            log_function=_log_request,
        )

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        if self._server is not None:
            raise RuntimeError("this FakeUpstream is already started")
        # Created here so they belong to the loop that serves.
        self._stopping = asyncio.Event()
        self._changed = asyncio.Event()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sockets = bind_sockets(port, host, family=family)
        self._server = HTTPServer(self.make_app())
        self._server.add_sockets(sockets)
        self.port = int(sockets[0].getsockname()[1])
        self.base_url = f"{origin(host, self.port)}/v1"
        return self.port

    async def stop(self) -> None:
        """Stop listening, end hangs and pauses, close every connection."""
        self._stopping.set()
        if self._server is not None:
            self._server.stop()
            await self._server.close_all_connections()
            self._server = None

    async def drop_connections(self) -> None:
        """Close every open client connection and keep listening, as a server that drops
        idle keep-alive connections does (an answer in progress is cut)."""
        if self._server is not None:
            await self._server.close_all_connections()

    # --- scripting and records ---------------------------------------------------

    def enqueue(self, *scripts: Mapping[str, Any]) -> None:
        """Queue behaviours for the next ``/v1/responses`` or ``/v1/chat/completions`` calls."""
        self.enqueue_parsed([parse_script(script) for script in scripts])  # all or nothing

    def enqueue_parsed(self, scripts: list[Script]) -> None:
        self._queue.extend(scripts)

    @property
    def queued(self) -> int:
        return len(self._queue)

    def reset(self) -> None:
        """Forget queued scripts, recorded requests and minted ids (the secret stays).

        The Chat strictness goes back to the constructor's.
        """
        self._queue.clear()
        self.requests.clear()
        self.received = 0
        self.ledger.clear()
        self.chat.reset()
        self._notify()

    async def wait_for_requests(
        self, count: int, *, ended: bool = True, within_s: float = 10
    ) -> None:
        """Wait until ``count`` requests were received (and, by default, fully answered)."""

        def ready() -> bool:
            if self.received < count:
                return False
            first_kept = self.received - len(self.requests)
            kept = self.requests[: max(0, count - first_kept)]
            return not ended or all(r.ended is not None for r in kept)

        async def loop() -> None:
            while not ready():
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), within_s)

    def _notify(self) -> None:
        self._changed.set()

    def _record(self, request: HTTPServerRequest) -> RecordedRequest:
        headers = {k: v for k, v in request.headers.get_all()}
        for name in list(headers):
            if name.lower() == "authorization":
                headers[name] = "REDACTED"
        address = getattr(getattr(request.connection, "context", None), "address", None)
        record = RecordedRequest(
            method=request.method or "",
            path=request.path,
            headers=headers,
            received_at=self.clock.wall(),
            peer=":".join(map(str, address[:2])) if isinstance(address, tuple) else "",
        )
        self.requests.append(record)
        self.received += 1
        del self.requests[: max(0, len(self.requests) - self.max_records)]
        self._notify()
        return record

    def _finished(self, record: RecordedRequest, ended: str) -> None:
        record.ended = ended
        self._notify()
        if self.record_path is not None:
            with Path(self.record_path).open("a", encoding="utf-8") as sink:
                sink.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")

    # --- deciding the answer -----------------------------------------------------

    def next_script(self) -> Script:
        return self._queue.popleft() if self._queue else Script()

    def answer(
        self, body: dict[str, Any], api_key: str, script: Script
    ) -> tuple[Answer, dict[str, Any]]:
        """The answer to a parsed request, and its continuity report (as JSON)."""
        items = input_items(body)
        model = str(body.get("model", ""))

        def open_token(item_id: str, token: str) -> Sealed | None:
            return self.cipher.open(token, api_key=api_key, model=model, item_id=item_id)

        context = {
            "instructions": body.get("instructions"),
            "previous_response_id": body.get("previous_response_id"),
        }
        report = probe(items, open_token, **context)
        if script.http_error is not None:
            return scripted_error(script.http_error), report.to_json()
        if script.validate:
            try:
                validate(body, open_token=open_token, ledger=self.ledger)
            except ApiError as failure:
                return error_answer(failure), report.to_json()
        if script.raw_sse is not None:
            return raw_answer(script.raw_sse), report.to_json()
        output = script.output
        if output is None:
            output = default_output(body, items, report, reasoning=is_reasoning_model(model))
        created_at = int(self.clock.wall())

        seen = History(**context)  # what the model saw before generating
        for item in items:
            seen.add(item)

        def mint(
            item_id: str,
            secret: str,
            followers: tuple[Follower, ...],
            shown: tuple[dict[str, Any], ...],
        ) -> str:
            before = seen.fork()
            for item in shown:  # what this response showed before the reasoning item
                before.add(item)
            return self.cipher.seal(
                Sealed(secret, followers, before.digest()),
                api_key=api_key,
                model=model,
                item_id=item_id,
                nonce=self.rng.randbytes(16),  # a fresh nonce: "differ" needs new bytes
                issued_at=created_at,
            )

        generation = build(body, script, output, rng=self.rng, created_at=created_at, mint=mint)
        final = generation.response
        self.ledger.record(final["id"], final["output"], store=body.get("store") is not False)
        if body.get("stream") is True:
            frames = [sse_frame(event) for event in generation.events]
            return Answer(200, frames, list(generation.events), stream=True), report.to_json()
        body_bytes = json.dumps(generation.json_body, indent=2, ensure_ascii=False).encode()
        return (
            Answer(generation.json_status, [body_bytes], [generation.json_body]),
            report.to_json(),
        )

    def answer_chat(self, body: dict[str, Any], script: Script) -> tuple[Answer, dict[str, Any]]:
        """The answer to a parsed Chat request, and its continuity probe (as JSON)."""
        report = self.chat.probe(body)
        if script.http_error is not None:
            return scripted_error(script.http_error), report.to_json()
        if script.validate:
            try:
                self.chat.check(body, script, report)
            except ApiError as failure:
                return error_answer(failure), report.to_json()
        if script.raw_sse is not None:
            return raw_answer(script.raw_sse), report.to_json()
        created = int(self.clock.wall())
        reply = self.chat.reply(body, script, report, rng=self.rng, created=created)
        answer = Answer(reply.status, reply.frames, reply.parsed, stream=reply.stream)
        return answer, report.to_json()

    def request_id(self) -> str:
        return f"req_{self.rng.getrandbits(128):032x}"


def origin(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _log_request(handler: tornado.web.RequestHandler) -> None:
    # Debug level: an embedded fake must not fill the relay's log; the CLI turns it on.
    request = handler.request
    milliseconds = 1000 * request.request_time()
    log.debug("%d %s %s %.1fms", handler.get_status(), request.method, request.uri, milliseconds)


def error_answer(error: ApiError, headers: tuple[tuple[str, str], ...] = ()) -> Answer:
    # OpenAI indents error envelopes by four spaces (Response bodies by two).
    envelope = error.envelope()
    data = json.dumps(envelope, indent=4, ensure_ascii=False).encode()
    return Answer(error.status, [data], [envelope], headers=headers)


def scripted_error(error: HttpError) -> Answer:
    failure = ApiError(
        error.status, error.message, type=error.type, param=error.param, code=error.code
    )
    return error_answer(failure, error.headers)


def raw_answer(raw: bytes) -> Answer:
    """Recorded SSE bytes, framed per event so event-counting toxics still apply."""
    frames = []
    rest = raw
    while rest:
        head, sep, rest = rest.partition(b"\n\n")
        frames.append(head + sep)
    parsed: list[Any] = []
    for frame in frames:
        data = b"\n".join(
            line[5:].lstrip(b" ") for line in frame.split(b"\n") if line.startswith(b"data:")
        )
        try:
            parsed.append(json.loads(data))
        except ValueError:
            parsed.append(frame.decode("utf-8", "replace"))
    return Answer(200, frames, parsed, stream=True)


# --- handlers ------------------------------------------------------------------------


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
                await self.flush()  # headers go out at once, as OpenAI sends them
            for op in plan(answer.frames, toxics, self.fake.rng):
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
            scripts = parse_scripts(json.loads(self.request.body or b"null"))
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


class HealthHandler(_Base):
    def get(self) -> None:
        fake = self.fake
        self.send_json(200, {"ok": True, "queued": fake.queued, "requests": fake.received})


class InvalidUrlHandler(_Base):
    def prepare(self) -> None:
        self.send_invalid_url()
