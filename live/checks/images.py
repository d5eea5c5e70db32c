"""Images: a shuffled exact-choice colour classification with a no-image control, through
the relay and by exact-body direct calls to the upstream.

The pictures are written here (:mod:`live.images`): a red PNG, a green JPEG and a blue
PNG square on white. Each question lists the answers in a shuffled order (seeded by the
run's seed) and allows ``none`` for the control, which has no picture.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from live.checks import check
from live.client import Message, chat_body
from live.context import CheckContext
from live.conversation import word
from live.fake_replies import say
from live.images import Picture, picture
from live.settings import Settings
from live.verdict import Verdict, expect, passed
from relay.core.scope import merged_include
from relay.settings.routing import resolve_model
from relay.translate.request import translate_request

ANSWERS = ("red", "green", "blue", "none")


@dataclass(frozen=True)
class Case:
    label: str
    picture: Picture | None
    answers: tuple[str, ...]  # in the order the question lists them

    @property
    def expected(self) -> str:
        return self.picture.colour if self.picture is not None else "none"

    def messages(self) -> list[Message]:
        question = (
            "What colour is the square in this picture? Answer with exactly one word from "
            f"this list: {', '.join(self.answers)}. If there is no picture, answer none."
        )
        content: list[dict[str, Any]] = [{"type": "text", "text": question}]
        if self.picture is not None:
            image = {"url": self.picture.data_url, "detail": "low"}
            content.append({"type": "image_url", "image_url": image})
        return [{"role": "user", "content": content}]


def cases(seed: int) -> list[Case]:
    rng = random.Random(seed)
    pictures: list[Picture | None] = [
        picture("red", "image/png"), picture("green", "image/jpeg"),
        picture("blue", "image/png"), None,
    ]  # fmt: skip
    rng.shuffle(pictures)
    found = []
    for pic in pictures:
        label = "no-image" if pic is None else f"{pic.colour}-{pic.media_type.split('/')[1]}"
        found.append(Case(label, pic, tuple(rng.sample(ANSWERS, len(ANSWERS)))))
    return found


def upstream_body(settings: Settings, case: Case) -> dict[str, Any]:
    """The Responses body the relay sends for ``case`` (cache on), built by the relay's own
    translation: what the exact-body direct call posts."""
    body = chat_body(settings, case.messages(), {})
    translated = translate_request(
        body, resolve_model(body["model"], {}), reasoning_summaries=False
    )
    upstream = dict(translated.upstream_body)
    upstream["store"] = False
    upstream["include"] = merged_include(upstream.get("include"))
    return upstream


def _without_stream(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "stream"}


@check("images_relay", "colour classification of generated images through the relay")
def images_relay(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    chat = ctx.client(relay)
    answers = []
    for case in cases(ctx.settings.seed):
        turn = chat.chat(case.label, case.messages(), script=say(case.expected))
        answers.append(f"{case.label}={word(turn.text)}")
        expect(word(turn.text) == case.expected, f"{case.label}: answered {turn.text[:60]!r}")
        if ctx.offline:
            sent = ctx.calls()[-1].get("body") or {}
            expect(
                _without_stream(sent) == upstream_body(ctx.settings, case),
                f"{case.label}: the relay's upstream body differs from the direct call's",
            )
    return passed(f"{len(answers)}/{len(answers)} exact: {', '.join(answers)}")


@check("images_direct", "the same classification by exact-body direct calls to the upstream")
def images_direct(ctx: CheckContext) -> Verdict:
    direct = ctx.direct()
    answers = []
    for case in cases(ctx.settings.seed):
        if ctx.run.fake is not None:
            ctx.run.fake.script(say(case.expected))
        turn = direct.responses(case.label, upstream_body(ctx.settings, case))
        answers.append(f"{case.label}={word(turn.text)}")
        expect(word(turn.text) == case.expected, f"{case.label}: answered {turn.text[:60]!r}")
    return passed(f"{len(answers)}/{len(answers)} exact: {', '.join(answers)}")
