"""Hypothesis properties of the translation core.

1. Any valid Chat request translates, and what must survive does: message order, every
   tool call (id, name, exact argument string), every tool result, every text and image URL.
2. Any chunking (and any line-ending style) of a recorded upstream SSE stream gives the
   same client chunks as feeding it whole. Failures print a reproduction blob.
"""

from __future__ import annotations

import functools
import json
import string
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core.responses_events import decode
from relay.settings.model_alias import ModelAlias
from relay.translate.request import translate_request
from relay.translate.sampling import is_reasoning_model
from relay.translate.stream_converter import ChatStreamConverter, Chunk
from relay.transport.sse import SSEParser, decode_event
from tests.support import recordings

STREAMS = recordings.stream_paths()

# --- strategies: valid Chat requests -----------------------------------------------------

text = st.text(max_size=12)
text_part = text.map(lambda t: {"type": "text", "text": t})
image_part = st.builds(
    lambda url, detail: {"type": "image_url",
                         "image_url": {"url": url} | ({"detail": detail} if detail else {})},
    st.text(min_size=1, max_size=20),
    st.sampled_from([None, "low", "high", "auto"]),
)  # fmt: skip
call_ids = st.text(string.ascii_letters + string.digits, min_size=1, max_size=8).map(
    "call_".__add__
)
tool_call = st.builds(
    lambda call_id, name, arguments, index: {
        "id": call_id, "type": "function", "function": {"name": name, "arguments": arguments},
    } | ({"index": index} if index is not None else {}),
    call_ids, st.text(min_size=1, max_size=8), st.text(max_size=20),  # arguments: any string
    st.none() | st.integers(0, 5),
)  # fmt: skip
system_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer"]),
     "content": text | st.lists(text_part, max_size=3)}
)  # fmt: skip
user_message = st.fixed_dictionaries(
    {"role": st.just("user"),
     "content": text | st.lists(text_part | image_part, min_size=1, max_size=4)},
    optional={"name": text},
)  # fmt: skip
assistant_message = st.fixed_dictionaries(
    {"role": st.just("assistant")},
    optional={
        "content": st.none() | text | st.lists(
            text_part | text.map(lambda r: {"type": "refusal", "refusal": r}), max_size=3),
        "refusal": st.none() | text,
        "tool_calls": st.none() | st.lists(tool_call, max_size=3),
    },
)  # fmt: skip
tool_message = st.fixed_dictionaries(
    {"role": st.just("tool"), "tool_call_id": call_ids,
     "content": text | st.lists(text_part, min_size=1, max_size=3)},
    optional={"name": text},
)  # fmt: skip
function_tool = st.builds(
    lambda name, strict: {"type": "function",
                          "function": {"name": name, "parameters": {"type": "object"}}
                          | ({"strict": strict} if strict is not None else {})},
    st.text(min_size=1, max_size=8), st.none() | st.booleans(),
)  # fmt: skip


def answering_earlier_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A tool message answers a call an earlier assistant message made (Chat refuses
    others): each one takes such a call's id, or is left out when there is none yet."""
    made: list[str] = []
    kept: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "assistant":
            made += [call["id"] for call in message.get("tool_calls") or []]
        elif message["role"] == "tool":
            if not made:
                continue
            kept.append({**message, "tool_call_id": made[len(kept) % len(made)]})
            continue
        kept.append(message)
    return kept


chat_requests = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["gpt-5", "gpt-4o", "o3-mini", "gpt-5-chat-latest"]),
        "messages": st.lists(
            system_message | user_message | assistant_message | tool_message,
            min_size=1, max_size=10,
        ).map(answering_earlier_calls).filter(bool),
    },
    optional={
        "temperature": st.none() | st.floats(0, 2) | st.sampled_from([0, 1]),
        "top_p": st.none() | st.floats(0, 1),
        "max_completion_tokens": st.integers(1, 10**6),
        "reasoning_effort": st.sampled_from(["minimal", "low", "medium", "high"]),
        "reasoning": st.fixed_dictionaries({}, optional={"effort": st.sampled_from(["low"])}),
        "user": text,
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "tools": st.none() | st.lists(function_tool, max_size=3),
        "tool_choice": st.sampled_from(["auto", "none", "required"]),
        "parallel_tool_calls": st.booleans(),
        "n": st.just(1),
        "stop": st.none(),
        "metadata": st.dictionaries(text, text, max_size=2),
    },
)  # fmt: skip


# --- an independent description of what must survive ---------------------------------------


