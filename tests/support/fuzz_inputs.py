"""Hypothesis strategies for adversarial input to the relay.

Structure-aware: a case starts as a plausible request (a Chat Completions or Responses
body, a cache-API query, an HTTP/1.1 request) and is then mutated where it hurts: a field
replaced by another type, by odd Unicode (lone surrogates included), by a number no
parser can hold, by nesting as deep as parsers go; keys removed or added; the JSON text
itself cut or re-encoded; and, for raw HTTP, the request line, the headers and the body's
framing broken in the ways a parser must refuse.

Cheap to draw, because the fuzz sends thousands of cases against one relay in the same
process: values mostly come from pools of plausible and hostile ones (one draw each) and
only sometimes from open-ended strategies. Values ``json.dumps`` cannot write (a
5000-digit integer, ``1e400``, 1000 nested arrays) stand in the structure as
:class:`Splice` placeholders and are spliced into the text.
"""

from __future__ import annotations

import copy
import dataclasses
import gzip
import itertools
import json
import zlib
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from hypothesis import strategies as st

# --- raw JSON pieces ---------------------------------------------------------------


@dataclass(frozen=True)
class Splice:
    """JSON text to put where this placeholder stands."""

    text: str


def encode(value: Any, *, ascii_only: bool, compact: bool) -> str:
    """``value`` as JSON text, each :class:`Splice` replaced by its text."""
    splices: list[str] = []

    def placeholder(obj: object) -> str:
        if not isinstance(obj, Splice):
            raise TypeError(type(obj).__name__)
        splices.append(obj.text)
        return f"@@splice:{len(splices) - 1}@@"

    separators = (",", ":") if compact else (", ", ": ")
    text = json.dumps(value, ensure_ascii=ascii_only, separators=separators, default=placeholder)
    for index, piece in enumerate(splices):
        text = text.replace(f'"@@splice:{index}@@"', piece, 1)
    return text


def _deep(depth: int, array: bool) -> Splice:
    if array:
        return Splice("[" * depth + "1" + "]" * depth)
    return Splice('{"a":' * depth + "null" + "}" * depth)


TEXTS: Final = (
    "hi", "Write a haiku about the sea.", "CALL_TOOL now", "  ", "", "0", "null", "true",
    "é", "日本語のテキスト", "\U0001f600", "\u202e\u2066", "\x00", "\x00\x01\x1f", "\u2028\u2029",
    "\ufeff", "\uffff", "\U0010ffff",
    "\ud800", "\udc00", "a\udbffb", "\ud83d", "\ude00\ud83d",  # lone surrogates
    "\ud83d\ude00",  # a pair as two code units: fine once joined
    "\\ud800", "\\", '"}],"x":1,"a":["', "</script>", "%s%n", "{{7*7}}",
    "x" * 70_000, "é" * 500, "\U0001f600" * 300,
)  # fmt: skip
SPLICES: Final = (
    Splice("9" * 4301),  # one digit over Python's int limit
    Splice("-" + "1" * 6000),
    Splice("1e400"),
    Splice("-1E+999"),
    Splice("1" + "0" * 400 + ".5"),
    Splice("123456789" * 40),  # 360 digits: a Python int, beyond any double
    Splice("1e-400"),  # underflows to 0.0: fine
    Splice("NaN"),
    Splice("-Infinity"),
    _deep(900, True),
    _deep(985, True),
    _deep(1000, False),
    _deep(1200, True),
    _deep(5000, True),
    _deep(60, False),
)
NUMBERS: Final = (
    0, 1, -1, 2, 16, 1000, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30,
    0.5, -0.0, 1e308, -1e308, 5e-324, 2.5, 1.0000000000000002,
)  # fmt: skip
HOSTILE: Final[tuple[object, ...]] = (
    None, True, False, [], {}, [None], {"": None}, [[[[[]]]]], {"a": {"b": {"c": {}}}},
    *NUMBERS, *TEXTS[:24], *SPLICES,
)  # fmt: skip

