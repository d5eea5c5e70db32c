"""Shared handler behaviour: bearer auth, OpenAI error envelopes, safe logging."""

from __future__ import annotations

import json
import logging
from asyncio import Future
from dataclasses import dataclass
from http.client import responses
from types import TracebackType
from typing import Any

from tornado.web import HTTPError, RequestHandler

from relay.app.runtime import Runtime
from relay.errors import (
    MethodNotAllowed,
    NotFound,
    RelayError,
    ShuttingDown,
    Unauthorized,
    UnsupportedParameter,
)
from relay.http.auth import bearer_matches
from relay.http.routes import served
from relay.observability import log
from relay.ops.hooks import request_finished


@dataclass
class ResponseState:
    """What of the response has left, kept by the handler itself (Tornado's own flags
    are private)."""

    headers_sent: bool = False  # the first flush wrote the status line and headers
    finished: bool = False  # finish() ran: nothing more can be written


class BaseHandler(RequestHandler):
    requires_auth = True
    routed = True  # this handler's route is a fixed path, so its path is safe to log

    _counted = False  # this request's outcome is in the metrics (relay.ops)
    outcome_code: str | None = None  # a failure's reason code, for the metrics

    def initialize(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.arrived_at = runtime.clock.monotonic()
        self.response_state = ResponseState()

    def flush(self, include_footers: bool = False) -> Future[None]:
        # Every write of the headers goes through here (finish() flushes too).
        self.response_state.headers_sent = True
        return super().flush(include_footers)

    def finish(self, chunk: str | bytes | dict[str, Any] | None = None) -> Future[None]:
        done = super().finish(chunk)
        self.response_state.finished = True
        return done

    def set_default_headers(self) -> None:
        # Tornado calls this from __init__, before initialize(), and again on clear().
        if not hasattr(self, "request_id"):
            self.request_id = Runtime.new_id("req_")
        self.set_header("Content-Type", "application/json")
        self.set_header("x-request-id", self.request_id)
        self.set_header("Cache-Control", "no-store")

    def prepare(self) -> None:
        if self.requires_auth and not bearer_matches(
            self.request.headers.get("Authorization"), self.runtime.relay_token
        ):
            raise Unauthorized(self._token_hint())
        if self.runtime.shutting_down:
            raise ShuttingDown("the relay is shutting down; retry against the restarted relay")

    def _token_hint(self) -> str:
        if self.runtime.config.relay_token is not None:
            where = "the value of RELAY_TOKEN in the relay's environment"
        else:
            where = (
                "in the file relay-token in the relay's data directory (RELAY_DATA_DIR, "
                "default ./data; the relay prints the file's path when it starts)"
            )
        return (
            f"missing or wrong relay token: send 'Authorization: Bearer <token>'; the token "
            f"is {where}"
        )

    def send_relay_error(self, err: RelayError) -> None:
        self.clear()
        self.set_status(err.status)
        self.finish(json.dumps(err.envelope()))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, RelayError):
            err = exc
        elif isinstance(exc, HTTPError) and exc.status_code == 405:
            err = MethodNotAllowed(f"{self.request.method} is not allowed on {self.request.path}")
        elif isinstance(exc, HTTPError) and exc.status_code < 500:
            err = RelayError(
                exc.log_message or exc.reason or responses.get(exc.status_code, "Unknown")
            )
            err.status = exc.status_code
            err.error_type = "invalid_request_error"
        else:
            err = RelayError(
                f"internal relay error; see the relay log for request id {self.request_id}"
            )
        self.set_header("Content-Type", "application/json")
        self.set_status(err.status)
        self.finish(json.dumps(err.envelope()))

    def log_exception(
        self,
        typ: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Client and upstream faults are expected: one line with a reason code, no traceback
        # (a traceback's locals could carry request bodies).
        if isinstance(value, RelayError):
            self.outcome_code = value.code
            if isinstance(value, UnsupportedParameter):
                self.runtime.metrics.parameter_refused(value.param)
            log.event(
                "request_failed",
                request_id=self.request_id,
                status=value.status,
                code=value.code,
                path=self._log_path,
            )
        elif isinstance(value, HTTPError):
            log.event("request_rejected", request_id=self.request_id, status=value.status_code)
        else:
            # The type and code path only: an exception's message can quote the input.
            log.failure(
                "unexpected_error",
                value if value is not None else RuntimeError(),
                tb,
                request_id=self.request_id,
                path=self._log_path,
            )

    def count_request(self, code: str | None = None) -> None:
        """Count this request once in the metrics (finished, or its client gone)."""
        if not self._counted:
            self._counted = True
            status = self.get_status()
            request_finished(self.runtime, self.request.path, status, code or self.outcome_code)

    @property
    def _log_path(self) -> str:
        """The path, when it is one of the relay's routes; a client chooses any other."""
        return self.request.path if self.routed else "<unrouted>"

    def on_finish(self) -> None:
        self.count_request()
        log.event(
            "request_done",
            level=logging.DEBUG,
            request_id=self.request_id,
            method=self.request.method,
            path=self._log_path,
            status=self.get_status(),
            ms=round(self.request.request_time() * 1000),
        )


class HealthHandler(BaseHandler):
    requires_auth = False

    def get(self) -> None:
        self.finish(b'{"status":"ok"}')


class NotFoundHandler(BaseHandler):
    requires_auth = False
    routed = False

    def prepare(self) -> None:
        raise NotFound(
            f"no route {self.request.method} {self.request.path}; the relay serves {served()}"
        )
