"""fakeupstream.rules: each OpenAI rejection, with its status, text, param and code."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from fakeupstream.ciphertext import Cipher, Follower, Ledger, Sealed, text_digest
from fakeupstream.rules import (
    ApiError,
    check_auth,
    is_reasoning_model,
    mask_key,
    parse_body,
    validate,
)

KEY = "sk-test-key"
CIPHER = Cipher(b"s" * 32)


def token(
    item_id: str = "rs_1",
    *,
    model: str = "gpt-5",
    api_key: str = KEY,
    followers: Iterable[Follower] = (),
) -> str:
    sealed = Sealed("secret", tuple(followers))
    return CIPHER.seal(
        sealed, api_key=api_key, model=model, item_id=item_id, nonce=b"0" * 16, issued_at=1
    )


def run(body: dict[str, Any], ledger: Ledger | None = None) -> None:
    model = str(body.get("model"))

    def open_token(item_id: str, value: str) -> Sealed | None:
        return CIPHER.open(value, api_key=KEY, model=model, item_id=item_id)

    validate(body, open_token=open_token, ledger=ledger or Ledger())


def reject(body: dict[str, Any], ledger: Ledger | None = None) -> ApiError:
    with pytest.raises(ApiError) as caught:
        run(body, ledger)
    return caught.value


def body(*items: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-5", "input": list(items), "store": False, **extra}


USER = {"role": "user", "content": "hi"}


def rs(item_id: str = "rs_1", **extra: Any) -> dict[str, Any]:
    return {"type": "reasoning", "id": item_id, "summary": [], "encrypted_content": token(item_id)}


def msg(text: str = "Hello", **extra: Any) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": text, **extra}


def call(call_id: str = "call_1", **extra: Any) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}", **extra}


def output(call_id: str = "call_1") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


# --- auth ----------------------------------------------------------------------------


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer   ", "Basic abc", "sk-abc"])
def test_missing_key_is_401_with_openais_text(header):
    with pytest.raises(ApiError) as caught:
        check_auth(header, None)
    error = caught.value
    assert error.status == 401
    assert error.envelope() == {
        "error": {
            "message": "You didn't provide an API key. You need to provide your API key in an "
            "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or "
            "as the password field (with blank username) if you're accessing the API from your "
            "browser and are prompted for a username and password. You can obtain an API key "
            "from https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }


def test_any_key_is_accepted_without_a_key_list():
    assert check_auth("Bearer whatever", None) == "whatever"


def test_wrong_key_is_401_invalid_api_key_with_a_masked_key():
    with pytest.raises(ApiError) as caught:
        check_auth("Bearer sk-abcdefghijklmnop1234", ["sk-right"])
    error = caught.value
    assert (error.status, error.code, error.param) == (401, "invalid_api_key", None)
    assert error.message == (
        "Incorrect API key provided: sk-ab**************1234. "
        "You can find your API key at https://platform.openai.com/account/api-keys."
    )
    assert check_auth("bearer sk-right", ["sk-right"]) == "sk-right"


def test_mask_key_never_shows_the_middle():
    assert mask_key("sk-abcdefghijklmnop1234") == "sk-ab**************1234"
    assert mask_key("sk-xxxxxx") == "sk-xxxxxx"  # as OpenAI echoes short junk keys


# --- body ----------------------------------------------------------------------------

JSON_HINT = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
    "using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was "
    "sent was not valid JSON. If you have trouble figuring out how to fix this, please "
    "contact us through our help center at help.openai.com.)"
)


@pytest.mark.parametrize("raw", [b"", b"{", b"\xff\xfe", b'{"a": 1}}', b"[" * 100_000])
def test_unparseable_body_is_400_with_the_hint(raw):
    with pytest.raises(ApiError) as caught:
        parse_body(raw)
    assert (caught.value.status, caught.value.message) == (400, JSON_HINT)


def test_non_object_body_is_400_invalid_type():
    with pytest.raises(ApiError) as caught:
        parse_body(b"[1, 2]")
    assert (
        caught.value.message
        == "Invalid type for 'body': expected an object, but got an array instead."
    )
    assert caught.value.code == "invalid_type"


# --- parameters ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "message", "param", "code"),
    [
        ({"input": "hi"}, "Missing required parameter: 'model'.", "model", "missing_required_parameter"),
        ({"model": "gpt-5"}, "Missing required parameter: 'input'.", "input", "missing_required_parameter"),
        ({"model": 5, "input": "hi"}, "Invalid type for 'model': expected a string, but got an integer instead.", "model", "invalid_type"),
        ({"model": "gpt-5", "input": {"a": 1}}, "Invalid type for 'input': expected one of a string or array of input items, but got an object instead.", "input", "invalid_type"),
        ({"model": "gpt-5", "input": "hi", "n": 2}, "Unknown parameter: 'n'.", "n", "unknown_parameter"),
        ({"model": "gpt-5", "input": "hi", "stream": "yes"}, "Invalid type for 'stream': expected a boolean, but got a string instead.", "stream", "invalid_type"),
        ({"model": "gpt-4.1", "input": "hi", "temperature": 3}, "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 3 instead.", "temperature", "decimal_above_max_value"),
        ({"model": "gpt-5", "input": "hi", "include": ["nope"]}, "Invalid value: 'nope'. Supported values are: 'code_interpreter_call.outputs', 'computer_call_output.output.image_url', 'file_search_call.results', 'message.input_image.image_url', 'message.output_text.logprobs', 'reasoning.encrypted_content', and 'web_search_call.action.sources'.", "include[0]", "invalid_value"),
    ],
    ids=["no-model", "no-input", "model-type", "input-type", "unknown", "stream-type", "temp-range", "include"],
)  # fmt: skip
def test_parameter_errors(payload, message, param, code):
    error = reject(payload)
    assert (error.status, error.message, error.param, error.code) == (400, message, param, code)


CURSOR_FIELDS = {
    "store": False, "include": ["reasoning.encrypted_content"], "truncation": "auto",
    "prompt_cache_retention": "24h", "prompt_cache_key": "k",
    "reasoning": {"effort": "medium", "summary": "auto", "context": "all_turns"},
    "text": {"verbosity": "low"}, "stream_options": {"include_obfuscation": False},
}  # fmt: skip


def test_todays_cursor_fields_are_accepted_as_openai_accepts_them():
    run({"model": "gpt-5", "input": "hi", **CURSOR_FIELDS})


@pytest.mark.parametrize(
    ("extra", "message", "param", "code"),
    [
        ({"stream_options": {"include_usage": True}},
         "Unknown parameter: 'stream_options.include_usage'.", "stream_options.include_usage",
         "unknown_parameter"),
        ({"truncation": "on"}, "Invalid value: 'on'. Supported values are: 'auto' and 'disabled'.",
         "truncation", "invalid_value"),
        ({"prompt_cache_retention": "1h"},
         "Invalid value: '1h'. Supported values are: 'in-memory' and '24h'.",
         "prompt_cache_retention", "invalid_value"),
        ({"reasoning": {"context": "everything"}},
         "Invalid value: 'everything'. Supported values are: 'auto', 'all_turns', and "
         "'current_turn'.", "reasoning.context", "invalid_value"),
        ({"reasoning": {"depth": 3}}, "Unknown parameter: 'reasoning.depth'.",
         "reasoning.depth", "unknown_parameter"),
        ({"text": {"verbosity": "chatty"}},
         "Invalid value: 'chatty'. Supported values are: 'low', 'medium', and 'high'.",
         "text.verbosity", "invalid_value"),
    ],
)  # fmt: skip
def test_option_errors(extra, message, param, code):
    error = reject({"model": "gpt-5", "input": "hi", **extra})
    assert (error.status, error.message, error.param, error.code) == (400, message, param, code)


@pytest.mark.parametrize(
    ("model", "name", "value", "shown"),
    [
        ("gpt-5", "temperature", 0, "0"),
        ("gpt-5-mini", "temperature", 0.7, "0.7"),
        ("o3", "top_p", 0.5, "0.5"),
        ("o4-mini", "temperature", 0.0, "0"),
        ("gpt-5.1-codex", "temperature", 2, "2"),
        ("codex-mini-latest", "top_p", 0.9, "0.9"),
    ],
)
def test_reasoning_models_reject_non_default_sampling(model, name, value, shown):
    error = reject({"model": model, "input": "hi", name: value})
    assert error.message == (
        f"Unsupported value: '{name}' does not support {shown} with this model. "
        "Only the default (1) value is supported."
    )
    assert (error.status, error.type, error.param, error.code) == (
        400,
        "invalid_request_error",
        name,
        "unsupported_value",
    )


@pytest.mark.parametrize("model", ["gpt-5", "o3", "gpt-4.1", "gpt-5-chat-latest"])
def test_default_sampling_is_accepted_everywhere(model):
    run({"model": model, "input": "hi", "temperature": 1, "top_p": 1.0})


@pytest.mark.parametrize("model", ["gpt-4.1", "gpt-4o", "gpt-5-chat-latest"])
def test_ordinary_models_accept_any_temperature(model):
    run({"model": model, "input": "hi", "temperature": 0, "top_p": 0.5})


def test_model_families():
    reasoning = ["gpt-5", "gpt-5-mini", "gpt-5.1", "gpt-5-codex", "o1", "o3-pro", "o4-mini"]
    ordinary = ["gpt-5-chat-latest", "gpt-4.1", "gpt-4o", "o10", "chatgpt-4o-latest"]
    assert all(is_reasoning_model(m) for m in [*reasoning, "codex-mini-latest"])
    assert not any(is_reasoning_model(m) for m in ordinary)


def test_ordinary_models_reject_reasoning_and_encrypted_content():
    error = reject({"model": "gpt-4.1", "input": "hi", "reasoning": {"effort": "low"}})
    assert (
        error.message
        == "Unsupported parameter: 'reasoning.effort' is not supported with this model."
    )
    error = reject({"model": "gpt-4.1", "input": "hi", "include": ["reasoning.encrypted_content"]})
    assert (error.message, error.param) == (
        "Encrypted content is not supported with this model.",
        "include",
    )


# --- input items ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "message", "param", "code"),
    [
        ("hi", "Invalid type for 'input[0]': expected an object, but got a string instead.", "input[0]", "invalid_type"),
        ({"role": "tool", "content": "x"}, "Invalid value: 'tool'. Supported values are: 'assistant', 'system', 'developer', and 'user'.", "input[0].role", "invalid_value"),
        ({"role": "user"}, "Missing required parameter: 'input[0].content'.", "input[0].content", "missing_required_parameter"),
        ({"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}, "Invalid value: 'input_text'. Supported values are: 'output_text' and 'refusal'.", "input[0].content[0].type", "invalid_value"),
        ({"role": "user", "content": [{"type": "input_image", "image_url": {"url": "http://x"}}]}, "Invalid type for 'input[0].content[0].image_url': expected a string, but got an object instead.", "input[0].content[0].image_url", "invalid_type"),
        ({"type": "reasoning", "id": "rs_1"}, "Missing required parameter: 'input[0].summary'.", "input[0].summary", "missing_required_parameter"),
        ({"type": "function_call", "id": "call_1", "call_id": "call_1", "name": "f", "arguments": "{}"}, "Invalid 'input[0].id': 'call_1'. Expected an ID that begins with 'fc'.", "input[0].id", "invalid_value"),
        ({"type": "function_call", "call_id": "call_1", "name": "f", "arguments": {}}, "Invalid type for 'input[0].arguments': expected a string, but got an object instead.", "input[0].arguments", "invalid_type"),
        ({"type": "function_call_output", "call_id": "call_1"}, "Missing required parameter: 'input[0].output'.", "input[0].output", "missing_required_parameter"),
    ],
    ids=["not-object", "role", "content", "assistant-part", "image-url", "summary", "fc-id", "arguments", "output"],
)  # fmt: skip
def test_item_shape_errors(item, message, param, code):
    error = reject({"model": "gpt-5", "input": [item]})
    assert (error.status, error.message, error.param, error.code) == (400, message, param, code)


def test_unknown_item_type_lists_what_is_supported():
    error = reject({"model": "gpt-5", "input": [{"type": "thought"}]})
    assert error.message.startswith("Invalid value: 'thought'. Supported values are: 'message',")
    assert error.param == "input[0].type"


@pytest.mark.parametrize("item_id", [[], {}, 7])
def test_an_unchecked_item_type_still_needs_a_string_id(item_id):
    # item_reference is not shape-checked, but its id is a lookup key (found by the fuzz
    # test: an array id was a 500).
    error = reject({"model": "gpt-5", "input": [{"type": "item_reference", "id": item_id}]})
    assert (error.status, error.param, error.code) == (400, "input[0].id", "invalid_type")
    assert error.message.startswith("Invalid type for 'input[0].id': expected a string")


# --- replay rules --------------------------------------------------------------------


def test_well_formed_replay_passes():
    run(body(USER, rs(), msg(), call(), output(), USER))


def test_duplicate_ids():
    error = reject(body(USER, rs(), msg(id="msg_1"), rs(), msg(id="msg_2")))
    assert error.status == 400
    assert error.message == (
        "Duplicate item found with id rs_1. Remove duplicate items from your input and try again."
    )


@pytest.mark.parametrize(
    "bad",
    [
        token("rs_1", api_key="sk-someone-else"),
        token("rs_1", model="gpt-5-mini"),
        token("rs_other"),
        "gAAAAABnot-a-token-we-minted",
    ],
    ids=["other-key", "other-model", "other-item", "forged"],
)
def test_ciphertext_the_fake_did_not_mint_for_this_binding(bad):
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": bad}
    error = reject(body(USER, item, msg()))
    assert (error.status, error.code, error.param) == (400, "invalid_encrypted_content", None)
    assert error.message == f"The encrypted content {bad[:12]}... could not be verified."


def test_reasoning_by_id_without_content_under_store_false_is_404():
    error = reject(body(USER, {"type": "reasoning", "id": "rs_1", "summary": []}, msg()))
    assert error.status == 404
    assert error.message == (
        "Item with id 'rs_1' not found. Items are not persisted when `store` is set to false. "
        "Try again with `store` set to true, or remove this item from your input."
    )


def test_reasoning_by_id_is_found_when_stored():
    ledger = Ledger()
    ledger.record("resp_1", [{"id": "rs_1", "type": "reasoning"}], store=True)
    plain = {"type": "reasoning", "id": "rs_1", "summary": []}
    run({"model": "gpt-5", "input": [USER, plain, msg()]}, ledger)
    error = reject({"model": "gpt-5", "input": [USER, {**plain, "id": "rs_2"}, msg()]}, ledger)
    assert (error.status, error.message) == (404, "Item with id 'rs_2' not found.")


def test_unknown_previous_response_is_404():
    error = reject({"model": "gpt-5", "previous_response_id": "resp_x"})
    assert (error.status, error.code) == (404, "previous_response_not_found")
    assert error.message == "Previous response with id 'resp_x' not found."


@pytest.mark.parametrize(
    "items",
    [[USER, rs()], [USER, rs(), USER], [USER, rs(), output()]],
    ids=["last", "before-user", "before-output"],
)
def test_reasoning_without_its_following_item(items):
    error = reject(body(*items))
    assert error.message == (
        "Item 'rs_1' of type 'reasoning' was provided without its required following item."
    )


def test_item_without_the_reasoning_it_was_minted_with():
    ledger = Ledger()
    output_items = [{"id": "rs_1", "type": "reasoning"}, {"id": "fc_1", "type": "function_call"}]
    ledger.record("resp_1", output_items, store=False)
    error = reject(body(USER, call(id="fc_1"), output()), ledger)
    assert error.message == (
        "Item 'fc_1' of type 'function_call' was provided without its required 'reasoning' "
        "item: 'rs_1'."
    )
    ledger.record(
        "resp_2",
        [{"id": "rs_2", "type": "reasoning"}, {"id": "msg_2", "type": "message"}],
        store=False,
    )
    error = reject(body(USER, msg(id="msg_2"), USER), ledger)
    assert error.message == (
        "Item 'msg_2' of type 'message' was provided without its required 'reasoning' item: 'rs_2'."
    )
    run(body(USER, call(), output()), ledger)  # without ids nothing is required


def test_orphan_function_call_output():
    error = reject(body(USER, output("call_9")))
    assert error.message == "No tool call found for function call output with call_id call_9."
    error = reject(body(USER, output("call_1"), call("call_1")))  # the output comes first
    assert error.message == "No tool call found for function call output with call_id call_1."


def custom(call_id: str = "call_1") -> dict[str, Any]:
    return {"type": "custom_tool_call", "call_id": call_id, "name": "ApplyPatch", "input": "p"}


def custom_output(call_id: str = "call_1") -> dict[str, Any]:
    return {"type": "custom_tool_call_output", "call_id": call_id, "output": "ok"}


@pytest.mark.parametrize(
    ("items", "message"),
    [
        # A custom call answered as a function (the relay must convert): both texts as OpenAI.
        ([USER, custom("call_1"), output("call_1"), USER],
         "No tool call found for function call output with call_id call_1."),
        ([USER, custom("call_1"), USER], "No tool output found for custom tool call call_1."),
        ([USER, call("call_1"), custom_output("call_1"), USER],
         "No tool call found for custom tool call output with call_id call_1."),
        ([USER, custom_output("call_7")],
         "No tool call found for custom tool call output with call_id call_7."),
    ],
)  # fmt: skip
def test_outputs_pair_only_with_calls_of_their_own_kind(items, message):
    error = reject(body(*items))
    assert (error.status, error.message, error.param) == (400, message, "input")


def test_custom_calls_with_their_outputs_pass_and_trailing_ones_may_wait():
    run(body(USER, custom("call_1"), call("call_2"), custom_output("call_1"), output("call_2")))
    run(body(USER, custom("call_1"), call("call_2")))


@pytest.mark.parametrize(
    ("tool", "choice", "message"),
    [
        ({"type": "custom"}, None, "Missing required parameter: 'tools[0].name'."),
        ({"type": "custom", "name": "P", "format": {"type": "json"}}, None,
         "Invalid value: 'json'. Supported values are: 'text' and 'grammar'."),
        ({"type": "custom", "name": "P", "format": {"type": "grammar", "syntax": "ebnf",
                                                    "definition": "x"}}, None,
         "Invalid value: 'ebnf'. Supported values are: 'lark' and 'regex'."),
        ({"type": "custom", "name": "P", "format": {"type": "grammar", "syntax": "lark"}}, None,
         "Missing required parameter: 'tools[0].format.definition'."),
        ({"type": "custom", "name": "P"}, {"type": "custom", "name": "Q"},
         "Tool choice 'custom' not found in 'tools' parameter."),
    ],
)  # fmt: skip
def test_custom_tool_declarations_are_checked(tool, choice, message):
    error = reject(body(USER, tools=[tool], tool_choice=choice))
    assert error.message == message
    grammar = {"type": "grammar", "syntax": "regex", "definition": "^a$"}
    ok = {"type": "custom", "name": "P", "format": grammar}
    run(body(USER, tools=[ok], tool_choice={"type": "custom", "name": "P"}))


def test_a_custom_call_item_needs_its_input():
    error = reject(body(USER, {"type": "custom_tool_call", "call_id": "c", "name": "P"}))
    assert error.message == "Missing required parameter: 'input[1].input'."


def test_function_call_without_output_when_more_input_follows():
    error = reject(body(USER, call("call_1"), call("call_2"), output("call_1"), USER))
    assert error.message == "No tool output found for function call call_2."
    run(body(USER, call("call_1"), call("call_2")))  # trailing calls may await outputs


def test_followed_by_rules_accept_preamble_messages_and_parallel_calls():
    followers = [Follower("message", "msg_1", text_digest("Hello"))]
    item = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "encrypted_content": token(followers=followers),
    }
    run(body(USER, item, msg(), msg("more"), call("a"), call("b"), output("a"), output("b"), USER))
