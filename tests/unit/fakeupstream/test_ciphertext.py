"""fakeupstream.ciphertext: tokens bind to key/model/item, tampering fails, the probe sees placement."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakeupstream.ciphertext import (
    Cipher,
    Follower,
    History,
    Ledger,
    Sealed,
    history_digest,
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


def test_an_opened_token_is_remembered_per_binding_not_across_bindings():
    cipher, token = Cipher(KEY), seal()
    assert cipher.open(token, **BINDING) == SEALED
    for binding in ({"api_key": "sk-other"}, {"model": "gpt-5-mini"}, {"item_id": "rs_2"}):
        assert cipher.open(token, **(BINDING | binding)) is None
    assert cipher.open(token, **BINDING) == SEALED  # the memo, after the refusals
    raw = bytearray(base64.urlsafe_b64decode(token))
    raw[-1] ^= 1
    assert cipher.open(base64.urlsafe_b64encode(bytes(raw)).decode(), **BINDING) is None


def test_the_memo_of_opened_tokens_is_bounded():
    cipher = Cipher(KEY)
    for number in range(4100):
        cipher.open(seal(item_id=f"rs_{number}"), **(BINDING | {"item_id": f"rs_{number}"}))
    assert len(cipher._opened) == 4096
    assert cipher.open(seal(item_id="rs_0"), **(BINDING | {"item_id": "rs_0"})) == SEALED


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


def _reference_token(
    sealed: Sealed, *, key: bytes, nonce: bytes, issued_at: int, api_key: str, model: str,
    item_id: str,
) -> str:  # fmt: skip
    """The token format spelled out with hmac.new and a byte loop (as first written)."""
    contents: dict[str, Any] = {"s": sealed.secret,
                                "f": [[f.kind, f.item_id, f.key] for f in sealed.followers]}  # fmt: skip
    if sealed.history is not None:
        contents["h"] = sealed.history
    payload = json.dumps(contents, separators=(",", ":")).encode()
    stream = b"".join(
        hmac.new(key, b"stream" + nonce + n.to_bytes(4, "big"), hashlib.sha256).digest()
        for n in range((len(payload) + 31) // 32)
    )[: len(payload)]
    body = b"\x80" + issued_at.to_bytes(8, "big") + nonce
    body += bytes(a ^ b for a, b in zip(payload, stream, strict=True))
    binding = "\0".join([hashlib.sha256(api_key.encode()).hexdigest(), model, item_id])
    tag = hmac.new(key, binding.encode() + b"\0" + body, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(body + tag).decode()


@given(
    st.text(max_size=80),
    st.lists(
        st.tuples(
            st.sampled_from(["message", "function_call"]),
            st.text(max_size=12),
            st.text(max_size=20),
        ),
        max_size=6,
    ),
    st.none() | st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),
    st.binary(min_size=16, max_size=16),
    st.integers(min_value=0, max_value=2**63),
)
def test_tokens_are_byte_for_byte_the_reference_format(
    secret: str, followers: list[tuple[str, str, str]], history: str | None, nonce: bytes,
    issued_at: int,
) -> None:  # fmt: skip
    sealed = Sealed(secret, tuple(Follower(*f) for f in followers), history)
    token = Cipher(KEY).seal(sealed, nonce=nonce, issued_at=issued_at, **BINDING)
    assert token == _reference_token(sealed, key=KEY, nonce=nonce, issued_at=issued_at,
                                     **BINDING)  # fmt: skip
    assert Cipher(KEY).open(token, **BINDING) == sealed


def test_short_secret_key_is_refused():
    with pytest.raises(ValueError, match="at least 16 bytes"):
        Cipher(b"short")


# --- the probe -----------------------------------------------------------------------


def opener(item_id: str, token: str) -> Sealed | None:
    return Cipher(KEY).open(token, api_key="sk-test", model="gpt-5", item_id=item_id)


def reasoning(token: str, item_id: str = "rs_1") -> dict[str, Any]:
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
        "items": [
            {"index": 1, "id": "rs_1", "placement": "intact", "secret": "s3cr3t", "reason": None}
        ],
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
    assert report.to_json()["items"][0]["reason"] == "followers"


def test_probe_invalid_for_foreign_tokens_and_skips_reasoning_without_content():
    items = [
        reasoning(seal(api_key="sk-other")),
        {"type": "reasoning", "id": "rs_9", "summary": []},
        MESSAGE,
    ]
    report = probe(items, opener)
    assert (len(report.items), report.count("invalid"), report.secrets) == (1, 1, [])


def test_probe_fills_a_given_history_with_every_item():
    items = [USER, reasoning(seal()), MESSAGE, CALL, USER]
    history = History(instructions="Be brief.")
    given_history = probe(items, opener, history=history)
    assert given_history == probe(items, opener, instructions="Be brief.")
    assert history.digest() == history_digest(items, instructions="Be brief.")


# --- the sealed history --------------------------------------------------------------

INSTRUCTIONS = "Be brief."
USER_1 = {"role": "user", "content": "read a.txt"}
USER_2 = {"role": "user", "content": "now b.txt"}


def sealed_after(*history: object, instructions: str | None = INSTRUCTIONS) -> str:
    """A token for SEALED's followers, generated after ``history``."""
    digest = history_digest(history, instructions=instructions)
    return seal(Sealed(SEALED.secret, SEALED.followers, digest))


