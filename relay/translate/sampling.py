"""Which sampling parameters (``temperature``, ``top_p``) to forward upstream, per model.

Cursor sends ``temperature: 0`` on every request. OpenAI's reasoning models (GPT-5 family,
o-series, codex) accept only the default value 1 and answer anything else with a 400
(``unsupported_value``), so forwarding Cursor's value breaks every request; dropping it for
models that do honour it silently changes their behaviour. The relay therefore decides per
model family, from the table below, and an alias can override the decision
(``ModelAlias.sampling``: ``auto`` | ``forward`` | ``drop``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from relay.errors import InvalidRequest

# Everything that decides "does this model accept only the default sampling values" lives
# here. First matching pattern wins; patterns match the start of the normalized name (lower
# case, without any "provider/" prefix), so dated snapshots such as gpt-5-2025-08-07 follow
# their family. Names matching nothing are treated as ordinary models (forward as sent).
DEFAULT_ONLY_RULES: tuple[tuple[re.Pattern[str], bool], ...] = (
    (re.compile(r"gpt-5-chat"), False),  # the chat variant is not a reasoning model
    (re.compile(r"gpt-5(?!\d)"), True),  # gpt-5, gpt-5-mini, gpt-5.1, gpt-5-codex, ...
    (re.compile(r"o[134](?!\d)"), True),  # o1, o1-mini, o3-pro, o4-mini, ...
    (re.compile(r"codex-"), True),  # codex-mini-latest
)

# Accepted ranges (inclusive), as documented for Chat Completions.
SAMPLING_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
}

# The only value reasoning models accept; forwarding it is harmless, so it is kept.
DEFAULT_SAMPLING_VALUE = 1


def _normalize(model: str) -> str:
    return model.strip().lower().rsplit("/", 1)[-1]


def is_reasoning_model(model: str) -> bool:
    """True when ``model`` belongs to a family that rejects non-default sampling values."""
    name = _normalize(model)
    for pattern, default_only in DEFAULT_ONLY_RULES:
        if pattern.match(name):
            return default_only
    return False


def _validated(body: Mapping[str, Any]) -> dict[str, float]:
    """The sampling values present in ``body`` (null means absent), checked for type and range."""
    values: dict[str, float] = {}
    for name, (low, high) in SAMPLING_RANGES.items():
        value = body.get(name)
        if value is None:
            continue
        # bool is an int subclass; true/false is not a number here.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidRequest(
                f"'{name}' must be a number from {low:g} to {high:g}; got {type(value).__name__}",
                param=name,
            )
        if not low <= value <= high:  # also rejects NaN
            raise InvalidRequest(
                f"'{name}' must be from {low:g} to {high:g}; got {value!r}", param=name
            )
        values[name] = value
    return values


def sampling_params(body: Mapping[str, Any], model: str, policy: str) -> dict[str, Any]:
    """The ``temperature``/``top_p`` entries to put into the upstream body.

    ``policy`` is the alias's sampling policy: ``forward`` sends what the client sent,
    ``drop`` sends nothing, ``auto`` drops non-default values for reasoning models only.
    Values are validated whatever the policy: a malformed value is a client error.
    """
    values = _validated(body)
    if policy == "forward":
        return dict(values)
    if policy == "drop":
        return {}
    if policy != "auto":
        raise ValueError(f"unknown sampling policy {policy!r}; expected auto, forward or drop")
    if not is_reasoning_model(model):
        return dict(values)
    return {name: value for name, value in values.items() if value == DEFAULT_SAMPLING_VALUE}
