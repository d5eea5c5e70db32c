"""The relay keeps the upstream's own error for a model it does not know."""

from __future__ import annotations

from live.checks import check
from live.context import CheckContext
from live.conversation import user
from live.fake_replies import http_error
from live.verdict import Verdict, expect, passed

UNKNOWN_MODEL = "no-such-model-relay-live"


@check("unknown_model_error", "an unknown model gets the upstream's error envelope")
def unknown_model_error(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    refusal = http_error(
        400,
        f"The requested model '{UNKNOWN_MODEL}' does not exist.",
        code="model_not_found",
        param="model",
    )
    turn = ctx.client(relay).chat(
        "unknown", [user("Reply with exactly the word: pong")], model=UNKNOWN_MODEL,
        script=refusal, expect_ok=False,
    )  # fmt: skip
    expect(turn.status in (400, 404), f"expected 400 or 404, got {turn.describe()}")
    envelope = turn.error if isinstance(turn.error, dict) else {}
    error = envelope.get("error", envelope)
    expect(
        isinstance(error, dict) and error.get("message") and error.get("type"),
        f"the error is not an OpenAI envelope: {turn.error!r}",
    )
    return passed(
        f"HTTP {turn.status} {error.get('code') or error.get('type')}: upstream's envelope"
    )