def probed(items: list[Any], instructions: str | None = INSTRUCTIONS) -> dict[str, Any]:
    return probe(items, opener, instructions=instructions).to_json()


def test_history_roundtrips_through_the_token_and_stays_hidden():
    digest = history_digest([USER_1], instructions=INSTRUCTIONS)
    token = seal(Sealed("s", (), digest))
    assert Cipher(KEY).open(token, **BINDING) == Sealed("s", (), digest)
    assert digest.encode() not in base64.urlsafe_b64decode(token)


def test_same_history_replay_is_intact():
    items = [USER_1, reasoning(sealed_after(USER_1)), MESSAGE, CALL, USER_2]
    report = probed(items)
    assert (report["intact"], report["misplaced"]) == (1, 0)
    assert report["items"][0]["reason"] is None


@pytest.mark.parametrize(
    ("before", "instructions"),
    [
        ([{"role": "user", "content": "read c.txt"}], INSTRUCTIONS),  # edited user message
        ([], INSTRUCTIONS),  # the earlier turn dropped
        ([USER_1, USER_1], INSTRUCTIONS),  # a message duplicated
        ([{"role": "system", "content": "read a.txt"}], INSTRUCTIONS),  # another role
        ([USER_1], "Be verbose."),  # other instructions
        ([USER_1], None),  # instructions dropped
    ],
    ids=["edited", "dropped", "duplicated", "role", "instructions", "no-instructions"],
)
def test_replay_after_a_different_history_is_misplaced_for_history(before, instructions):
    items = [*before, reasoning(sealed_after(USER_1)), MESSAGE, CALL]
    report = probed(items, instructions)
    assert (report["intact"], report["misplaced"], report["invalid"]) == (0, 1, 0)
    assert report["items"][0]["reason"] == "history"
    assert report["secrets"] == ["s3cr3t"]  # verified, just not in its place


def test_a_different_earlier_tool_result_is_misplaced():
    call = {"type": "function_call", "call_id": "call_0", "name": "read", "arguments": "{}"}
    result = {"type": "function_call_output", "call_id": "call_0", "output": "AAA"}
    token = sealed_after(USER_1, call, result)
    edited = {**result, "output": "BBB"}
    assert probed([USER_1, call, result, reasoning(token), MESSAGE, CALL])["intact"] == 1
    report = probed([USER_1, call, edited, reasoning(token), MESSAGE, CALL])
    assert report["items"][0]["reason"] == "history"


