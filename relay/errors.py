"""The relay's one exception tree.

Every exception the relay defines descends from :class:`RelayException` (a test walks
every module under ``relay/`` to keep it so), in three branches by who reads it::

    RelayException
    ├── RelayError              a client sees it: status, OpenAI error type, envelope
    │   ├── ClientError         4xx: InvalidRequest, UnsupportedParameter, Unauthorized,
    │   │                       NotFound, MethodNotAllowed, PayloadTooLarge, …
    │   ├── CacheUnavailable    503
    │   │   └── StoreError      (also an OperatorError) StoreLocked, StoreCorrupt
    │   │                       (NotACache), StoreFull, StoreIOError, StoreLatched, …
    │   ├── ShuttingDown, TooManyConnections    503
    │   └── UpstreamError       502/504/upstream's status: UpstreamProtocolError,
    │                           UpstreamFailed (UpstreamReportedError), UpstreamTimeout, …
    ├── OperatorError           stops startup or an operator command; never a client's
    │   ├── ConfigError         BudgetTooSmall, CrashPointSpecError
    │   ├── ListenError         (also an OSError)
    │   ├── SnapshotRefused     (relay.errors and relay.ops.snapshot)
    │   ├── SchemaRefused       SchemaTooNew
    │   ├── CopyFailed, AdminUnavailable
    │   └── StoreError          (above: a store fault is both the client's 503 and the
    │                           operator's to fix)
    └── InternalSignal          raised and caught inside the relay; the catcher decides
        ├── ClientGone, StreamFinished      (transport)
        ├── CanonicalRefused    CanonicalLimitExceeded, NotCanonicalizable
        ├── PipelineStateError, StoredSizeExceeded, ModelsUnavailable, MalformedModelList
        └── private control flow: the planner's, the predictor's, the HTTP server's, …

A :class:`RelayError`'s subclass decides the HTTP status and the OpenAI error ``type``;
:meth:`RelayError.envelope` renders the OpenAI error envelope. Messages say what to fix
and never carry credentials, tokens or ciphertext. A class keeps a builtin base (as
``ValueError``) only where code catches it by that base.
"""

from __future__ import annotations

from typing import Any


class RelayException(Exception):
    """The root: every exception the relay defines descends from it."""


