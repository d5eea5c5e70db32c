"""relay.observability.log: both renderings, one line per record, and nothing a value or an exception
message could smuggle in (input quoted by an exception, a library's arguments)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.observability import log
from scenarios.relaylog import parse_relay_events

SECRET = "sk-never-in-a-log-0123456789"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """configure() replaces the root handlers: put pytest's (and the levels) back after.
    The relay logger is left to the root's level, as in ``relay serve`` (the suite's log
    scan sets it to DEBUG)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    access = logging.getLogger("tornado.access").level
    relay_level = log.LOGGER.level
    log.LOGGER.setLevel(logging.NOTSET)
    yield
    log.LOGGER.setLevel(relay_level)
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("tornado.access").setLevel(access)


def render(fmt: str, record: logging.LogRecord) -> str:
    formatter = log.JsonFormatter() if fmt == "json" else log.TextFormatter()
    return formatter.format(record)


def event_record(name: str, **fields: object) -> logging.LogRecord:
    """The record log.event would emit (captured from the relay logger)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    log.LOGGER.addHandler(keep)
    level = log.LOGGER.level
    log.LOGGER.setLevel(logging.DEBUG)
    try:
        log.event(name, logging.INFO, **fields)
    finally:
        log.LOGGER.removeHandler(keep)
        log.LOGGER.setLevel(level)
    [record] = records
    return record


def library_record(
    msg: str, *args: object, exc: BaseException | None = None, name: str = "tornado.general"
) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, args, exc_info)


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


# --- text --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "rendered"),
    [
        ({"request_id": "req_1", "status": 400}, "request_id=req_1 status=400"),
        ({"reason": None, "ok": True}, "reason=None ok=True"),
        ({"rejected": ["a", "b"]}, "rejected=\"['a', 'b']\""),  # live/context.py reads it
        ({"model": "gpt 5"}, "model='gpt 5'"),
        ({"model": ""}, "model=''"),
        ({"model": "a\nINFO relay forged"}, "model='a\\nINFO relay forged'"),
        ({"model": "\x1b[31mred"}, "model='\\x1b[31mred'"),
        ({"model": "\ud800"}, "model='\\ud800'"),
        ({"model": "x" * 200}, "model=" + "x" * 117 + "..."),
    ],
)
def test_text_fields(fields: dict[str, object], rendered: str) -> None:
    line = render("text", event_record("probe", **fields))
    assert line.endswith(" INFO relay probe " + rendered), line


@given(st.text(max_size=300))
def test_text_is_one_line_and_reads_back(value: str) -> None:
    line = render("text", event_record("probe", request_id="req_1", value=value))
    assert "\n" not in line and "\r" not in line
    line.encode("utf-8")  # no lone surrogate reaches the stream
    [(name, fields)] = parse_relay_events(line)
    assert name == "probe" and fields["request_id"] == "req_1"
    assert fields["value"] == log._clip(value)


# --- json --------------------------------------------------------------------------------


def test_json_line_has_the_fixed_keys_first() -> None:
    line = render("json", event_record("cache_plan", request_id="req_9", replayed=2, rejected=[]))
    value = json.loads(line)
    assert list(value)[:4] == ["ts", "level", "event", "request_id"]
    assert value["ts"].endswith("Z") and "T" in value["ts"]
    assert (value["level"], value["event"], value["request_id"]) == ("info", "cache_plan", "req_9")
    assert (value["replayed"], value["rejected"]) == (2, [])


def test_json_request_id_is_null_when_absent_and_fields_cannot_shadow_fixed_keys() -> None:
    value = json.loads(render("json", event_record("relay_stopped", ts="x", event="y")))
    assert value["request_id"] is None and value["event"] == "relay_stopped"
    assert (value["field_ts"], value["field_event"]) == ("x", "y")


@given(
    st.one_of(
        st.text(max_size=300),
        st.integers(),
        st.booleans(),
        st.none(),
        st.lists(st.text(max_size=20), max_size=40),
    )
)
def test_json_is_one_ascii_line_and_reads_back(value: object) -> None:
    line = render("json", event_record("probe", value=value))
    assert line.isascii() and "\n" not in line
    back = json.loads(line)["value"]
    if isinstance(value, str):
        assert back == log._clip(value)
    elif isinstance(value, list):
        assert back == [log._clip(item) for item in value[:32]]
    else:
        assert back == value


# --- exceptions and library records -------------------------------------------------------


@pytest.mark.parametrize("fmt", log.FORMATS)
def test_a_failure_names_the_type_and_place_never_the_message(fmt: str) -> None:
    with pytest.raises(UnicodeEncodeError) as caught:
        f"{SECRET}\udcff".encode()
    exc = caught.value
    assert "\\udcff" in str(exc)  # its message quotes the character (and position)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign,assignment]
    log.LOGGER.addHandler(handler)
    try:
        log.failure("unexpected_error", exc, request_id="req_2")
    finally:
        log.LOGGER.removeHandler(handler)
    [record] = records
    line = render(fmt, record)
    assert "UnicodeEncodeError" in line and "test_log.py:" in line
    assert "udcff" not in line and SECRET not in line and "encode" not in line.split("where")[0]
    assert record.levelno == logging.ERROR


@pytest.mark.parametrize(
    ("msg", "args", "shown"),
    [
        (
            "Malformed HTTP message from %s: %s",
            ("127.0.0.1", SECRET),
            "Malformed HTTP message from",
        ),
        ("Uncaught exception", (), "Uncaught exception"),
        (f"Exception in callback <Handle {SECRET}>\nsource_traceback", (), "Exception in callback"),
        (
            f"Task was destroyed but it is pending!\ntask: <Task {SECRET}>",
            (),
            "Task was destroyed but it is pending",
        ),
        ("%s", (SECRET,), ""),
        ("'quoted %r' here", (SECRET,), ""),
    ],
)
@pytest.mark.parametrize("fmt", log.FORMATS)
def test_a_library_record_shows_its_template_only(
    fmt: str, msg: str, args: tuple[object, ...], shown: str
) -> None:
    record = library_record(msg, *args, exc=raised(ValueError(SECRET)))
    line = render(fmt, record)
    assert SECRET not in line and "Handle" not in line
    if fmt == "json":
        value = json.loads(line)
        assert (value["event"], value["logger"]) == ("library_log", "tornado.general")
        assert (value["message"], value["error"]) == (shown, "ValueError")
    else:
        assert " WARNING tornado.general library_log logger=tornado.general message=" in line
        assert "error=ValueError" in line


def test_non_string_messages_are_named_by_type() -> None:
    record = library_record("x")
    record.msg = {"secret": SECRET}
    assert SECRET not in render("text", record) and "dict" in render("text", record)


# --- the handler ---------------------------------------------------------------------------


def test_configure_writes_the_chosen_format(restore_logging: None) -> None:
    out = io.StringIO()
    log.configure("info", "json", out)
    log.event("relay_stopped")
    log.event("hidden", level=logging.DEBUG)
    lines = out.getvalue().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["relay_stopped"]
    assert not logging.getLogger("tornado.access").isEnabledFor(logging.CRITICAL)


def test_configure_refuses_an_unknown_format(restore_logging: None) -> None:
    with pytest.raises(ValueError, match="log format"):
        log.configure("info", "yaml")


class AsciiStream(io.StringIO):
    encoding = "ascii"


def test_a_stream_that_cannot_encode_a_value_gets_it_escaped(restore_logging: None) -> None:
    out = AsciiStream()
    log.configure("info", "text", out)
    log.event("probe", model="caf\u00e9")
    assert out.getvalue().rstrip().endswith("model=caf\\xe9")


class BrokenStream(io.StringIO):
    def write(self, text: str) -> int:
        if text.startswith("relay:"):
            return super().write(text)
        raise UnicodeEncodeError("ascii", text, 0, 1, "refused")


def test_a_failed_write_reports_the_error_type_only(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = BrokenStream()
    log.configure("info", "text", out)
    log.event("probe", model=SECRET)
    assert out.getvalue() == "relay: a log record could not be written (UnicodeEncodeError)\n"
    assert SECRET not in capsys.readouterr().err  # logging's own report was not printed
