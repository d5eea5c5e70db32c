"""One request's answer on the relay's HTTP/1.1 server connection
(:mod:`relay.transport.http_connection`): the ``httputil.HTTPConnection`` the application
writes through, on Tornado's public surface only.

The answer follows Tornado's rules: chunked transfer coding for an HTTP/1.1 answer without
a Content-Length (none for HEAD, 1xx, 204 and 304), ``Connection: close`` when the
connection ends after it, ``Keep-Alive`` for an HTTP/1.0 client that asked, an error for
writing more or less than the Content-Length. An answer begun before the body is read
says ``Connection: close`` and ends the connection (Tornado closes rather than read an
unread body; said at once, a keep-alive client opens a new connection for its next request
instead of sending it into the close).
"""

from __future__ import annotations

import socket
from asyncio import Future
from collections.abc import Callable
from typing import Any

from tornado import httputil, iostream
from tornado.escape import native_str

from relay.transport.request_head import RequestHead


class RequestContext:
    """``connection.context``: where ``HTTPServerRequest`` reads ``remote_ip`` and
    ``protocol`` (a Unix socket's peer is ``0.0.0.0``, as with Tornado)."""

    __slots__ = ("address", "protocol", "remote_ip")

    def __init__(self, stream: iostream.IOStream, address: Any, protocol: str = "http") -> None:
        self.address = address
        family = stream.socket.family if stream.socket is not None else None
        inet = family in (socket.AF_INET, socket.AF_INET6) and address is not None
        self.remote_ip: str = address[0] if inet else "0.0.0.0"  # noqa: S104 (a peer, not a bind)
        self.protocol = protocol

    def __str__(self) -> str:
        return self.remote_ip


def _settled(write: Future[None]) -> Future[None]:
    """A write's future for the application: done once ``write`` is, and (as Tornado's)
    successful when the stream closed meanwhile, which the close callback reports."""
    settled: Future[None] = Future()

    def done(future: Future[None]) -> None:
        exc = future.exception()
        if settled.done():
            return
        if exc is None or isinstance(exc, iostream.StreamClosedError):
            settled.set_result(None)
        else:
            settled.set_exception(exc)

    if write.done():
        done(write)
    else:
        write.add_done_callback(done)
    return settled


def _closed_write() -> Future[None]:
    failed: Future[None] = Future()
    failed.set_exception(iostream.StreamClosedError())
    failed.exception()  # retrieved: the caller may drop it
    return failed


class Exchange(httputil.HTTPConnection):
    """One request's ``HTTPConnection``: what the application writes its answer through."""

    __slots__ = (
        "_chunking",
        "_close_callback",
        "_pending",
        "_remaining",
        "context",
        "disconnect",
        "finished",
        "head",
        "read_finished",
        "response_started",
        "stream",
        "write_finished",
    )

    def __init__(
        self, stream: iostream.IOStream, context: RequestContext, head: RequestHead
    ) -> None:
        self.stream = stream
        self.context = context
        self.head = head
        self.disconnect = not head.keep_alive  # close once the answer is out
        self.read_finished = False
        self.write_finished = False
        self.response_started = False
        self.finished: Future[None] = Future()  # the answer is out (or the stream closed)
        self._chunking = False
        self._remaining: int | None = None  # Content-Length still due
        self._pending: Future[None] | None = None
        self._close_callback: Callable[[], None] | None = None

    def set_close_callback(self, callback: Callable[[], None] | None) -> None:
        self._close_callback = callback

    def connection_closed(self) -> None:
        """The stream closed while the application was answering."""
        callback, self._close_callback = self._close_callback, None
        if callback is not None:
            callback()
        if not self.finished.done():
            self.finished.set_result(None)

    def write_headers(
        self,
        start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
        chunk: bytes | None = None,
    ) -> Future[None]:
        assert isinstance(start_line, httputil.ResponseStartLine)
        self.response_started = True
        request = self.head.start_line
        code = start_line.code
        if not self.read_finished:  # the body stays unread: the connection must end
            self.disconnect = True
        http11 = request.version == "HTTP/1.1"
        self._chunking = (
            http11
            and request.method != "HEAD"
            and code not in (204, 304)
            and not 100 <= code < 200
            and "Content-Length" not in headers
        )
        if http11 and self.disconnect:
            headers["Connection"] = "close"
        elif (
            request.version == "HTTP/1.0"
            and self.head.headers.get("Connection", "").lower() == "keep-alive"
        ):
            headers["Connection"] = "Keep-Alive"
        if self._chunking:
            headers["Transfer-Encoding"] = "chunked"
        if request.method == "HEAD" or code == 304:
            self._remaining = 0
        elif "Content-Length" in headers:
            self._remaining = int(headers["Content-Length"])
        else:
            self._remaining = None
        lines = [f"HTTP/1.1 {code} {start_line.reason}"]
        lines += [f"{native_str(name)}: {native_str(value)}" for name, value in headers.get_all()]
        for line in lines:
            if "\r" in line or "\n" in line:  # a header injected into the answer
                raise ValueError(f"Illegal characters (CR or LF) in header: {line!r}")
        if self.stream.closed():
            return _closed_write()
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin1")
        if chunk:
            data += self._frame(chunk)
        self._pending = self.stream.write(data)
        return _settled(self._pending)

    def _frame(self, chunk: bytes) -> bytes:
        if self._remaining is not None:
            self._remaining -= len(chunk)
            if self._remaining < 0:
                self.stream.close()  # no framing error goes further
                raise httputil.HTTPOutputError("Tried to write more data than Content-Length")
        if self._chunking and chunk:  # (an empty chunk would end the body)
            return b"%x\r\n%b\r\n" % (len(chunk), chunk)
        return chunk

    def write(self, chunk: bytes) -> Future[None]:
        if self.stream.closed():
            return _closed_write()
        self._pending = self.stream.write(self._frame(chunk))
        return _settled(self._pending)

    def finish(self) -> None:
        if self._remaining and not self.stream.closed():
            self.stream.close()
            raise httputil.HTTPOutputError(
                f"Tried to write {self._remaining} bytes less than Content-Length"
            )
        if self._chunking and not self.stream.closed():
            self._pending = self.stream.write(b"0\r\n\r\n")
        self.write_finished = True
        if not self.read_finished:  # closing is the only way not to read the rest
            self.disconnect = True
        if self._pending is None or self._pending.done():
            self._end()
        else:
            self._pending.add_done_callback(self._end)

    def _end(self, _: object = None) -> None:
        self._close_callback = None
        if self.disconnect:
            self.stream.set_close_callback(None)
            self.stream.close()
        if not self.finished.done():
            self.finished.set_result(None)
