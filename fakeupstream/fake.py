""":class:`FakeUpstream`: its state, lifecycle, routing, scripting, records and answers.

Deciding what to answer is delegated: :mod:`rules` (rejections), :mod:`scripts` (queued
behaviour and the default reply), :mod:`events` (the Response and its SSE events),
:mod:`ciphertext` (tokens and the continuity probe) and :mod:`toxics` (how the bytes go
out). The handlers (:mod:`handlers`) record, call those, and carry out the planned writes.

Routes: ``POST /v1/responses``; ``POST /v1/chat/completions`` (a strict thinking-mode Chat
provider, :mod:`chat_fake`); test controls under the reserved prefix ``/__fake/``
(``POST scripts``, ``GET requests[?wait_for=N&timeout=S]``, ``POST reset``, ``GET health``,
``GET|POST strict`` -- the Chat strictness, ``{"rule": ..., "prefix": ...}``, ``POST
rotate_key`` -- seal with a new key, so every earlier token is refused, ``GET|POST|DELETE
cassette`` -- cassette playback); anything else gets OpenAI's ``Invalid URL`` 404. Both
model endpoints share the auth, the script queue, the records and the toxics. While a
cassette plays (:mod:`cassette_playback`) it answers every ``/v1/`` request instead.
``GET /v1/models`` lists the models the fake knows (:mod:`models`).

The controls are unauthenticated: a control that takes a path (a script's
``raw_sse_file``, the cassette's ``path``) reads only under ``files_dir`` (``--files-dir``),
and ``controls=False`` serves none of them (the relay's embedded offline upstream).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import secrets
import socket
from collections import deque
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import tornado.web
from tornado.httpserver import HTTPServer
from tornado.httputil import HTTPServerRequest
from tornado.netutil import bind_sockets
from tornado.routing import Rule

from fakeupstream.answers import Answer, error_answer, raw_answer, scripted_error
from fakeupstream.cassette_handlers import CassetteControlHandler, CassetteHandler, PlayingCassette
from fakeupstream.cassette_playback import Playback
from fakeupstream.chat_fake import ChatProvider
from fakeupstream.ciphertext import Cipher, Follower, History, Ledger, Sealed, probe
from fakeupstream.events import build, sse_frame
from fakeupstream.handlers import (
    ChatCompletionsHandler,
    HealthHandler,
    InvalidUrlHandler,
    RequestsHandler,
    ResetHandler,
    ResponsesHandler,
    RotateKeyHandler,
    ScriptsHandler,
    StrictHandler,
)
from fakeupstream.models import ModelsHandler
from fakeupstream.recorded import RecordedRequest
from fakeupstream.rules import ApiError, input_items, is_reasoning_model, validate
from fakeupstream.scripts import Script, default_output, parse_script
from fakeupstream.strict_chat import Strictness
from relay.clock import Clock, SystemClock

# The names other code imports from here; RecordedRequest lives in :mod:`recorded`.
__all__ = ["FakeUpstream", "RecordedRequest", "log", "origin"]

log = logging.getLogger("fakeupstream")


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
        cassette: Playback | Path | str | None = None,
        files_dir: Path | str | None = None,
        controls: bool = True,
    ) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.rng = random.Random(seed)
        self.api_keys = frozenset(api_keys) if api_keys is not None else None
        # The HMAC key is the one value not drawn from the seeded generator.
        key = secret if secret is not None else secrets.token_bytes(32)
        self._cipher_key = key
        self.cipher = Cipher(key)
        self.key_rotations = 0
        # Chat: reasoning_content signed under the same key; ``strict`` is the default rule.
        self.chat = ChatProvider(key, strict)
        self.ledger = Ledger()
        # The newest ``max_records`` requests; ``received`` counts them all. The cap keeps
        # a long-running embedded fake (relay without an API key) from growing forever.
        self.requests: list[RecordedRequest] = []
        self.received = 0
        self.models_listed = 0  # GET /v1/models answered (not in ``requests``)
        self.max_records = max_records
        self.record_path = record_path
        # Set: every /v1/ request is answered from this recording (cassette_playback).
        self.playback: Playback | None = (
            Playback.open(cassette) if isinstance(cassette, Path | str) else cassette
        )
        # The only directory a script's ``raw_sse_file`` or a cassette control's ``path``
        # may name a file under (None: no file at all), so that the unauthenticated
        # controls cannot read whatever this process can (scripts.file_under).
        self.files_dir = Path(files_dir) if files_dir is not None else None
        # False: no ``/__fake/`` routes at all (they get the Invalid URL 404), as when the
        # relay embeds this fake as its offline upstream (fakeupstream.embedded).
        self.controls = controls
        self.base_url = ""
        self.port: int | None = None
        self._queue: deque[Script] = deque()
        self._server: HTTPServer | None = None
        self._stopping = asyncio.Event()
        self._changed = asyncio.Event()

    # --- lifecycle ---------------------------------------------------------------

    def make_app(self) -> tornado.web.Application:
        args = {"fake": self}
        routes: list[Any] = [
            Rule(PlayingCassette(self), CassetteHandler, args),
            (r"/v1/responses", ResponsesHandler, args),
            (r"/v1/chat/completions", ChatCompletionsHandler, args),
            (r"/v1/models", ModelsHandler, args),
        ]
        if self.controls:
            routes += [
                (r"/__fake/strict", StrictHandler, args),
                (r"/__fake/cassette", CassetteControlHandler, args),
                (r"/__fake/scripts", ScriptsHandler, args),
                (r"/__fake/requests", RequestsHandler, args),
                (r"/__fake/reset", ResetHandler, args),
                (r"/__fake/rotate_key", RotateKeyHandler, args),
                (r"/__fake/health", HealthHandler, args),
            ]
        return tornado.web.Application(
            routes,
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
        parsed = [parse_script(script, files_dir=self.files_dir) for script in scripts]
        self.enqueue_parsed(parsed)  # all or nothing

    def enqueue_parsed(self, scripts: list[Script]) -> None:
        self._queue.extend(scripts)

    @property
    def queued(self) -> int:
        return len(self._queue)

    def reset(self) -> None:
        """Forget queued scripts, recorded requests and minted ids (the secret stays).

        The Chat strictness goes back to the constructor's; a cassette rewinds.
        """
        if self.playback is not None:
            self.playback.rewind()
        self._queue.clear()
        self.requests.clear()
        self.received = 0
        self.models_listed = 0
        self.ledger.clear()
        self.chat.reset()
        self._notify()

    def rotate_key(self) -> int:
        """Seal with a new key from now on, as when OpenAI rotates its encryption key:
        every token minted before is refused (400 ``invalid_encrypted_content``). The new
        key derives from the old one, so a seeded run stays reproducible; the Chat seal
        keeps its key. Returns the number of rotations so far."""
        self._cipher_key = hashlib.sha256(b"fake-key-rotation\0" + self._cipher_key).digest()
        self.cipher = Cipher(self._cipher_key)
        self.key_rotations += 1
        return self.key_rotations

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
        seen = History(**context)  # what the model saw before generating
        report = probe(items, open_token, history=seen)
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
