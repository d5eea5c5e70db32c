"""Recording the relay's upstream traffic as vcrpy cassettes (``nox -s live -- --record DIR``).

:func:`record_cassettes` starts a reverse proxy on loopback, in a thread with its own event
loop, that forwards ``/v1/...`` to the upstream base URL and passes every answer on as its
bytes arrive: the relay streams SSE, so nothing is buffered on the way. What went through
is written on exit as one vcrpy cassette (``cassette-NNN.yaml``, the next free number)
with each answer's chunk boundaries and their timing (:mod:`fakeupstream.cassette`), and
can be played back by the fake (``fakeupstream --cassette PATH``).

What a cassette keeps (:mod:`fakeupstream.cassette_scrub`): never a credential header
(``authorization`` and the like) or URL credential; with ``shareable=True`` no ciphertext
either (every ``encrypted_content`` becomes ``sha256:<hex>``). An unscrubbed cassette holds
the upstream's ciphertext, so it is only written into a private directory: created 0700,
refused when it exists with broader permissions, belongs to someone else or is a symlink;
its files are 0600.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import threading
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit

import tornado.web
from tornado import httputil
from tornado.http1connection import HTTP1Connection
from tornado.httpclient import HTTPRequest
from tornado.httpserver import HTTPServer
from tornado.iostream import IOStream, StreamClosedError
from tornado.netutil import bind_sockets
from tornado.simple_httpclient import HTTPStreamClosedError, SimpleAsyncHTTPClient, _HTTPConnection

from fakeupstream.cassette import Cassette, Chunk, Ended, Interaction, dumps, scrub_cassette
from fakeupstream.cassette_scrub import scrub_uri
from relay.clock import Clock, SystemClock
from relay.transport.chunked import ChunkedDecoder

T = TypeVar("T")

# Headers about one connection, not the exchange: never forwarded either way. The proxy
# asks for an uncompressed answer (recorded as it is read) and frames its own.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
        "expect",
    }
)
# How the answer was framed on the proxy's connection: not part of what is recorded.
_FRAMING = frozenset({"connection", "keep-alive", "transfer-encoding"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_MAX_CASSETTES = 10_000


def record_cassettes(
    upstream_base_url: str, directory: Path, *, shareable: bool
) -> AbstractContextManager[str]:
    """Record what goes through a loopback proxy to ``upstream_base_url``.

    Entering yields the proxy's base URL (``http://127.0.0.1:PORT/v1``), for the relay's
    ``OPENAI_BASE_URL``; leaving writes the cassette into ``directory`` (nothing when no
    request came). ``shareable``: scrub ciphertext too (see the module docstring).
    """
    return CassetteRecorder(upstream_base_url, Path(directory), shareable=shareable)


class CassetteRecorder(AbstractContextManager[str]):
    """:func:`record_cassettes`; ``path`` is the cassette written on exit, if any."""

    def __init__(
        self,
        upstream_base_url: str,
        directory: Path,
        *,
        shareable: bool,
        clock: Clock | None = None,
        grace_s: float = 2.0,
    ) -> None:
        self.upstream_base_url = upstream_base_url
        self.directory = directory
        self.shareable = shareable
        self.path: Path | None = None
        self._clock = clock if clock is not None else SystemClock()
        self._grace_s = grace_s
        self._folder: CassetteFolder | None = None
        self._loop: _LoopThread | None = None
        self._proxy: RecordingProxy | None = None

    def __enter__(self) -> str:
        # Checked before anything listens: a refused directory records nothing.
        self._folder = CassetteFolder.open(self.directory, private=not self.shareable)
        try:
            self._proxy = RecordingProxy(self.upstream_base_url, clock=self._clock)
            self._loop = _LoopThread()
            self._loop.run(self._proxy.start())
        except BaseException:
            self._close()
            raise
        return self._proxy.base_url

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        # Written however the block ended: the recording of a failed run explains it.
        assert self._loop is not None, "not entered"
        assert self._proxy is not None
        assert self._folder is not None
        try:
            interactions = self._loop.run(self._proxy.stop(self._grace_s))
            recorded = Cassette(tuple(interactions), upstream_base_url=self.upstream_base_url)
            cassette = scrub_cassette(recorded, shareable=self.shareable)
            if cassette.interactions:
                self.path = self._folder.write(dumps(cassette), suffix=".yaml")
        finally:
            self._close()

    def _close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        if self._folder is not None:
            self._folder.close()
            self._folder = None


# --- where cassettes go --------------------------------------------------------------------


class CassetteFolder:
    """The directory cassettes are written into, held open so that what was checked is
    what gets written to (no symlink swapped in between)."""

    def __init__(self, path: Path, fd: int, *, private: bool) -> None:
        self.path = path
        self.private = private
        self._fd: int | None = fd

    @classmethod
    def open(cls, directory: Path, *, private: bool) -> CassetteFolder:
        directory.parent.mkdir(parents=True, exist_ok=True)
        created = False
        try:
            directory.mkdir(mode=0o700 if private else 0o777)
            created = True
        except FileExistsError:
            pass
        if private and directory.is_symlink():
            raise PermissionError(
                f"{directory} is a symlink; unscrubbed cassettes carry ciphertext and go only "
                "into a private directory (give a real directory, mode 0700)"
            )
        flags = os.O_RDONLY | os.O_DIRECTORY | (os.O_NOFOLLOW if private else 0)
        fd = os.open(directory, flags)
        try:
            if private:
                if created:
                    os.fchmod(fd, 0o700)  # whatever the umask left
                _check_private(directory, os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        return cls(directory, fd, private=private)

    def write(self, text: str, *, suffix: str) -> Path:
        """A new file ``cassette-NNN<suffix>`` (the next free number) holding ``text``."""
        assert self._fd is not None, "the folder is closed"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        mode = 0o600 if self.private else 0o644
        for number in range(1, _MAX_CASSETTES):
            name = f"cassette-{number:03d}{suffix}"
            try:
                fd = os.open(name, flags, mode, dir_fd=self._fd)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as sink:
                if self.private:
                    os.fchmod(sink.fileno(), 0o600)  # whatever the umask left
                sink.write(text)
            return self.path / name
        raise FileExistsError(f"{self.path} already holds {_MAX_CASSETTES - 1} cassettes")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _check_private(directory: Path, info: os.stat_result) -> None:
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(f"{directory} is not a directory")
    if info.st_uid != os.geteuid():
        raise PermissionError(
            f"{directory} belongs to uid {info.st_uid}, not to you; unscrubbed cassettes "
            "carry ciphertext and go only into a private directory of your own"
        )
    if info.st_mode & 0o077:
        raise PermissionError(
            f"{directory} has mode {stat.S_IMODE(info.st_mode):04o}; unscrubbed cassettes "
            f"carry ciphertext and go only into a private directory (chmod 700 {directory}, "
            "or record shareable cassettes)"
        )


# --- the proxy -------------------------------------------------------------------------------


class _ClientGone(Exception):
    """The relay left before the answer ended."""


class _Stopped(Exception):
    """The recording ended before the answer did."""


@dataclass(eq=False)
class _Exchange:
    """One request as it goes through, and its answer as far as it came."""

    method: str
    uri: str
    request_headers: tuple[tuple[str, str], ...]
    request_body: bytes
    started: float
    status: int | None = None
    reason: str = ""
    response_headers: tuple[tuple[str, str], ...] = ()
    chunks: list[Chunk] = field(default_factory=list)
    last: float = 0.0
    ended: Ended = "stopped"
    request: _ProxiedRequest | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def received(self, now: float, data: bytes) -> None:
        self.chunks.append(Chunk(max(0.0, now - self.last) * 1000, data))
        self.last = now

    def abort(self, error: BaseException) -> None:
        if self.request is None:
            return
        if self.request.connection is not None:
            self.request.connection.abort(error)
        else:
            self.request.pending_abort = error

    def interaction(self) -> Interaction | None:
        if self.status is None:  # no answer came: nothing to play back
            return None
        return Interaction(
            method=self.method,
            uri=self.uri,
            request_headers=self.request_headers,
            request_body=self.request_body,
            status=self.status,
            reason=self.reason,
            response_headers=self.response_headers,
            chunks=tuple(self.chunks),
            ended=self.ended,
        )


class _ProxiedRequest(HTTPRequest):
    connection: _ProxiedConnection | None = None
    pending_abort: BaseException | None = None
    on_headers: Callable[[httputil.ResponseStartLine, httputil.HTTPHeaders], Awaitable[None]]


class _PassThroughHTTP1Connection(HTTP1Connection):
    """Tornado's HTTP/1 connection, handing over every byte that came before a break-off.

    Like Tornado, it hands over the chunked body decoded so far whenever the next read would
    wait for the network (so a piece is what arrived together); unlike Tornado, also when
    that read fails, where Tornado drops what it held -- the bytes an upstream sent before
    breaking off are forwarded and recorded too. A body that ends with the connection is
    passed on read by read, not read whole first.
    """

    async def _read_chunked_body(self, delegate: httputil.HTTPMessageDelegate) -> None:
        decoder = ChunkedDecoder(self._max_body_size)
        limit = self.params.chunk_size
        pending = bytearray()  # decoded from bytes that had already arrived
        while not decoder.done:
            read = self.stream.read_bytes(min(decoder.wanted(), limit), partial=True)
            future = asyncio.ensure_future(read)
            # Hand over what came before waiting for more, or before the break-off.
            if pending and (not future.done() or future.exception() is not None):
                await self._deliver_body(delegate, bytes(pending))
                pending.clear()
            pending += b"".join(decoder.feed(await future))
            if len(pending) >= limit:
                await self._deliver_body(delegate, bytes(pending))
                pending.clear()
        if pending:
            await self._deliver_body(delegate, bytes(pending))

    async def _read_body_until_close(self, delegate: httputil.HTTPMessageDelegate) -> None:
        while True:
            try:
                data = await self.stream.read_bytes(self.params.chunk_size, partial=True)
            except StreamClosedError:
                return  # the end of this body
            await self._deliver_body(delegate, data)


class ResetSafeConnection(_HTTPConnection):
    """Tornado's client connection, completing a fetch that a connection reset ends.
    (The relay's own upstream client no longer builds on Tornado's; this recording
    harness still does, so the override lives here.)"""

    def on_connection_close(self) -> None:
        # Tornado re-raises a reset's socket error from this callback without completing
        # the fetch, which leaves the request hanging; complete it with that error instead.
        if self.final_callback is not None:
            error = self.stream.error or HTTPStreamClosedError("Connection closed")
            self._handle_exception(type(error), error, None)


class _ProxiedConnection(ResetSafeConnection):
    """Tornado's client connection, abortable, handing the answer's head over at once."""

    def __init__(self, client: Any, request: Any, *args: Any) -> None:
        real = getattr(request, "request", request)  # behind Tornado's defaults proxy
        super().__init__(client, request, *args)
        self._proxied = real if isinstance(real, _ProxiedRequest) else None
        if self._proxied is not None:
            self._proxied.connection = self
            if self._proxied.pending_abort is not None:
                self.abort(self._proxied.pending_abort)

    def abort(self, error: BaseException) -> None:
        self._handle_exception(type(error), error, None)

    def _create_connection(self, stream: IOStream) -> HTTP1Connection:
        made = super()._create_connection(stream)
        return _PassThroughHTTP1Connection(stream, True, made.params, made.context)

    async def headers_received(
        self,
        first_line: httputil.ResponseStartLine | httputil.RequestStartLine,
        headers: httputil.HTTPHeaders,
    ) -> None:
        await super().headers_received(first_line, headers)
        interim = isinstance(first_line, httputil.ResponseStartLine) and first_line.code < 200
        if self._proxied is not None and not interim:
            assert isinstance(first_line, httputil.ResponseStartLine)
            await self._proxied.on_headers(first_line, headers)


class _Client(SimpleAsyncHTTPClient):
    def _connection_class(self) -> type:
        return _ProxiedConnection


class RecordingProxy:
    """The loopback reverse proxy: forwards ``/v1/...``, keeps every exchange in order."""

    def __init__(self, upstream_base_url: str, *, clock: Clock) -> None:
        parts = urlsplit(upstream_base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"the upstream base URL must be http(s)://HOST[/PATH], got {upstream_base_url!r}"
            )
        self.upstream = upstream_base_url.rstrip("/")
        self.clock = clock
        self.exchanges: list[_Exchange] = []
        self.stopping = False
        self.base_url = ""
        self._server: HTTPServer | None = None
        self._client: SimpleAsyncHTTPClient | None = None

    async def start(self, host: str = "127.0.0.1") -> int:
        # Tornado objects belong to the loop that serves: made here, in it.
        self._client = _Client(force_instance=True, max_clients=1000, max_body_size=2**62)
        app = tornado.web.Application(
            [(r"/.*", _ProxyHandler, {"proxy": self})],
            compress_response=False,
            log_function=lambda handler: None,  # the relay logs its requests itself
        )
        sockets = bind_sockets(0, host, family=socket.AF_INET)
        self._server = HTTPServer(app, max_body_size=2**62)
        self._server.add_sockets(sockets)
        port = int(sockets[0].getsockname()[1])
        self.base_url = f"http://{host}:{port}/v1"
        return port

    async def stop(self, grace_s: float) -> list[Interaction]:
        """Stop listening; give answers still coming ``grace_s`` to end, then cut them."""
        self.stopping = True
        if self._server is not None:
            self._server.stop()
        await self._settle(grace_s)
        for exchange in self.exchanges:
            if not exchange.done.is_set():
                exchange.abort(_Stopped())
        await self._settle(grace_s)
        if self._server is not None:
            await self._server.close_all_connections()
            self._server = None
        if self._client is not None:
            self._client.close()
            self._client = None
        found = (exchange.interaction() for exchange in self.exchanges)
        return [interaction for interaction in found if interaction is not None]

    async def _settle(self, within_s: float) -> None:
        waiting = [
            asyncio.ensure_future(e.done.wait()) for e in self.exchanges if not e.done.is_set()
        ]
        if waiting:
            _, pending = await asyncio.wait(waiting, timeout=within_s)
            for waiter in pending:
                waiter.cancel()

    def begin(
        self, method: str, uri: str, headers: tuple[tuple[str, str], ...], body: bytes
    ) -> _Exchange:
        now = self.clock.monotonic()
        exchange = _Exchange(method, uri, headers, body, started=now, last=now)
        self.exchanges.append(exchange)  # in the order the requests came
        return exchange

    @property
    def client(self) -> SimpleAsyncHTTPClient:
        assert self._client is not None, "the proxy is not started"
        return self._client


class _ProxyHandler(tornado.web.RequestHandler):
    SUPPORTED_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

    def initialize(self, proxy: RecordingProxy) -> None:
        self.proxy = proxy
        self._exchange: _Exchange | None = None
        self._gone = False

    def set_default_headers(self) -> None:
        # Only the upstream's own headers go back.
        self.clear_header("Server")
        self.clear_header("Content-Type")

    def on_connection_close(self) -> None:
        self._gone = True
        if self._exchange is not None:
            self._exchange.abort(_ClientGone())

    async def get(self) -> None:
        await self.forward()

    async def post(self) -> None:
        await self.forward()

    async def put(self) -> None:
        await self.forward()

    async def patch(self) -> None:
        await self.forward()

    async def delete(self) -> None:
        await self.forward()

    async def forward(self) -> None:
        path = self.request.path or ""
        if path != "/v1" and not path.startswith("/v1/"):
            self._fail(404, f"Invalid URL ({self.request.method} {path}): the proxy serves /v1/")
            return
        method = self.request.method or "GET"
        url = self.proxy.upstream + (self.request.uri or "")[len("/v1") :]
        headers = httputil.HTTPHeaders()
        for name, value in self.request.headers.get_all():
            if name.lower() not in _HOP_BY_HOP:
                headers.add(name, value)
        headers["Accept-Encoding"] = "identity"
        body = self.request.body or b""
        exchange = self.proxy.begin(method, url, tuple(headers.get_all()), body)
        self._exchange = exchange
        request = _ProxiedRequest(
            url,
            method=method,
            headers=headers,
            body=body if body or method in _BODY_METHODS else None,
            streaming_callback=self._on_chunk,
            decompress_response=False,
            follow_redirects=False,
            allow_nonstandard_methods=True,
            connect_timeout=30,
            request_timeout=0,  # a stream may rightly run for minutes; the relay times it
        )
        request.on_headers = self._on_headers
        exchange.request = request
        try:
            error: BaseException | None = None
            try:
                await self.proxy.client.fetch(request, raise_error=False)
            except Exception as failure:  # transport faults are raised even so
                error = failure
            if exchange.status is None:
                exchange.ended = "close"
                where = scrub_uri(url)  # never a credential in an error
                self._fail(502, f"the recording proxy could not reach the upstream ({where})")
            elif error is None:
                exchange.ended = "finish"
                if not self._gone:
                    self.finish()
            else:
                exchange.ended = self._why_cut(error)
                self._cut()
        finally:
            exchange.done.set()

    async def _on_headers(
        self, start: httputil.ResponseStartLine, headers: httputil.HTTPHeaders
    ) -> None:
        exchange = self._exchange
        assert exchange is not None
        # The first chunk's delay counts from the request (exchange.last is its start).
        exchange.status, exchange.reason = start.code, start.reason
        exchange.response_headers = tuple(
            (name, value) for name, value in headers.get_all() if name.lower() not in _FRAMING
        )
        self.set_status(start.code, start.reason or None)
        seen: set[str] = set()
        for name, value in headers.get_all():
            lowered = name.lower()
            if lowered in _HOP_BY_HOP:
                continue
            if lowered in seen:
                self.add_header(name, value)
            else:
                self.set_header(name, value)
                seen.add(lowered)
        await self._send(None)  # the head goes on at once, as the upstream sent it

    async def _on_chunk(self, chunk: bytes) -> None:
        assert self._exchange is not None
        self._exchange.received(self.proxy.clock.monotonic(), chunk)
        await self._send(chunk)

    async def _send(self, chunk: bytes | None) -> None:
        if not self._gone:
            try:
                if chunk:
                    self.write(chunk)
                await self.flush()
            except StreamClosedError:
                self._gone = True
        if self._gone:
            assert self._exchange is not None
            self._exchange.abort(_ClientGone())  # nobody to pass the rest on to

    def _why_cut(self, error: BaseException | None) -> Ended:
        if self._gone or isinstance(error, _ClientGone):
            return "client_gone"
        if isinstance(error, _Stopped) or self.proxy.stopping:
            return "stopped"
        return "close"

    def _cut(self) -> None:
        """End the relay's connection mid-body, as the upstream ended ours."""
        connection = self.request.connection
        stream = getattr(connection, "stream", None)
        if isinstance(stream, IOStream):
            stream.close()
        elif connection is not None:
            with suppress(Exception):
                connection.finish()

    def _fail(self, status: int, message: str) -> None:
        if self._gone or self._finished:
            return
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        error = {"message": message, "type": "proxy_error", "param": None, "code": None}
        self.finish({"error": error})


class _LoopThread:
    """An event loop of its own in a daemon thread; ``run`` waits for a coroutine there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="cassette-recorder", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
