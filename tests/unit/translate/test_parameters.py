"""relay.translate.parameters: the parameter policy and the scalar controls, one rule
per test, exact outputs.
"""

from __future__ import annotations

from typing import Any

import pytest

from relay.errors import InvalidRequest, UnsupportedParameter
from relay.settings.model_alias import ModelAlias
from relay.translate.parameters import droppable_in
from tests.support.chat_cases import GPT4O, GPT5, chat, translate, upstream, user, user_item

# --- output controls ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "text"),
    [
        ({"response_format": {"type": "text"}}, None),
        ({"response_format": None}, None),
        ({"response_format": {"type": "json_object"}}, {"format": {"type": "json_object"}}),
        (
            {"response_format": {"type": "json_schema", "json_schema": {
                "name": "answer", "schema": {"type": "object"}, "strict": True,
                "description": "The answer"}}},
            {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"},
                        "description": "The answer", "strict": True}},
        ),
        (
            {"response_format": {"type": "json_schema",
                                 "json_schema": {"name": "a", "schema": {}}}},
            {"format": {"type": "json_schema", "name": "a", "schema": {}}},
        ),
        ({"verbosity": "low"}, {"verbosity": "low"}),
        ({"verbosity": "high", "response_format": {"type": "json_object"}},
         {"verbosity": "high", "format": {"type": "json_object"}}),
    ],
)  # fmt: skip
def test_response_format(params: dict[str, Any], text: Any) -> None:
    assert upstream(chat(user(), **params)).get("text") == text


@pytest.mark.parametrize(
    ("response_format", "param"),
    [
        ("json", "response_format"),
        ({"type": "yaml"}, "response_format.type"),
        ({"type": "json_schema"}, "response_format.json_schema"),
        ({"type": "json_schema", "json_schema": {"schema": {}}},
         "response_format.json_schema.name"),
        ({"type": "json_schema", "json_schema": {"name": "a"}},
         "response_format.json_schema.schema"),
        ({"type": "json_schema", "json_schema": {"name": "a", "schema": {}, "strict": 1}},
         "response_format.json_schema.strict"),
    ],
)  # fmt: skip
def test_invalid_response_format(response_format: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        translate(chat(user(), response_format=response_format))
    assert info.value.param == param


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"max_tokens": 100}, 100),
        ({"max_completion_tokens": 200}, 200),
        ({"max_tokens": 300, "max_completion_tokens": 300}, 300),
        ({"max_tokens": None, "max_completion_tokens": 50}, 50),
        ({}, None),
    ],
)
def test_max_output_tokens(params: dict[str, Any], expected: int | None) -> None:
    assert upstream(chat(user(), **params)).get("max_output_tokens") == expected


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"max_tokens": 100, "max_completion_tokens": 200}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": "10"}, "max_completion_tokens"),
        ({"max_completion_tokens": 1.5}, "max_completion_tokens"),
        ({"max_completion_tokens": True}, "max_completion_tokens"),
    ],
)
def test_invalid_max_tokens(params: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        translate(chat(user(), **params))
    assert info.value.param == param


# --- reasoning -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "target", "summaries", "expected"),
    [
        ({}, GPT5, False, None),
        ({"reasoning_effort": "low"}, GPT5, False, {"effort": "low"}),
        ({"reasoning": {"effort": "minimal"}}, GPT5, False, {"effort": "minimal"}),
        # both given and different: the documented Chat field wins
        ({"reasoning_effort": "high", "reasoning": {"effort": "minimal"}}, GPT5, False,
         {"effort": "high"}),
        ({"reasoning": {"effort": "low", "summary": "detailed"}}, GPT5, False,
         {"effort": "low", "summary": "detailed"}),
        ({"reasoning_effort": "high", "reasoning": {"summary": "concise"}}, GPT5, False,
         {"effort": "high", "summary": "concise"}),
        # alias defaults fill what the request left out
        ({}, ModelAlias("gpt-high", "gpt-5", "high"), False, {"effort": "high"}),
        ({"reasoning_effort": "low"}, ModelAlias("gpt-high", "gpt-5", "high"), False,
         {"effort": "low"}),
        ({}, ModelAlias("g", "gpt-5", None, "concise"), False, {"summary": "concise"}),
        # summaries streamed to the client: ask for them on reasoning models only
        ({}, GPT5, True, {"summary": "auto"}),
        ({"reasoning_effort": "low"}, GPT5, True, {"effort": "low", "summary": "auto"}),
        ({}, ModelAlias("g", "gpt-5", None, "detailed"), True, {"summary": "detailed"}),
        ({}, GPT4O, True, None),
        ({"reasoning": {"summary": "none"}}, GPT5, True, None),
        ({}, ModelAlias("g", "gpt-5", "low", "none"), True, {"effort": "low"}),
        ({"reasoning_effort": None, "reasoning": None}, GPT5, False, None),
    ],
)  # fmt: skip
def test_reasoning(
    params: dict[str, Any], target: ModelAlias, summaries: bool, expected: Any
) -> None:
    assert (
        upstream(chat(user(), **params), target=target, summaries=summaries).get("reasoning")
        == expected
    )