def joined(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(p["text"] for p in content if p["type"] == "text")


def expected_items(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for m in messages:
        role = m["role"]
        if role in ("system", "developer"):
            out.append((role, joined(m["content"])))
        elif role == "user":
            content = m["content"]
            parts = [("text", content)] if isinstance(content, str) else [
                ("text", p["text"]) if p["type"] == "text"
                else ("image", p["image_url"]["url"], p["image_url"].get("detail", "auto"))
                for p in content
            ]  # fmt: skip
            out.append(("user", parts))
        elif role == "assistant":
            content = m.get("content")
            refusals = [p["refusal"] for p in content or [] if isinstance(p, dict)
                        and p["type"] == "refusal" and p["refusal"]]  # fmt: skip
            if m.get("refusal"):
                refusals.append(m["refusal"])
            text_value = joined(content)
            if text_value or refusals:
                out.append(("assistant", text_value, refusals))
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                out.append(("call", call["id"], fn["name"], fn["arguments"]))
        else:
            out.append(("tool", m["tool_call_id"], joined(m["content"])))
    return out


def describe(item: dict[str, Any]) -> tuple[Any, ...]:
    kind = item.get("type")
    if kind == "function_call":
        return ("call", item["call_id"], item["name"], item["arguments"])
    if kind == "function_call_output":
        return ("tool", item["call_id"], item["output"])
    role, content = item["role"], item["content"]
    if role == "assistant":
        texts = [p["text"] for p in content if p["type"] == "output_text"]
        refusals = [p["refusal"] for p in content if p["type"] == "refusal"]
        return ("assistant", "".join(texts), refusals)
    if role == "user":
        return (
            "user",
            [
                ("text", p["text"])
                if p["type"] == "input_text"
                else ("image", p["image_url"], p["detail"])
                for p in content
            ],
        )
    (part,) = content
    return (role, part["text"])


@settings(max_examples=300, deadline=None, print_blob=True)
@given(body=chat_requests, summaries=st.booleans())
def test_valid_chat_requests_translate_and_keep_what_must_survive(
    body: dict[str, Any], summaries: bool
) -> None:
    model = body["model"]
    result = translate_request(body, ModelAlias(model, model), reasoning_summaries=summaries)
    out = result.upstream_body
    messages = body["messages"]
    lead = 0
    while lead < len(messages) and messages[lead]["role"] in ("system", "developer"):
        lead += 1
    if lead:
        assert out["instructions"] == "\n\n".join(joined(m["content"]) for m in messages[:lead])
    else:
        assert "instructions" not in out
    assert [describe(i) for i in out["input"]] == expected_items(messages[lead:])
    json.dumps(out)  # plain JSON data, ready to send
    for key in ("temperature", "top_p"):
        value = body.get(key)
        forwarded = value is not None and (not is_reasoning_model(model) or value == 1)
        assert (key in out) == forwarded
        if forwarded:
            assert out[key] == value
    assert result.caller == body.get("user")
    assert result.stream == bool(body.get("stream"))


# --- chunking of upstream streams ------------------------------------------------------------


def client_output(chunks: list[bytes]) -> list[Chunk]:
    parser = SSEParser(max_event_bytes=8 * 1024 * 1024)
    conv = ChatStreamConverter(completion_id="c", created=1, model="gpt-5", include_usage=True,
                               reasoning_summaries=True)  # fmt: skip
    out: list[Chunk] = []
    events = [e for piece in chunks for e in parser.feed(piece)] + parser.close()
    for event in events:
        if conv.finished:
            break  # what the server does: stop at the first terminal event
        out += conv.feed(decode(*decode_event(event)))
    assert conv.finished
    return out


@functools.cache
def reference_output(path: Path) -> list[Chunk]:
    return client_output([path.read_bytes()])


def restyled(data: bytes, style: str) -> bytes:
    """The same stream with other line ends (JSON data never holds raw CR or LF)."""
    if style == "crlf":
        return data.replace(b"\n", b"\r\n")
    if style == "cr":
        return data.replace(b"\n", b"\r")
    if style == "no-final-blank-line":
        return data.rstrip(b"\n")
    if style == "comments":
        return b": keepalive\n\n" + data.replace(b"\n\n", b"\n\n: keepalive\n\n")
    return data


@settings(max_examples=60, deadline=None, print_blob=True)
@given(
    path=st.sampled_from(STREAMS),
    style=st.sampled_from(["lf", "crlf", "cr", "no-final-blank-line", "comments"]),
    data=st.data(),
)
def test_any_chunking_gives_the_same_client_output(path: Path, style: str, data: Any) -> None:
    raw = restyled(path.read_bytes(), style)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=60), label="cuts"))
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    assert client_output(pieces) == reference_output(path)


def test_byte_at_a_time_gives_the_same_client_output() -> None:
    for path in STREAMS:
        raw = path.read_bytes()
        assert client_output([raw[i : i + 1] for i in range(len(raw))]) == reference_output(path)
