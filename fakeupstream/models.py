"""``GET /v1/models``: the fake's model list, in OpenAI's shape.

The fake accepts any model name; these are the ones whose families it models (reasoning
models: gpt-5*, o-series, codex; ordinary ones: gpt-5-chat*, gpt-4.1, gpt-4o; see
:func:`fakeupstream.rules.is_reasoning_model`) and that the tests drive. Fixed
``created`` stamps keep the answer deterministic.
"""

from __future__ import annotations

from typing import Any, Final

from fakeupstream.answers import error_answer
from fakeupstream.handlers import JSON_TYPE, _Base
from fakeupstream.rules import ApiError, check_auth

# id -> (created, owned_by), as OpenAI lists them.
MODELS: Final[dict[str, tuple[int, str]]] = {
    "gpt-5": (1754425777, "system"),
    "gpt-5-mini": (1754425928, "system"),
    "gpt-5-nano": (1754426384, "system"),
    "gpt-5-codex": (1757527818, "system"),
    "gpt-5-chat-latest": (1754073306, "system"),
    "o3": (1744225308, "system"),
    "o4-mini": (1744225351, "system"),
    "gpt-4.1": (1744316542, "system"),
    "gpt-4o": (1715367049, "system"),
}


def model_list() -> dict[str, Any]:
    data = [
        {"id": model_id, "object": "model", "created": created, "owned_by": owner}
        for model_id, (created, owner) in MODELS.items()
    ]
    return {"object": "list", "data": data}


class ModelsHandler(_Base):
    """Authenticated like the model endpoints; counted in ``fake.models_listed``, not
    recorded (``fake.requests`` holds model calls only)."""

    def prepare(self) -> None:
        if self.request.method != "GET":
            self.send_invalid_url()

    def get(self) -> None:
        try:
            check_auth(self.request.headers.get("Authorization"), self.fake.api_keys)
        except ApiError as failure:
            answer = error_answer(failure)
            self.set_status(answer.status)
            self.set_header("Content-Type", JSON_TYPE)
            self.finish(answer.frames[0])
            return
        self.fake.models_listed += 1
        self.send_json(200, model_list())