@pytest.mark.parametrize(
    ("params", "param", "error"),
    [
        ({"reasoning_effort": 3}, "reasoning_effort", InvalidRequest),
        ({"reasoning": "high"}, "reasoning", InvalidRequest),
        ({"reasoning": {"effort": 1}}, "reasoning.effort", InvalidRequest),
        ({"reasoning": {"summary": True}}, "reasoning.summary", InvalidRequest),
        ({"reasoning": {"generate_summary": "auto"}}, "reasoning.generate_summary",
         UnsupportedParameter),
    ],
)  # fmt: skip
def test_invalid_reasoning(params: dict[str, Any], param: str, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        translate(chat(user(), **params))
    assert type(info.value) is error
    assert info.value.param == param  # type: ignore[attr-defined]


# --- sampling ------------------------------------------------------------------------------


def test_cursor_temperature_zero_is_dropped_for_gpt5() -> None:
    assert "temperature" not in upstream(chat(user(), temperature=0))


def test_temperature_is_forwarded_for_non_reasoning_models() -> None:
    out = upstream({"model": "gpt-4o", "messages": [user()], "temperature": 0, "top_p": 0.5},
                   target=GPT4O)  # fmt: skip
    assert (out["temperature"], out["top_p"]) == (0, 0.5)


def test_alias_sampling_policy_overrides_the_family_rule() -> None:
    alias = ModelAlias("gpt-5", "gpt-5", sampling="forward")
    assert upstream(chat(user(), temperature=0), target=alias)["temperature"] == 0


def test_invalid_temperature() -> None:
    with pytest.raises(InvalidRequest) as info:
        translate(chat(user(), temperature=3))
    assert info.value.param == "temperature"


# --- parameters without a Responses equivalent ------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("n", 2),
        ("n", "1"),
        ("stop", "\n"),
        ("stop", ["END"]),
        ("logit_bias", {"50256": -100}),
        ("logprobs", True),
        ("top_logprobs", 2),
        ("presence_penalty", 0.5),
        ("frequency_penalty", -1),
        ("seed", 42),
        ("functions", [{"name": "f"}]),
        ("function_call", "auto"),
        ("audio", {"voice": "alloy", "format": "wav"}),
        ("modalities", ["text", "audio"]),
        ("prediction", {"type": "content", "content": "x"}),
        ("web_search_options", {}),
        ("best_of", 2),
        ("foo", "bar"),
        ("previous_response_id", "resp_1"),
    ],
)
def test_unsupported_parameters_name_the_key(key: str, value: Any) -> None:
    with pytest.raises(UnsupportedParameter) as info:
        translate(chat(user(), **{key: value}))
    assert info.value.param == key
    assert f"'{key}'" in info.value.message
    assert "remove" in info.value.message or "send" in info.value.message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("n", 1),
        ("n", None),
        ("stop", None),
        ("stop", []),
        ("logit_bias", {}),
        ("logprobs", False),
        ("top_logprobs", 0),
        ("presence_penalty", 0),
        ("frequency_penalty", 0.0),
        ("seed", None),
        ("functions", None),
        ("function_call", None),
        ("audio", None),
        ("modalities", ["text"]),
        ("prediction", None),
        ("web_search_options", None),
    ],
)
def test_neutral_values_are_accepted_and_not_forwarded(key: str, value: Any) -> None:
    assert upstream(chat(user(), **{key: value})) == {"model": "gpt-5", "input": [user_item()]}


@pytest.mark.parametrize(("extra", "dropped"), [
    ({}, ()),
    ({"stop": "\n", "seed": 1}, ("seed", "stop")),
    ({"n": 2, "logprobs": True, "top_logprobs": 3}, ("logprobs", "n", "top_logprobs")),
    ({"presence_penalty": 0.5, "frequency_penalty": 0.1, "logit_bias": {"1": 2}},
     ("frequency_penalty", "logit_bias", "presence_penalty")),
    ({"prediction": {"type": "content", "content": "x"}}, ("prediction",)),
    ({"n": 1, "stop": [], "seed": None, "logprobs": False}, ()),  # neutral: nothing to drop
    ({"functions": [{"name": "f"}], "audio": {"voice": "a"}, "foo": 1}, ()),  # never dropped
])  # fmt: skip
def test_what_the_opt_in_may_drop(extra: dict[str, Any], dropped: tuple[str, ...]) -> None:
    assert droppable_in(chat(user(), **extra)) == dropped


def test_a_droppable_parameter_s_400_names_the_opt_in() -> None:
    with pytest.raises(UnsupportedParameter) as info:
        translate(chat(user(), stop="END"))
    assert info.value.message.endswith(
        "remove 'stop' (or start the relay with RELAY_DROP_UNSUPPORTED_PARAMS=1 to drop it)"
    )
    with pytest.raises(UnsupportedParameter) as info:
        translate(chat(user(), functions=[{"name": "f"}]))
    assert "RELAY_DROP_UNSUPPORTED_PARAMS" not in info.value.message
