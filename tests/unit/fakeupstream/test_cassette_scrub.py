"""The cassette scrubber: credential headers and URL parts out; with shareable cassettes no
``encrypted_content`` value survives, and every other byte stays where it was."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakeupstream.cassette_scrub import (
    Edit,
    apply_edits,
    body_edits,
    digest,
    is_credential_header,
    rechunk,
    remap,
    scrub_body,
    scrub_headers,
    scrub_uri,
    scrub_value,
)

TOKEN = "gAAAAABpQ0secret-token-1234567890abcdef=="


def sha(value: str) -> str:
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()


@pytest.mark.parametrize(
    ("name", "dropped"),
    [
        ("Authorization", True),
        ("authorization", True),
        ("Proxy-Authorization", True),
        ("api-key", True),
        ("X-Api-Key", True),
        ("Cookie", True),
        ("Set-Cookie", True),
        ("OpenAI-Organization", True),
        ("openai-project", True),
        ("OpenAI-Beta", True),  # an openai-* header not known to be harmless
        ("openai-version", False),
        ("openai-processing-ms", False),
        ("Content-Type", False),
        ("x-request-id", False),
        ("User-Agent", False),
    ],
)
def test_credential_headers(name: str, dropped: bool) -> None:
    assert is_credential_header(name) is dropped
    kept = scrub_headers([(name, "v"), ("Accept", "*/*")])
    assert kept == ((("Accept", "*/*"),) if dropped else ((name, "v"), ("Accept", "*/*")))


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("https://api.openai.com/v1/responses", "https://api.openai.com/v1/responses"),
        ("https://user:pw@host/v1/responses", "https://host/v1/responses"),
        ("https://host/v1/x?api-key=sk1&api-version=2", "https://host/v1/x?api-version=2"),
        ("http://h/v1/x?key=1&access_token=2&token=3", "http://h/v1/x"),
    ],
)
def test_uri(uri: str, expected: str) -> None:
    assert scrub_uri(uri) == expected


def test_digest_is_sha256_and_idempotent() -> None:
    assert digest(TOKEN) == sha(TOKEN)
    assert digest(digest(TOKEN)) == digest(TOKEN)
    assert digest("sha256:" + "0" * 63) != "sha256:" + "0" * 63  # not a digest: digested


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # The value is replaced where it stands; the formatting around it stays.
        (
            f'{{"type": "reasoning", "encrypted_content": "{TOKEN}", "summary": []}}',
            f'{{"type": "reasoning", "encrypted_content": "{sha(TOKEN)}", "summary": []}}',
        ),
        (
            f'{{"input":[{{"encrypted_content" :\n  "{TOKEN}"}}]}}',
            f'{{"input":[{{"encrypted_content" :\n  "{sha(TOKEN)}"}}]}}',
        ),
        # null, or no such key: nothing to do.
        ('{"encrypted_content": null}', '{"encrypted_content": null}'),
        ('{"text": "no ciphertext here"}', '{"text": "no ciphertext here"}'),
        # The key inside a string (tool arguments) is no key: left alone.
        (
            '{"arguments": "{\\"encrypted_content\\": \\"abc\\"}"}',
            '{"arguments": "{\\"encrypted_content\\": \\"abc\\"}"}',
        ),
        # Escapes in the value: the digest is of the decoded value.
        (
            '{"encrypted_content": "a\\/b\\u00e9"}',
            '{"encrypted_content": "' + sha("a/bé") + '"}',
        ),
        # An escaped key is found by the parse, not in place: the document is written anew.
        (
            '{"encrypted\\u005fcontent": "xyz", "n": 1}',
            '{"encrypted_content":"' + sha("xyz") + '","n":1}',
        ),
        # Already scrubbed: unchanged.
        (
            f'{{"encrypted_content": "{sha(TOKEN)}"}}',
            f'{{"encrypted_content": "{sha(TOKEN)}"}}',
        ),
        # A key that only ends like it (it starts with a quote): its value is no ciphertext.
        ('{"\\"encrypted_content": "abc"}', '{"\\"encrypted_content":"abc"}'),
        # Not JSON (a body cut mid-value): the in-place pass still digests what is there.
        (
            '{"item": {"encrypted_content": "gAAAAcut',
            '{"item": {"encrypted_content": "' + sha("gAAAAcut"),
        ),
    ],
)
def test_json_bodies(body: str, expected: str) -> None:
    assert scrub_body(body.encode(), sse=False).decode() == expected


def test_sse_data_lines_are_documents() -> None:
    done = {"type": "response.output_item.done", "item": {"encrypted_content": TOKEN}}
    body = (
        "event: response.created\n"
        'data: {"type":"response.created"}\n\n'
        "event: response.output_item.done\n"
        f"data: {json.dumps(done)}\r\n\r\n"
        f': a comment "encrypted_content": "{TOKEN}"\n\n'
        "data: [DONE]\n\n"
    ).encode()
    scrubbed = scrub_body(body, sse=True)
    assert TOKEN.encode() not in scrubbed
    assert scrubbed == body.replace(TOKEN.encode(), sha(TOKEN).encode())


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (0, 0),
        (2, 2),  # before the edit
        (3, 3),  # at its start
        (4, 7),  # inside: the end of the replacement
        (6, 7),  # at its end
        (9, 10),  # after: shifted by the growth
    ],
)
def test_remap(offset: int, expected: int) -> None:
    edits = [Edit(3, 6, b"WXYZ")]  # 3 bytes become 4
    assert apply_edits(b"abcdefghi", edits) == b"abcWXYZghi"
    assert remap(offset, edits) == expected


def test_rechunk_moves_boundaries_and_carries_the_delay_of_an_emptied_chunk() -> None:
    text = b'data: {"encrypted_content":"' + b"x" * 100 + b'"}\n\n'
    edits = body_edits(text, sse=True)
    start = text.index(b"x")
    sizes = [start + 10, 50, len(text) - start - 60]  # two boundaries inside the value
    chunks = rechunk(sizes, [1.0, 2.0, 3.0], edits)
    new = apply_edits(text, edits)
    # The first boundary lands at the end of the digest, so the second chunk is empty and
    # its delay waits with the third.
    assert chunks == [(1.0, start + len(sha("x" * 100))), (5.0, len(b'"}\n\n'))]
    assert sum(size for _, size in chunks) == len(new)


# --- properties ------------------------------------------------------------------------------

# Ciphertext as OpenAI's looks (a Fernet-like token); other strings come from an alphabet
# without "g" or "=", so no ciphertext can hide in them by chance.
ciphertexts = st.binary(min_size=16, max_size=96).map(
    lambda raw: "gAAAAA" + base64.urlsafe_b64encode(raw + b"\x00").decode()
)
plain_text = st.text(alphabet='abc xyz09é"\\\n\t{}:,[]/\u2028', max_size=12)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), plain_text)


def documents(secrets: list[str]) -> st.SearchStrategy[Any]:
    """JSON values holding some ``encrypted_content`` values, recording what they hold."""

    def with_secret(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        def build(pair: tuple[str, dict[str, Any]]) -> dict[str, Any]:
            token, rest = pair
            secrets.append(token)
            return {**rest, "encrypted_content": token}

        return st.tuples(ciphertexts, st.dictionaries(plain_text, children, max_size=3)).map(build)

    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(plain_text, children, max_size=3),
            with_secret(children),
        ),
        max_leaves=12,
    )


def serialized(value: Any, style: int) -> bytes:
    if style == 0:
        return json.dumps(value, separators=(",", ":")).encode()
    if style == 1:
        return json.dumps(value, indent=2, ensure_ascii=False).encode()
    return json.dumps(value, indent=4).replace("/", "\\/").encode()  # escaped slashes


def sse_serialized(value: Any, style: int) -> bytes:
    """One line of JSON, as a data: line carries it."""
    if style == 0:
        return json.dumps(value, separators=(",", ":")).encode()
    if style == 1:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    return json.dumps(value).replace("/", "\\/").encode()


def no_window_of(secrets: list[str], text: bytes, width: int = 16) -> bool:
    """No piece of any secret is in ``text``: no window of ``width`` characters at every
    eighth position (so no surviving fragment of ``width + 7`` characters or more)."""
    return not any(
        token[start : start + width].encode() in text
        for token in secrets
        for start in range(0, len(token) - width + 1, 8)
    )


@settings(max_examples=60, deadline=None, print_blob=True)
@given(st.data(), st.integers(0, 2))
def test_no_ciphertext_survives_a_json_body(data: st.DataObject, style: int) -> None:
    secrets: list[str] = []
    value = data.draw(documents(secrets))
    body = serialized(value, style)
    scrubbed = scrub_body(body, sse=False)
    assert json.loads(scrubbed) == scrub_value(value)  # everything else intact
    assert no_window_of(secrets, scrubbed)
    assert scrub_body(scrubbed, sse=False) == scrubbed  # idempotent


@settings(max_examples=60, deadline=None, print_blob=True)
@given(st.data(), st.integers(0, 2), st.integers(0, 10**6))
def test_no_ciphertext_survives_an_sse_stream_even_cut_short(
    data: st.DataObject, style: int, cut: int
) -> None:
    secrets: list[str] = []
    events = data.draw(st.lists(documents(secrets), min_size=1, max_size=4))
    frames = [b"event: e\ndata: " + sse_serialized(v, style) + b"\n\n" for v in events]
    body = b"".join(frames)
    scrubbed = scrub_body(body, sse=True)
    assert no_window_of(secrets, scrubbed)
    assert [json.loads(line[6:]) for line in scrubbed.split(b"\n") if line[:6] == b"data: "] == [
        scrub_value(v) for v in events
    ]
    # A stream that broke off anywhere: no ciphertext left, not even the part that came.
    partial = body[: cut % (len(body) + 1)]
    assert no_window_of(secrets, scrub_body(partial, sse=True))


@settings(max_examples=40, deadline=None, print_blob=True)
@given(st.data())
def test_rechunk_keeps_the_bytes_and_the_total_delay(data: st.DataObject) -> None:
    secrets: list[str] = []
    events = data.draw(st.lists(documents(secrets), min_size=1, max_size=3))
    body = b"".join(b"data: " + sse_serialized(v, 0) + b"\n\n" for v in events)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(body) - 1), max_size=6))))
    bounds = [0, *cuts, len(body)]
    sizes = [b - a for a, b in itertools.pairwise(bounds)]
    delays = [float(i) for i in range(len(sizes))]
    edits = body_edits(body, sse=True)
    chunks = rechunk(sizes, delays, edits)
    assert sum(size for _, size in chunks) == len(apply_edits(body, edits))
    assert all(size > 0 for _, size in chunks)
    assert len(chunks) <= len(sizes)
    assert sum(delay for delay, _ in chunks) <= sum(delays)