class RelayError(RelayException):
    """Base of every error the relay reports to a client."""

    status = 500
    error_type = "server_error"
    default_code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code

    def envelope(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class OperatorError(RelayException):
    """For the operator: it stops startup or an operator command (``relay cache ...``,
    ``relay admin``), or needs the operator's hand; the message says what to do."""


class InternalSignal(RelayException):
    """Raised and caught inside the relay: the catch site turns it into a path, a log line
    or a :class:`RelayError`; it never reaches a client or an operator as such."""


# --- client faults: 4xx -------------------------------------------------------------


class ClientError(RelayError):
    """The request is wrong; resending it unchanged will fail again."""

    status = 400
    error_type = "invalid_request_error"


class InvalidRequest(ClientError):
    default_code = "invalid_request"


class UnsupportedParameter(ClientError):
    default_code = "unsupported_parameter"


class Unauthorized(ClientError):
    status = 401
    error_type = "authentication_error"
    default_code = "invalid_api_key"


class NotFound(ClientError):
    status = 404
    default_code = "not_found"


class MethodNotAllowed(ClientError):
    status = 405
    default_code = "method_not_allowed"


class PayloadTooLarge(ClientError):
    status = 413
    default_code = "request_too_large"


class UnsupportedMediaType(ClientError):
    status = 415
    default_code = "unsupported_media_type"


class MalformedHTTP(ClientError):
    """The HTTP/1 framing itself is wrong (request line, headers, body framing)."""

    default_code = "malformed_http_request"


class HeadersTooLarge(ClientError):
    status = 431
    default_code = "request_header_fields_too_large"


# --- relay-local faults -------------------------------------------------------------


class CacheUnavailable(RelayError):
    """The cache could not persist a safety record, so forwarding would be unsafe."""

    status = 503
    error_type = "server_error"
    default_code = "cache_unavailable"


class StoreError(CacheUnavailable, OperatorError):
    """The replay store (SQLite) failed. Messages name the database path and SQLite's
    error code only: never payload JSON, secrets or SQL parameters."""

    def __init__(self, message: str, *, sqlite_error: str | None = None):
        super().__init__(message)
        self.sqlite_error = sqlite_error  # e.g. "SQLITE_FULL"; None when SQLite gave none


class StoreLocked(StoreError):
    """Another process (or connection) owns the store's exclusive lock."""


class StoreCorrupt(StoreError):
    """The file is damaged, not SQLite, not a reasoning cache, or from a newer relay."""


class NotACache(StoreCorrupt):
    """The file is no reasoning cache at all: empty, not SQLite, an empty SQLite database
    or another application's (``relay cache verify`` exits 3 for it)."""


class StoreFull(StoreError):
    """The disk, or the database's size limit, is full (SQLITE_FULL)."""


class StoreIOError(StoreError):
    """The operating system refused a read or write (I/O, permissions, cannot open)."""


class StoreLatched(StoreError):
    """The cache stopped after a safety write failed twice (``.guard`` beside the store):
    nothing that needs a safety record is forwarded, and no relay reuses the store until
    the operator deletes the guard."""


class StoreBlocked(StoreError):
    """``.blocked`` beside the store: an offline backup or restore into it has not finished,
    so the file may be incomplete; no relay opens it (design §7 backups)."""


class StoreUnreachable(StoreError):
    """The shared PostgreSQL store cannot be reached (down, restarting, the network): a
    request needing a safety write gets 503; the next one after it is back reconnects."""


class StoreContention(StoreError):
    """A shared-store transaction lost a race (a deadlock or a serialization failure):
    the local transaction is retried a bounded number of times, never the model request."""


class LeaseLapsed(StoreError):
    """This relay's lease on the shared store lapsed: another instance may have poisoned
    its intents. The relay registers again as a new instance before its next dispatch."""


class ShuttingDown(RelayError):
    status = 503
    error_type = "server_error"
    default_code = "shutting_down"


class TooManyConnections(RelayError):
    """Over ``RELAY_MAX_CONNECTIONS``: answered at once, without reading the request."""

    status = 503
    error_type = "server_error"
    default_code = "too_many_connections"


# --- upstream faults: 502 / 504 / upstream's own status ----------------------------


class UpstreamError(RelayError):
    """The upstream could not be used: unreachable, broken stream, malformed answer."""

    status = 502
    error_type = "upstream_error"
    default_code = "bad_gateway"


class UpstreamProtocolError(UpstreamError):
    """The upstream answered, but not in a shape the relay can trust."""

    default_code = "upstream_protocol_error"


class UpstreamFailed(UpstreamError):
    """The upstream reported that the generation failed (``response.failed``/``error``)."""

    default_code = "upstream_failed"


class UpstreamReportedError(UpstreamFailed):
    """A Chat upstream ended its answer with its own error envelope (an SSE ``{"error":
    ...}`` frame, or a JSON body holding only an error): relayed as the provider wrote it."""

    def __init__(self, envelope: dict[str, Any]):
        err = envelope.get("error")
        if not isinstance(err, dict):  # e.g. {"error": "overloaded"}: give it OpenAI's shape
            text = str(err) if err else "the upstream reported an error"
            err = {"message": text, "type": "upstream_error", "param": None, "code": None}
            envelope = {"error": err}
        code = err.get("code")
        super().__init__(
            str(err.get("message") or "the upstream reported an error"),
            code=code if isinstance(code, str) else None,
        )
        self._envelope = envelope

    def envelope(self) -> dict[str, Any]:
        return self._envelope


class UpstreamTimeout(UpstreamError):
    status = 504
    default_code = "upstream_timeout"


class UpstreamHTTPError(UpstreamError):
    """An HTTP error answer from upstream; it keeps the upstream's status and envelope.

    Its :attr:`code` (logs and metrics, never the client's envelope) is the upstream's own
    string code, else ``http_<status>``: a 4xx with ``"code": null`` is not a bad gateway.
    """

    def __init__(self, status: int, envelope: dict[str, Any]):
        err = envelope.get("error") if isinstance(envelope.get("error"), dict) else {}
        assert isinstance(err, dict)
        message = str(err.get("message") or f"upstream answered HTTP {status}")
        code = err.get("code")
        own = code if isinstance(code, str) and code else f"http_{status:d}"
        super().__init__(message, param=err.get("param"), code=own)
        self.status = status
        self.error_type = str(err.get("type") or "upstream_error")
        self._envelope = envelope

    def envelope(self) -> dict[str, Any]:
        return self._envelope


class SnapshotRefused(OperatorError):
    """A copy of the store was refused or failed: ``relay cache backup|restore`` (the
    destination exists, the copy could not be made) or ``relay admin snapshot`` (one is
    running, the directory is not private). ``code`` is a fixed reason code (the admin
    protocol's error code); the message says what to do. Never reaches a client."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ConfigError(OperatorError):
    """A configuration value is invalid; the message names the variable and what it accepts.

    Not a :class:`RelayError`: it stops startup and never reaches a client.
    """


class ListenError(OperatorError, OSError):
    """A listener could not be opened (a port in use, an address this host lacks); the
    message names the address and the setting. Raised before the store is touched. Still
    an ``OSError``: a caller starting a server catches a bind failure as one."""
