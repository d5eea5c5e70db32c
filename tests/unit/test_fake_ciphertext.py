"""fakeupstream.ciphertext: tokens bind to key/model/item, tampering fails, the probe sees placement."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakeupstream.ciphertext import (
    Cipher,
    Follower,
    Ledger,
    Sealed,
    message_text,
    probe,
    text_digest,
)

KEY = b"k" * 32
BINDING = {"api_key": "sk-test", "model": "gpt-5", "item_id": "rs_1"}
SEALED = Sealed(
    secret="s3cr3t",
    followers=(
        Follower("message", "msg_1", text_digest("Hello")),
        Follower("function_call", "fc_1", "call_1"),
    ),
)


def seal(sealed: Sealed = SEALED, *, nonce: bytes = b"n" * 16, **binding: str) -> str:
    return Cipher(KEY).seal(sealed, nonce=nonce, issued_at=1_767_225_600, **(BINDING | binding))


def test_roundtrip_returns_secret_and_followers():
    assert Cipher(KEY).open(seal(), **BINDING) == SEALED


def test_token_looks_like_openai_and_hides_the_payload():
    token = seal()
    assert token.startswith("gAAAAAB")
    raw = base64.urlsafe_b64decode(token)
    assert b"s3cr3t" not in raw
    assert b"msg_1" not in raw
    assert b"call_1" not in raw


def test_fresh_nonce_gives_different_bytes_that_both_verify():
    first, second = seal(nonce=b"a" * 16), seal(nonce=b"b" * 16)
    assert first != second
    assert Cipher(KEY).open(first, **BINDING) == Cipher(KEY).open(second, **BINDING) == SEALED


@pytest.mark.parametrize(
    "binding",
    [{"api_key": "sk-other"}, {"model": "gpt-5-mini"}, {"item_id": "rs_2"}],
    ids=["other-key", "other-model", "other-item"],
)
def test_token_does_not_verify_under_another_binding(binding):
    assert Cipher(KEY).open(seal(), **(BINDING | binding)) is None


def test_token_does_not_verify_under_another_secret():
    assert Cipher(b"x" * 32).open(seal(), **BINDING) is None


@given(position=st.integers(min_value=0), flip=st.integers(min_value=1, max_value=255))
def test_any_flipped_byte_fails_verification(position, flip):
    raw = bytearray(base64.urlsafe_b64decode(seal()))
    raw[position % len(raw)] ^= flip
    tampered = base64.urlsafe_b64encode(bytes(raw)).decode()
    assert Cipher(KEY).open(tampered, **BINDING) is None


@pytest.mark.parametrize("token", ["", "not base64 at all!", "gAAAAA", "é", "Zm9v"])
def test_garbage_tokens_are_rejected_not_raised(token):
    assert Cipher(KEY).open(token, **BINDING) is None


def test_short_secret_key_is_refused():
    with pytest.raises(ValueError, match="at least 16 bytes"):
        Cipher(b"short")


# --- the probe -----------------------------------------------------------------------


def opener(item_id: str, token: str):
    return Cipher(KEY).open(token, api_key="sk-test", model="gpt-5", item_id=item_id)


def reasoning(token: str, item_id: str = "rs_1") -> dict:
    return {"type": "reasoning", "id": item_id, "summary": [], "encrypted_content": token}


USER = {"role": "user", "content": "hi"}
MESSAGE = {"role": "assistant", "content": "Hello"}
CALL = {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}


def test_probe_intact_when_followers_come_next_matched_without_ids():
    report = probe([USER, reasoning(seal()), MESSAGE, CALL, USER], opener)
    assert report.to_json() == {
        "replayed": 1,
        "intact": 1,
        "misplaced": 0,
        "invalid": 0,
        "secrets": ["s3cr3t"],
        "items": [{"index": 1, "id": "rs_1", "placement": "intact", "secret": "s3cr3t"}],
    }
    assert report.summary() == "continuity: replayed=1 intact=1 misplaced=0"


def test_probe_matches_followers_by_id():
    items = [
        reasoning(seal()),
        {"type": "message", "id": "msg_1", "role": "assistant", "content": "edited"},
        {**CALL, "id": "fc_1", "call_id": "call_renamed"},
    ]
    assert probe(items, opener).count("intact") == 1


@pytest.mark.parametrize(
    "items",
    [
        [USER, reasoning(seal()), CALL, MESSAGE],  # followers swapped
        [reasoning(seal()), MESSAGE, USER, CALL],  # something in between
        [reasoning(seal()), {"role": "assistant", "content": "Hello!"}, CALL],  # text changed
        [MESSAGE, CALL, reasoning(seal())],  # after its items
        [reasoning(seal()), MESSAGE],  # a follower missing
    ],
    ids=["swapped", "interleaved", "edited", "after", "truncated"],
)
def test_probe_misplaced_when_not_immediately_followed_in_order(items):
    report = probe(items, opener)
    assert (report.count("intact"), report.count("misplaced")) == (0, 1)
    assert report.secrets == ["s3cr3t"]


def test_probe_invalid_for_foreign_tokens_and_skips_reasoning_without_content():
    items = [
        reasoning(seal(api_key="sk-other")),
        {"type": "reasoning", "id": "rs_9", "summary": []},
        MESSAGE,
    ]
    report = probe(items, opener)
    assert (len(report.items), report.count("invalid"), report.secrets) == (1, 1, [])


def test_message_text_reads_every_content_form():
    assert message_text({"content": "plain"}) == "plain"
    parts = [{"type": "output_text", "text": "a"}, {"type": "refusal", "refusal": "b"}]
    assert message_text({"content": parts}) == "ab"
    assert message_text({"content": None}) == ""


def test_ledger_links_items_to_the_reasoning_before_them_and_stores_only_with_store():
    output = [
        {"id": "rs_1", "type": "reasoning"},
        {"id": "msg_1", "type": "message"},
        {"id": "fc_1", "type": "function_call"},
    ]
    ledger = Ledger()
    ledger.record("resp_1", output, store=False)
    assert ledger.requires == {"msg_1": "rs_1", "fc_1": "rs_1"}
    assert ledger.stored_items == {}
    ledger.record("resp_2", [{"id": "msg_2", "type": "message"}], store=True)
    assert set(ledger.stored_items) == {"msg_2"}
    assert list(ledger.stored_responses) == ["resp_2"]
    ledger.clear()
    assert (ledger.requires, ledger.stored_items, ledger.stored_responses) == ({}, {}, {})


def test_ledger_forgets_the_oldest_beyond_its_limit():
    ledger = Ledger(limit=2)
    for n in range(4):
        output = [{"id": f"rs_{n}", "type": "reasoning"}, {"id": f"msg_{n}", "type": "message"}]
        ledger.record(f"resp_{n}", output, store=True)
    assert ledger.requires == {"msg_2": "rs_2", "msg_3": "rs_3"}
    assert list(ledger.stored_items) == ["rs_3", "msg_3"]
    assert list(ledger.stored_responses) == ["resp_2", "resp_3"]
