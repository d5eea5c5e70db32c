"""The replay-rejection matcher against every refusal string OpenAI sends (and the fake
reproduces), the answers that are not refusals, and the redaction of quoted ciphertext."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.rejection import RejectionKind, classify_rejection, redact_ciphertext

REPLAYED = frozenset({"rs_0a1b2c3d4e5f", "msg_0a1b2c3d4e5f", "fc_0a1b2c3d4e5f"})


def envelope(message: str, code: str | None = None, etype: str = "invalid_request_error") -> Any:
    return {"error": {"message": message, "type": etype, "param": None, "code": code}}


REFUSALS = [
    (
        400,
        envelope("The encrypted content gAAAAABpZ0x1... could not be verified.",
                 "invalid_encrypted_content"),
        RejectionKind.INVALID_ENCRYPTED_CONTENT,
    ),
    (  # the variant with code null: matched by its text
        400,
        envelope("The encrypted content gAAAAABpZ0x1... could not be verified. Reason: "
                 "Encrypted content could not be decrypted or parsed."),
        RejectionKind.INVALID_ENCRYPTED_CONTENT,
    ),
    (
        400,
        envelope("The encrypted content for item rs_0a1b2c3d4e5f could not be verified."),
        RejectionKind.INVALID_ENCRYPTED_CONTENT,
    ),
    (
        404,
        envelope("Item with id 'rs_0a1b2c3d4e5f' not found. Items are not persisted when "
                 "`store` is set to false. Try again with `store` set to true, or remove this "
                 "item from your input."),
        RejectionKind.ITEM_NOT_FOUND,
    ),
    (
        400,
        envelope("Item 'rs_0a1b2c3d4e5f' of type 'reasoning' was provided without its "
                 "required following item."),
        RejectionKind.MISSING_FOLLOWING_ITEM,
    ),
    (
        400,
        envelope("Item 'fc_0a1b2c3d4e5f' of type 'function_call' was provided without its "
                 "required 'reasoning' item: 'rs_0a1b2c3d4e5f'."),
        RejectionKind.MISSING_REASONING_ITEM,
    ),
    (
        400,
        envelope("Item 'msg_0a1b2c3d4e5f' of type 'message' was provided without its "
                 "required 'reasoning' item: 'rs_0a1b2c3d4e5f'."),
        RejectionKind.MISSING_REASONING_ITEM,
    ),
    (
        400,
        envelope("Duplicate item found with id rs_0a1b2c3d4e5f. Remove duplicate items from "
                 "your input and try again."),
        RejectionKind.DUPLICATE_ITEM,
    ),
    (  # any other 4xx that names an item the relay replayed
        400,
        envelope("Invalid 'input[3]': item msg_0a1b2c3d4e5f has an unexpected status."),
        RejectionKind.NAMES_REPLAYED_ITEM,
    ),
]  # fmt: skip


@pytest.mark.parametrize(("status", "answer", "kind"), REFUSALS)
def test_each_refusal_is_recognised(status: int, answer: Any, kind: RejectionKind) -> None:
    assert classify_rejection(status, answer, REPLAYED) is kind


@pytest.mark.parametrize(("status", "answer", "kind"), REFUSALS)
def test_nothing_replayed_means_no_rejection(status: int, answer: Any, kind: RejectionKind) -> None:
    assert classify_rejection(status, answer, frozenset()) is None


NOT_REFUSALS = [
    (400, envelope("Unsupported parameter: 'temperature' is not supported with this model.")),
    (400, envelope("No tool output found for function call call_abc123.")),
    (400, envelope("No tool call found for function call output with call_id call_abc123.")),
    (400, envelope("Encrypted content is not supported with this model.")),
    (404, envelope("Previous response with id 'resp_0a1b2c3d4e5f' not found.",
                   "previous_response_not_found")),
    (400, envelope("Item 'rs_ffffffffffff' is malformed.")),  # names an item not replayed
    (401, envelope("Incorrect API key provided.", "invalid_api_key")),
    (429, envelope("Rate limit reached.", "rate_limit_exceeded")),
    (500, envelope("The encrypted content gAAAA... could not be verified.",
                   "invalid_encrypted_content")),  # 5xx: a server fault, not a refusal
    (502, envelope("Item with id 'rs_0a1b2c3d4e5f' not found.")),
    (400, {"error": "overloaded"}),
    (400, {}),
    (400, {"error": {"message": None, "code": None}}),
]  # fmt: skip


@pytest.mark.parametrize(("status", "answer"), NOT_REFUSALS)
def test_other_errors_are_ordinary_failures(status: int, answer: Any) -> None:
    assert classify_rejection(status, answer, REPLAYED) is None


@given(
    status=st.integers(100, 599),
    message=st.text(max_size=200),
    code=st.one_of(st.none(), st.text(max_size=30)),
)
def test_the_matcher_is_total_and_needs_a_4xx(status: int, message: str, code: str | None) -> None:
    kind = classify_rejection(status, envelope(message, code), REPLAYED)
    assert kind is None or 400 <= status < 500


@pytest.mark.parametrize(
    ("message", "redacted"),
    [
        (
            "The encrypted content gAAAAABpZ0x1... could not be verified.",
            "The encrypted content <redacted> could not be verified.",
        ),
        (
            "The encrypted content for item rs_0a1b2c3d4e5f could not be verified.",
            "The encrypted content for item rs_0a1b2c3d4e5f could not be verified.",
        ),
        ("Duplicate item found with id rs_1.", "Duplicate item found with id rs_1."),
    ],
)
def test_quoted_ciphertext_is_redacted(message: str, redacted: str) -> None:
    assert redact_ciphertext(message) == redacted


@given(token=st.from_regex(r"gAAAAA[A-Za-z0-9_=-]{4,40}", fullmatch=True))
def test_no_quoted_token_survives(token: str) -> None:
    message = f"The encrypted content {token}... could not be verified."
    assert token not in redact_ciphertext(message)