text = (
    st.sampled_from(TEXTS) | st.sampled_from(TEXTS) | st.sampled_from(TEXTS) | st.text(max_size=12)
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)


# --- mutations of a plausible body ------------------------------------------------------


def _slots(value: Any, out: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Every (container, key) in ``value``: the places a mutation can act on."""
    if isinstance(value, dict):
        for key, item in value.items():
            out.append((value, key))
            _slots(item, out)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.append((value, index))
            _slots(item, out)
    return out


EXTRA_KEYS: Final = (
    "n", "stop", "logit_bias", "functions", "audio", "modalities", "prediction",
    "web_search_options", "input", "messages", "previous_response_id", "background",
    "conversation", "truncation", "reasoning", "include", "text", "__proto__", "", "\ud800",
)  # fmt: skip
OPS: Final = ("replace", "replace", "replace", "delete", "add", "wrap-list", "wrap-object")
# A step is (operation, where, value); "where" picks a slot modulo their number. Mostly one
# draw from the pooled steps, sometimes an open-ended value.
STEPS: Final = tuple(itertools.product(OPS, (0, 1, 2, 3, 5, 7, 11, 13, 17, 19, 23, 29), HOSTILE))
mutations = st.lists(
    st.sampled_from(STEPS)
    | st.sampled_from(STEPS)
    | st.tuples(st.sampled_from(OPS), st.integers(0, 2**20), json_values),
    max_size=3,
)


def mutate(body: dict[str, Any], steps: list[tuple[str, int, Any]]) -> dict[str, Any]:
    """``body`` (a copy: strategies hand out shared objects) with each step applied at
    the slot its number picks."""
    body = copy.deepcopy(body)
    for op, where, drawn in steps:
        value = copy.deepcopy(drawn)
        slots = _slots(body, [])
        if op == "add" or not slots:
            containers = [body] + [c[k] for c, k in slots if isinstance(c[k], dict)]
            target = containers[where % len(containers)]
            target[EXTRA_KEYS[where % len(EXTRA_KEYS)]] = value
            continue
        container, key = slots[where % len(slots)]
        if op == "replace":
            container[key] = value
        elif op == "delete":
            del container[key]
        elif op == "wrap-list":  # the same value, one level deeper
            container[key] = [container[key]]
        else:
            container[key] = {"x": container[key]}
    return body


def _body(required: dict[str, Any], options: list[tuple[str, Any]]) -> dict[str, Any]:
    return {**required, **dict(options)}


# --- Chat Completions -----------------------------------------------------------------

MODELS: Final = ("gpt-5",) * 6 + (
    "gpt-5-mini",
    "o3",
    "gpt-4.1",
    "gpt-5-chat-latest",
    "",
    "nope",
    "\ud800",
    "gpt-5 ",
)
SCHEMA: Final = {"type": "object", "properties": {"path": {"type": "string"}}}
CALL: Final = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "read", "arguments": '{"path":"a"}'},
}


def _chat_messages() -> tuple[dict[str, Any], ...]:
    """Plausible messages of every role and shape, over the text pool."""
    out: list[dict[str, Any]] = []
    for n, said in enumerate(TEXTS):
        out.append({"role": "user", "content": said})
        if n % 3 == 0:
            out.append({"role": "user", "content": [{"type": "text", "text": said}]})
        if n % 4 == 0:
            out.append({"role": "assistant", "content": said})
            out.append({"role": ("system", "developer")[n % 2], "content": said})
        if n % 5 == 0:
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [CALL],
                    "reasoning_content": said,
                }
            )
            out.append({"role": "tool", "tool_call_id": "call_1", "content": said})
    out.append({"role": "user", "content": [{"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]})  # fmt: skip
    return tuple(out)


CHAT_MESSAGES: Final = _chat_messages()
CHAT_OPTIONS: Final = tuple(
    (name, value)
    for name, values in {
        "stream": (True, False, True),
        "stream_options": ({"include_usage": True}, {"include_usage": False}),
        "max_tokens": (1, 16, 5000),
        "max_completion_tokens": (1, 256),
        "temperature": (0, 0.7, 2),
        "top_p": (0.1, 1),
        "n": (1,),
        "tools": (
            [{"type": "function", "function": {"name": "read", "parameters": SCHEMA}}],
            [{"type": "function", "function": {"name": "read"}},
             {"type": "function", "function": {"name": "write", "description": "w"}}],
        ),
        "tool_choice": ("auto", "none", "required", {"type": "function", "function": {"name": "read"}}),
        "parallel_tool_calls": (True, False),
        "reasoning_effort": ("minimal", "low", "medium", "high"),
        "response_format": ({"type": "text"}, {"type": "json_object"}),
        "user": ("u1", "é"),
        "metadata": ({"k": "v"}, {}),
        "seed": (1,),
        "store": (True, False),
    }.items()
    for value in values
)  # fmt: skip
chat_bodies = st.builds(
    _body,
    st.fixed_dictionaries(
        {"model": st.sampled_from(MODELS),
         "messages": st.lists(st.sampled_from(CHAT_MESSAGES), min_size=1, max_size=3)}
    ),
    st.lists(st.sampled_from(CHAT_OPTIONS), max_size=3),
)  # fmt: skip


# --- Responses ------------------------------------------------------------------------


def _response_items() -> tuple[dict[str, Any], ...]:
    out: list[dict[str, Any]] = []
    for n, said in enumerate(TEXTS):
        out.append({"role": "user", "content": said})
        if n % 3 == 0:
            out.append(
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": said}],
                }
            )
        if n % 4 == 0:
            out.append({"type": "message", "role": "assistant", "id": "msg_1",
                        "content": [{"type": "output_text", "text": said}]})  # fmt: skip
            out.append({"type": "function_call_output", "call_id": "call_1", "output": said})
        if n % 5 == 0:
            out.append(
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [],
                    "encrypted_content": said or "gAAAAAB",
                }
            )
            out.append(
                {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": said}
            )
    out.append({"type": "item_reference", "id": "msg_1"})
    return tuple(out)


RESPONSE_ITEMS: Final = _response_items()
RESPONSES_OPTIONS: Final = tuple(
    (name, value)
    for name, values in {
        "instructions": ("Be brief.", "", "\ud800"),
        "stream": (True, False, True),
        "store": (True, False),
        "include": (["reasoning.encrypted_content"], ["nope"]),
        "reasoning": ({"effort": "low"}, {"effort": "high", "summary": "auto"}, {}),
        "max_output_tokens": (16, 5000),
        "tools": ([{"type": "function", "name": "read", "parameters": SCHEMA}], [{"type": "web_search"}]),
        "tool_choice": ("auto", "none", "required"),
        "previous_response_id": ("resp_1",),
        "user": ("u1",),
        "metadata": ({"k": "v"},),
        "temperature": (0.5,),
        "truncation": ("auto", "disabled"),
        "text": ({"format": {"type": "text"}},),
    }.items()
    for value in values
)  # fmt: skip
responses_bodies = st.builds(
    _body,
    st.fixed_dictionaries(
        {"model": st.sampled_from(MODELS),
         "input": st.sampled_from(TEXTS) | st.lists(st.sampled_from(RESPONSE_ITEMS), min_size=1, max_size=3)}
    ),
    st.lists(st.sampled_from(RESPONSES_OPTIONS), max_size=3),
)  # fmt: skip


# --- a body on the wire ---------------------------------------------------------------


@dataclass(frozen=True)
class BodyCase:
    path: str
    body: bytes
    content_type: str | None
    authorized: bool
    content_encoding: str | None = None  # a Content-Encoding header, when one is sent

    @property
    def compressed(self) -> bool:
        """Declared compressed: refused from the head (415) once authorized."""
        codings = (self.content_encoding or "").split(",")
        return any(c.strip().lower() not in ("", "identity") for c in codings)


def _mutate_bytes(data: bytes, how: str, at: int) -> bytes:
    at %= len(data) + 1
    if how == "truncate":
        return data[:at]
    if how == "bom":
        return b"\xef\xbb\xbf" + data
    if how == "nul":
        return data[:at] + b"\x00" + data[at:]
    if how == "latin1":
        return data[:at] + b"\xe9" + data[at:]
    return data


# How a body goes on the wire, one draw: (ASCII escapes, compact, byte damage, content
# type, authorized).
WIRE: Final = tuple(
    itertools.product(
        (True, False),
        (True, False),
        ("none",) * 16 + ("truncate", "bom", "nul", "latin1"),
        ("application/json",) * 12 + (None, "text/plain", "application/json; charset=utf-8",
                                      "application/vnd.x+json", "multipart/form-data"),
        (True,) * 19 + (False,),
    )
)  # fmt: skip


def _body_case(
    path: str, body: dict[str, Any], steps: list[Any], wire: tuple[Any, ...], at: int
) -> BodyCase:
    ascii_only, compact, damage, content_type, authorized = wire
    raw = encode(mutate(body, steps), ascii_only=ascii_only, compact=compact)
    # Raw UTF-8 cannot hold a lone surrogate: "surrogatepass" writes it as the invalid
    # UTF-8 a careless client would send.
    data = _mutate_bytes(raw.encode("utf-8", "surrogatepass"), damage, at)
    return BodyCase(path, data, content_type, authorized)


def body_cases(path: str, bodies: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[BodyCase]:
    return st.builds(
        _body_case, st.just(path), bodies, mutations, st.sampled_from(WIRE), st.integers(0, 2**16)
    )


chat_cases = body_cases("/v1/chat/completions", chat_bodies)
responses_cases = body_cases("/v1/responses", responses_bodies)


# --- Content-Encoding: the relay reads bodies as sent, never decompressed ---------------

CONTENT_ENCODINGS: Final = (
    "identity", "Identity", "", "gzip", "GZIP", "deflate", "br", "zstd", "x-gzip", "compress",
    "gzip, identity", "identity, gzip", "identity,", " , ", "gzip;q=1", "\u00e9", "a" * 300,
)  # fmt: skip
# How the body matches its header: sent as is, or really compressed.
COMPRESSIONS: Final = ("none", "none", "gzip", "deflate")


def _encoded_case(case: BodyCase, encoding: str, compression: str) -> BodyCase:
    body = case.body
    if compression == "gzip":
        body = gzip.compress(body, mtime=0)
    elif compression == "deflate":
        body = zlib.compress(body)
    return dataclasses.replace(case, body=body, content_encoding=encoding)


encoding_cases = st.builds(
    _encoded_case,
    st.one_of(chat_cases, responses_cases),
    st.sampled_from(CONTENT_ENCODINGS),
    st.sampled_from(COMPRESSIONS),
)


# --- the cache API --------------------------------------------------------------------


@dataclass(frozen=True)
class CacheCase:
    method: str
    query: str  # already percent-encoded, possibly badly
    authorized: bool


QUERY_NAMES: Final = (
    "provider",
    "model",
    "limit",
    "before",
    "include",
    "toolCallId",
    "sort",
    "",
    "\u00e9",
)
QUERY_VALUES: Final = (
    "1", "0", "-1", "50", "200", "201", "9223372036854775807", "9223372036854775808", "9" * 5000,
    "1e3", " 5", "+5", "5_0", "\u00b2", "\u0665", "reasoning", "", "deepseek", "gpt-5", "call_1",
    "\ud800", "\x00", "a" * 70_000,
)  # fmt: skip


def _quote(value: str) -> str:
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


QUERY_PAIRS: Final = tuple(f"{_quote(k)}={_quote(v)}" for k in QUERY_NAMES for v in QUERY_VALUES)
QUERY_JUNK: Final = ("%ff=1", "limit=%ff", "before=%00", "a=%zz", "&&", "=", "x", "limit")
# One draw: (method, authorized).
CACHE_CALLS: Final = tuple(
    itertools.product(("GET",) * 6 + ("DELETE", "POST", "PUT"), (True,) * 9 + (False,))
)


def _cache_case(call: tuple[str, bool], pairs: list[str]) -> CacheCase:
    return CacheCase(call[0], "&".join(pairs), call[1])


cache_cases = st.builds(
    _cache_case,
    st.sampled_from(CACHE_CALLS),
    st.lists(
        st.sampled_from(QUERY_PAIRS)
        | st.sampled_from(QUERY_PAIRS)
        | st.sampled_from(QUERY_JUNK)
        | st.tuples(text, text).map(lambda kv: f"{_quote(kv[0])}={_quote(kv[1])}"),
        max_size=3,
    ),
)


# --- raw HTTP/1.1 ---------------------------------------------------------------------


@dataclass(frozen=True)
class RawCase:
    data: bytes
    complete: bool  # a whole request, or one refused before its end: an answer is due
    head_only: bool  # HEAD: answers carry no body
    expected: tuple[int, str | None] | None = None  # the answer's status and code, if known


METHODS: Final = ("POST",) * 10 + (
    "GET",
    "GET",
    "DELETE",
    "HEAD",
    "OPTIONS",
    "PUT",
    "get",
    "P\x00ST",
)
TARGETS: Final = (
    *("/v1/chat/completions",) * 4, *("/v1/responses",) * 4, "/chat/completions",
    "/api/cache/reasoning?limit=2", "/api/cache/reasoning?before=99999999999999999999",
    "/healthz", "/v1/models", "/", "*", "/v1/chat/completions?x=%ff", "/%zz",
    "http://relay/v1/responses", "/" + "a" * 5000,
)  # fmt: skip
VERSIONS: Final = ("HTTP/1.1",) * 12 + ("HTTP/1.0", "HTTP/2.0", "HTTP/1.2", "http/1.1", "HTTP/1")
SEPARATORS: Final = (" ",) * 14 + ("  ", "\t")
DROPPED: Final = (None,) * 17 + (0, 1, 2)  # a part of the request line left out
REQUEST_LINES: Final = tuple(itertools.product(METHODS, TARGETS, VERSIONS, SEPARATORS, DROPPED))

HOSTS: Final = ("relay",) * 14 + ("relay:80", "a,b", "", "[::1]", "x y", None)
CONTENT_TYPES_RAW: Final = ("application/json",) * 8 + ("text/plain", "application/json\x00")
AUTHS: Final = ("right",) * 6 + ("other", "wrong", "basic", "none")
HEADS: Final = tuple(itertools.product(HOSTS, CONTENT_TYPES_RAW, AUTHS))

RAW_BODIES: Final = (
    '{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}',
    '{"model":"gpt-5","messages":[{"role":"user","content":"hi"}],"stream":true}',
    '{"model":"gpt-5","input":"hi"}',
    '{"model":"gpt-5","input":"hi","stream":true}',
    '{"model":"gpt-5","messages":[{"role":"user","content":"\\ud800"}]}',
    "{}",
    "",
    "{not json",
)
BAD_LENGTHS: Final = ("-1", "abc", "1e3", "0x10", "", "9" * 30, "9" * 5000, "\u00b2", "+2", "1 2")
FRAMINGS: Final = (
    *[("length", None)] * 12,
    *[("chunked", "chunked")] * 6,
    ("chunked", "Chunked"),
    ("chunked", " chunked"),
    ("none", None),
    *[("short", n) for n in (1, 3, 8)],
    *[("bad", v) for v in BAD_LENGTHS],
    ("dup", 0),
    ("dup", 1),
    ("both", None),
    *[("te", v) for v in ("gzip", "chunked, chunked", "identity")],
)
VALID_SIZES: Final = ("%x", "%X", "%04x")
BAD_SIZES: Final = ("%x;ext=1", "%x ", " %x", "0x%x", "0" * 70 + "%x")  # refused at once
ENDINGS: Final = {  # the end of a chunked body: whether the request is then over
    b"0\r\n\r\n": True,
    b"00\r\n\r\n": True,
    b"0\r\nX-Trailer: 1\r\n\r\n": True,  # refused: no trailers
    b"0\r\n": False,  # the final CRLF never comes
    b"": False,
}
CHUNKINGS: Final = tuple(
    itertools.product(
        ((), (1,), (3,), (1, 2), (5, 20, 21), (10, 30, 50, 55)),  # where the body is cut
        VALID_SIZES * 4 + BAD_SIZES,
        (b"0\r\n\r\n",) * 8 + tuple(ENDINGS),
        (False,) * 9 + (True,),  # a first chunk longer than its size
    )
)
ODD_HEADERS: Final = (
    *[None] * 16,
    ("Connection", "keep-alive"),
    ("Expect", "100-continue"),
    ("X-Note", "a\x00b"),
    ("X-Note", "\u00e9\x7f"),
    ("X Bad", "1"),
    ("X-Note\x00", "1"),
    ("", "1"),
    ("Content-Length ", "2"),
    ("X-Big", "a" * 70_000),
)
JUNK_LINES: Final = (None,) * 14 + (" folded", "NoColon", "\x00", "a" * 100, "\x80\xff: x")
EOLS: Final = ("\r\n",) * 30 + ("\n", "\r")
TAILS: Final = tuple(itertools.product(ODD_HEADERS, (True, True, False), JUNK_LINES, EOLS))


def _chunked(body: bytes, chunking: tuple[Any, ...]) -> tuple[bytes, bool]:
    """``body`` chunked as ``chunking`` says; whether an answer is due once it is sent."""
    cuts, size, ending, misfit = chunking
    bounds = [0, *(c for c in cuts if c < len(body)), len(body)]
    pieces = [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    out = b"".join((size % len(p)).encode() + b"\r\n" + p + b"\r\n" for p in pieces)
    if pieces and size in BAD_SIZES:
        return out + ending, True  # refused at the first size line
    if misfit and pieces and len(pieces[0]) > 1:  # refused where its CRLF should be
        return b"1\r\n" + pieces[0] + b"\r\n" + out + ending, True
    return out + ending, ENDINGS[ending]


def _raw_case(
    token: str,
    admin: str,
    request_line: tuple[Any, ...],
    head: tuple[Any, ...],
    body_text: str,
    framing: tuple[str, Any],
    chunking: tuple[Any, ...],
    tail: tuple[Any, ...],
    at: int,
) -> RawCase:
    method, target, version, sep, dropped = request_line
    host, content_type, auth = head
    odd, close, junk, eol = tail
    parts = [method, target, version]
    if dropped is not None:
        del parts[dropped]
    credential = admin if target.startswith("/api/") else token
    authorization = {
        "right": f"Bearer {credential}", "other": f"Bearer {token if credential == admin else admin}",
        "wrong": f"Bearer {credential}x", "basic": "Basic abc", "none": None,
    }[auth]  # fmt: skip
    headers = [] if host is None else [("Host", host)]
    if authorization:
        headers.append(("Authorization", authorization))
    headers.append(("Content-Type", content_type))
    body = body_text.encode()
    kind, value = framing
    complete = True
    if kind == "length":
        headers.append(("Content-Length", str(len(body))))
    elif kind == "short":  # the rest of the body reads as the next request
        headers.append(("Content-Length", str(max(0, len(body) - value))))
    elif kind == "bad":
        headers.append(("Content-Length", value))
    elif kind == "dup":
        headers += [("Content-Length", str(len(body))), ("Content-Length", str(len(body) + value))]
    elif kind == "both":
        headers += [("Content-Length", str(len(body))), ("Transfer-Encoding", "chunked")]
    elif kind == "te":  # refused: "chunked" is the only transfer coding Tornado knows
        headers.append(("Transfer-Encoding", value))
    elif kind == "chunked":
        headers.append(("Transfer-Encoding", value))
        body, complete = _chunked(body, chunking)
    if odd is not None:
        headers.append(odd)
    if close and not any(name == "Connection" for name, _ in headers):
        headers.append(("Connection", "close"))  # then the answer ends with the connection
    lines = [sep.join(parts)] + [f"{name}: {text}" for name, text in headers]
    if junk is not None:
        lines.insert(1 + at % len(lines), junk)
    data = (eol.join(lines) + eol + eol).encode("latin-1") + body
    complete = complete and eol != "\r"  # a bare CR never ends a line
    return RawCase(data, complete=complete, head_only=method == "HEAD")


def raw_cases(token: str, admin: str) -> st.SearchStrategy[RawCase]:
    return st.builds(
        _raw_case,
        st.just(token),
        st.just(admin),
        st.sampled_from(REQUEST_LINES),
        st.sampled_from(HEADS),
        st.sampled_from(RAW_BODIES),
        st.sampled_from(FRAMINGS),
        st.sampled_from(CHUNKINGS),
        st.sampled_from(TAILS),
        st.integers(0, 2**16),
    )


# --- chunked framing with bare LFs or CRs (a client that ends lines with one alone) ------

LF_TARGETS: Final = ("/v1/chat/completions", "/v1/responses")


def _lf_case(
    token: str,
    target: str,
    body_text: str,
    cuts: tuple[int, ...],
    lfs: int,
    crs: int,
    head_lf: bool,
    authorized: bool,
) -> RawCase:
    """A chunked upload in which the framing CRLFs that ``lfs``'s bits pick (at least
    one) are bare LFs, and some of the others (``crs``) bare CRs: after a size line,
    after a chunk's data, after the last chunk (never a CR there: the request would wait
    for the byte after it). The first is refused at once, a 400 (a 401 first, without
    the token)."""
    body = body_text.encode()
    bounds = [0, *(c for c in cuts if c < len(body)), len(body)]
    pieces = [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    # The separators, in order: after each size line, after each chunk's data, then after
    # the last chunk's size line and at its end.
    count = 2 * len(pieces) + 2
    lfs |= 1 << (lfs % count)  # at least one
    seps = [
        b"\n" if lfs >> i & 1 else b"\r" if crs >> i & 1 and i < count - 1 else b"\r\n"
        for i in range(count)
    ]
    out = b""
    for i, piece in enumerate(pieces):
        out += b"%x" % len(piece) + seps[2 * i] + piece + seps[2 * i + 1]
    out += b"0" + seps[-2] + seps[-1]
    eol = "\n" if head_lf else "\r\n"
    lines = [f"POST {target} HTTP/1.1", "Host: relay", "Content-Type: application/json",
             "Transfer-Encoding: chunked"]  # fmt: skip
    if authorized:
        lines.append(f"Authorization: Bearer {token}")
    data = (eol.join(lines) + eol + eol).encode("latin-1") + out
    expected = (400, "malformed_http_request") if authorized else (401, "invalid_api_key")
    return RawCase(data, complete=True, head_only=False, expected=expected)


def lf_framing_cases(token: str) -> st.SearchStrategy[RawCase]:
    return st.builds(
        _lf_case,
        st.just(token),
        st.sampled_from(LF_TARGETS),
        st.sampled_from(RAW_BODIES),
        st.sampled_from(((), (1,), (3,), (1, 2), (5, 20, 21))),
        st.integers(0, 2**16),
        st.sampled_from((0, 0, 0)) | st.integers(0, 2**16),
        st.booleans(),
        st.sampled_from((True,) * 9 + (False,)),
    )
