"""relay.errors: one exception tree under one root, in three branches (client-visible,
operator, internal); each client-visible class decides the status, the OpenAI error type
and the default code, and every such error renders the OpenAI envelope."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import relay
from relay import errors
from relay.errors import (
    CacheUnavailable,
    ClientError,
    ConfigError,
    InternalSignal,
    OperatorError,
    RelayError,
    RelayException,
    StoreError,
    UpstreamError,
    UpstreamHTTPError,
    UpstreamReportedError,
)

BRANCHES: tuple[type[RelayException], ...] = (RelayError, OperatorError, InternalSignal)


def _relay_exceptions() -> set[type[BaseException]]:
    """Every exception class defined in a module under ``relay/``, private ones included."""
    found: set[type[BaseException]] = set()
    for info in pkgutil.walk_packages(relay.__path__, "relay."):
        if info.name.endswith("__main__"):
            continue  # importing it runs the CLI
        module = importlib.import_module(info.name)
        found.update(
            value
            for value in vars(module).values()
            if inspect.isclass(value)
            and issubclass(value, BaseException)
            and value.__module__ == module.__name__
        )
    return found


RELAY_EXCEPTIONS = _relay_exceptions()


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# class → (status, type, default code)
TABLE: list[tuple[type[RelayError], int, str, str | None]] = [
    (errors.RelayError, 500, "server_error", None),
    (errors.ClientError, 400, "invalid_request_error", None),
    (errors.InvalidRequest, 400, "invalid_request_error", "invalid_request"),
    (errors.UnsupportedParameter, 400, "invalid_request_error", "unsupported_parameter"),
    (errors.Unauthorized, 401, "authentication_error", "invalid_api_key"),
    (errors.NotFound, 404, "invalid_request_error", "not_found"),
    (errors.MethodNotAllowed, 405, "invalid_request_error", "method_not_allowed"),
    (errors.PayloadTooLarge, 413, "invalid_request_error", "request_too_large"),
    (errors.UnsupportedMediaType, 415, "invalid_request_error", "unsupported_media_type"),
    (errors.MalformedHTTP, 400, "invalid_request_error", "malformed_http_request"),
    (errors.HeadersTooLarge, 431, "invalid_request_error", "request_header_fields_too_large"),
    (errors.CacheUnavailable, 503, "server_error", "cache_unavailable"),
    (errors.StoreError, 503, "server_error", "cache_unavailable"),
    (errors.StoreLocked, 503, "server_error", "cache_unavailable"),
    (errors.StoreCorrupt, 503, "server_error", "cache_unavailable"),
    (errors.NotACache, 503, "server_error", "cache_unavailable"),
    (errors.StoreFull, 503, "server_error", "cache_unavailable"),
    (errors.StoreIOError, 503, "server_error", "cache_unavailable"),
    (errors.StoreLatched, 503, "server_error", "cache_unavailable"),
    (errors.StoreUnreachable, 503, "server_error", "cache_unavailable"),
    (errors.StoreContention, 503, "server_error", "cache_unavailable"),
    (errors.LeaseLapsed, 503, "server_error", "cache_unavailable"),
    (errors.StoreBlocked, 503, "server_error", "cache_unavailable"),
    (errors.ShuttingDown, 503, "server_error", "shutting_down"),
    (errors.TooManyConnections, 503, "server_error", "too_many_connections"),
    (errors.UpstreamError, 502, "upstream_error", "bad_gateway"),
    (errors.UpstreamProtocolError, 502, "upstream_error", "upstream_protocol_error"),
    (errors.UpstreamFailed, 502, "upstream_error", "upstream_failed"),
    (errors.UpstreamTimeout, 504, "upstream_error", "upstream_timeout"),
]


@pytest.mark.parametrize(
    ("cls", "status", "kind", "code"), TABLE, ids=[c.__name__ for c, *_ in TABLE]
)
def test_each_class_renders_its_status_type_and_code(
    cls: type[RelayError], status: int, kind: str, code: str | None
) -> None:
    error = cls("what to fix")
    assert error.status == status
    assert error.envelope() == {
        "error": {"message": "what to fix", "type": kind, "param": None, "code": code}
    }
    assert str(error) == "what to fix"
    family = ClientError if status < 500 else (UpstreamError if status in (502, 504) else None)
    if family is not None and cls is not RelayError:
        assert issubclass(cls, family)


def test_every_relay_error_class_is_in_the_table() -> None:
    """A new error class gets its status, type and code pinned here."""
    found = {
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, RelayError)
    }
    assert found - {UpstreamHTTPError, UpstreamReportedError} == {c for c, *_ in TABLE}


def test_param_and_code_override_the_defaults() -> None:
    error = errors.InvalidRequest("bad", param="messages", code="custom")
    assert error.envelope()["error"] == {
        "message": "bad", "type": "invalid_request_error", "param": "messages", "code": "custom",
    }  # fmt: skip


def test_a_store_error_keeps_sqlite_s_code_apart_from_its_message() -> None:
    error = StoreError("cannot write /data/cache.sqlite", sqlite_error="SQLITE_FULL")
    assert isinstance(error, CacheUnavailable)
    assert error.sqlite_error == "SQLITE_FULL"
    assert "SQLITE_FULL" not in error.envelope()["error"]["message"]
    assert StoreError("x").sqlite_error is None


def test_an_upstream_http_error_keeps_the_upstream_status_and_envelope() -> None:
    envelope = {"error": {"message": "Unsupported value: 'temperature'", "type":
                "invalid_request_error", "param": "temperature", "code": "unsupported_value"}}  # fmt: skip
    error = UpstreamHTTPError(400, envelope)
    assert (error.status, error.error_type, error.param, error.code) == (
        400, "invalid_request_error", "temperature", "unsupported_value",
    )  # fmt: skip
    assert error.message == "Unsupported value: 'temperature'"
    assert error.envelope() is envelope


@pytest.mark.parametrize("envelope", [{}, {"error": "overloaded"}, {"error": {}}])
def test_an_upstream_http_error_without_a_usable_error_names_the_status(
    envelope: dict[str, object],
) -> None:
    error = UpstreamHTTPError(503, envelope)
    assert (error.status, error.error_type, error.message) == (
        503, "upstream_error", "upstream answered HTTP 503",
    )  # fmt: skip
    assert (error.code, error.param) == ("http_503", None)  # logged and counted so


@pytest.mark.parametrize("code", [None, "", 7, ["x"]])
def test_an_upstream_4xx_without_a_string_code_is_counted_by_its_status(code: object) -> None:
    envelope = {"error": {"message": "no", "type": "invalid_request_error", "code": code}}
    error = UpstreamHTTPError(429, envelope)
    assert error.code == "http_429"
    assert error.envelope() is envelope  # the client still gets the upstream's own words


def test_a_reported_error_is_relayed_as_the_provider_wrote_it() -> None:
    envelope = {"error": {"message": "rate limited", "type": "x", "param": None, "code": "rl"}}
    error = UpstreamReportedError(envelope)
    assert error.envelope() is envelope
    assert (error.message, error.code, error.status) == ("rate limited", "rl", 502)
    # a code that is not a string is not relayed as one: the class default stands in
    assert UpstreamReportedError({"error": {"message": "m", "code": 7}}).code == "upstream_failed"


@pytest.mark.parametrize(
    ("error", "message"),
    [("overloaded", "overloaded"), (None, "the upstream reported an error"),
     ("", "the upstream reported an error")],
)  # fmt: skip
def test_a_reported_error_that_is_not_an_object_gets_openai_s_shape(
    error: object, message: str
) -> None:
    reported = UpstreamReportedError({"error": error})
    assert reported.envelope() == {
        "error": {"message": message, "type": "upstream_error", "param": None, "code": None}
    }
    assert (reported.message, reported.code) == (message, "upstream_failed")


def test_a_config_error_never_reaches_a_client() -> None:
    assert not issubclass(ConfigError, RelayError)


def test_the_walk_reaches_every_package() -> None:
    """Not a vacuous walk: it finds classes in the subpackages, private ones too."""
    names = {_name(cls) for cls in RELAY_EXCEPTIONS}
    assert {
        "relay.transport.upstream.ClientGone",
        "relay.core.canonical.CanonicalRefused",
        "relay.storage.schema.SchemaRefused",
        "relay.ops.admin_client.AdminUnavailable",
        "relay.core.planner._Rejected",
        "relay.http.request_body._UnrepresentableNumber",
    } <= names
    assert len(RELAY_EXCEPTIONS) > 40


@pytest.mark.parametrize("cls", sorted(RELAY_EXCEPTIONS, key=str), ids=_name)
def test_every_exception_the_relay_defines_descends_from_the_root(
    cls: type[BaseException],
) -> None:
    assert issubclass(cls, RelayException)
    branches = {branch for branch in BRANCHES if issubclass(cls, branch)}
    if cls is RelayException:
        assert not branches
        return
    assert branches, f"{_name(cls)} is in no branch: derive it from one of {BRANCHES}"
    # Internal signals are never also shown to a client or an operator; the one overlap
    # of the other two is the store's faults (a client's 503, the operator's to fix).
    assert branches == {InternalSignal} or InternalSignal not in branches
    if branches == {RelayError, OperatorError}:
        assert issubclass(cls, StoreError)


def test_a_builtin_base_is_kept_only_where_code_catches_by_it() -> None:
    """``json``'s parse hooks must raise ValueError, and a server's start fails on a taken
    port with an OSError; nothing else needs a builtin base (a new one is added here with
    the catch site that relies on it)."""
    builtin = {
        _name(cls): base.__name__
        for cls in RELAY_EXCEPTIONS
        for base in cls.__mro__
        if base.__module__ == "builtins" and base not in (Exception, BaseException, object)
    }
    assert builtin == {
        "relay.http.request_body._UnrepresentableNumber": "ValueError",
        "relay.errors.ListenError": "OSError",
    }


# dotted name → its branch: the operator's and the internal classes named in the design
BRANCH_OF: list[tuple[str, type[RelayException]]] = [
    ("relay.errors.ConfigError", OperatorError),
    ("relay.errors.ListenError", OperatorError),
    ("relay.errors.SnapshotRefused", OperatorError),
    ("relay.core.resources.BudgetTooSmall", ConfigError),
    ("relay.settings.crashpoints.CrashPointSpecError", ConfigError),
    ("relay.ops.admin_client.AdminUnavailable", OperatorError),
    ("relay.storage.schema.SchemaRefused", OperatorError),
    ("relay.storage.schema.SchemaTooNew", OperatorError),
    ("relay.storage.sqlite_copy.CopyFailed", OperatorError),
    ("relay.errors.StoreError", OperatorError),
    ("relay.errors.StoreLatched", OperatorError),
    ("relay.transport.upstream.ClientGone", InternalSignal),
    ("relay.transport.upstream.StreamFinished", InternalSignal),
    ("relay.core.canonical.CanonicalRefused", InternalSignal),
    ("relay.core.canonical.CanonicalLimitExceeded", InternalSignal),
    ("relay.core.canonical.NotCanonicalizable", InternalSignal),
    ("relay.pipeline.base.PipelineStateError", InternalSignal),
    ("relay.core.records.StoredSizeExceeded", InternalSignal),
    ("relay.upstream.models.ModelsUnavailable", InternalSignal),
    ("relay.upstream.model_list.MalformedModelList", InternalSignal),
]


@pytest.mark.parametrize(("name", "branch"), BRANCH_OF, ids=[n for n, _ in BRANCH_OF])
def test_each_class_sits_on_its_branch(name: str, branch: type[RelayException]) -> None:
    module, _, attr = name.rpartition(".")
    cls = getattr(importlib.import_module(module), attr)
    assert issubclass(cls, branch)
    assert cls in RELAY_EXCEPTIONS  # the walk saw it too
    client_visible = issubclass(cls, RelayError)
    assert client_visible == issubclass(cls, StoreError)  # only the store's reach a client


def test_catching_a_branch_catches_its_members() -> None:
    """What the branches are for: one ``except`` per audience."""
    from relay.core.canonical import NotCanonicalizable
    from relay.storage.schema import SchemaTooNew

    with pytest.raises(InternalSignal):
        raise NotCanonicalizable("number")
    with pytest.raises(OperatorError):
        raise SchemaTooNew("written by a newer relay")
    with pytest.raises(RelayException):
        raise errors.NotFound("no such route")
    with pytest.raises(OperatorError) as store:
        raise errors.StoreFull("the disk is full")
    assert isinstance(store.value, errors.StoreFull)
    assert (store.value.status, store.value.code) == (503, "cache_unavailable")  # unchanged