def test_what_follows_the_block_is_not_part_of_its_history():
    token = sealed_after(USER_1)
    result = {"type": "function_call_output", "call_id": "call_1", "output": "x"}
    for after in ([], [result], [result, USER_2], [USER_2, USER_2]):
        items = [USER_1, reasoning(token), MESSAGE, CALL, *after]
        assert probed(items)["intact"] == 1, after


def test_tokens_without_a_sealed_history_are_judged_by_followers_only():
    assert probed([USER_2, USER_2, reasoning(seal()), MESSAGE, CALL])["intact"] == 1


def test_followers_are_checked_before_history():
    items = [USER_2, reasoning(sealed_after(USER_1)), CALL, MESSAGE]
    assert probed(items)["items"][0]["reason"] == "followers"


VISIBLE_EQUIVALENTS = [
    # (as minted / replayed originally, as a relay might send it visibly)
    (
        {
            "type": "message",
            "role": "user",
            "id": "x",
            "content": [
                {"type": "input_text", "text": "look at "},
                {"type": "input_image", "image_url": "https://img/1.png", "detail": "high"},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look at "},
                {"type": "input_image", "image_url": "https://img/1.png", "detail": "auto"},
            ],
        },
    ),
    (
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"role": "user", "content": "hi"},
    ),
    (
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_9",
            "status": "completed",
            "phase": "final_answer",
            "content": [{"type": "output_text", "text": "Hi", "annotations": [], "logprobs": []}],
        },
        {"role": "assistant", "content": "Hi"},
    ),
    (
        {
            "type": "function_call",
            "id": "fc_9",
            "status": "completed",
            "call_id": "c",
            "name": "f",
            "arguments": '{"b": 1, "a": [1, 2]}',
        },
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"a":[1,2],"b":1}'},
    ),
    (
        {
            "type": "function_call_output",
            "id": "fco_1",
            "status": "completed",
            "call_id": "c",
            "output": "ok",
        },
        {"type": "function_call_output", "call_id": "c", "output": "ok"},
    ),
]


@pytest.mark.parametrize(("original", "visible"), VISIBLE_EQUIVALENTS)
def test_visible_form_digests_like_the_original(original, visible):
    assert history_digest([USER_1, original]) == history_digest([USER_1, visible])


def test_an_assistant_turn_is_one_unit_however_it_is_split():
    preamble = {"type": "message", "role": "assistant", "content": "Let me look. "}
    answer = {"type": "message", "role": "assistant", "content": "Found it."}
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    rs = {"type": "reasoning", "id": "rs_2", "summary": []}
    merged = {"role": "assistant", "content": "Let me look. Found it."}
    replayed = history_digest([USER_1, preamble, rs, answer, call])
    assert replayed == history_digest([USER_1, merged, call])
    assert replayed != history_digest([USER_1, merged])  # the call counts
    assert replayed != history_digest([USER_1, preamble, USER_2, answer, call])  # not one turn


@pytest.mark.parametrize(
    "change",
    [
        {"content": "read a.txt "},
        {"role": "developer"},
        {"type": "function_call_output", "call_id": "c", "output": "read a.txt"},
    ],
)
def test_visible_differences_change_the_digest(change):
    assert history_digest([USER_1]) != history_digest([{**USER_1, **change}])


def test_unparseable_arguments_are_compared_raw():
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{not json"}
    assert history_digest([call]) == history_digest([dict(call)])
    assert history_digest([call]) != history_digest([{**call, "arguments": "{not json "}])


def test_history_digest_can_be_taken_midway_and_forked():
    history = History(instructions=INSTRUCTIONS)
    history.add(USER_1)
    history.add(MESSAGE)
    midway = history.digest()
    fork = history.fork()
    history.add(CALL)
    assert midway == history_digest([USER_1, MESSAGE], instructions=INSTRUCTIONS)
    assert fork.digest() == midway
    assert history.digest() == history_digest([USER_1, MESSAGE, CALL], instructions=INSTRUCTIONS)


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
