"""Chat Completions request body → Responses request body (pure; no I/O).

Decisions (the issue left these open):

- Leading ``system``/``developer`` messages become ``instructions``, joined with a blank
  line (``"\\n\\n"``). A system/developer message after the first non-system message stays
  in place as an input message with its own role.
- Text parts of one message are concatenated with no separator (Chat treats a list of text
  parts as one text), so a string and its split-into-parts form translate identically.
- User content always becomes a list of ``input_text``/``input_image`` parts, also for a
  plain string. An ``image_url`` part without ``detail`` gets ``"auto"``, Chat's default
  (the Responses type requires the field).
- An assistant message becomes one ``message`` item (one ``output_text`` part, then its
  refusals) followed by one ``function_call`` item per tool call; the message item is
  left out when it has neither text nor refusal. Tool-call ``arguments`` are forwarded as
  the exact string received.
- Custom tools (``{"type": "custom", "custom": {name, description?, format?}}``) become
  Responses custom tools (``{"type": "custom", name, description?, format?}``, a grammar
  format flattened to ``{"type": "grammar", syntax, definition}``); ``tool_choice``
  ``{"type": "custom", "custom": {"name"}}`` becomes ``{"type": "custom", "name"}``. An
  assistant tool call of ``type: "custom"`` becomes a ``custom_tool_call`` item (its
  ``input`` as sent) and the ``tool`` message answering it a ``custom_tool_call_output``:
  an output always answers a call of its own kind upstream. A tool message answering no
  earlier call is refused (400, naming the message) before anything is sent.
- Function tools get ``strict: false`` when the client did not say: Chat defaults to
  non-strict, the Responses API to strict, and strict mode rejects most client schemas.
  A tool without ``parameters`` gets an empty object schema (Chat: "no parameters").
- ``tool_choice`` ``"auto"``/``"none"`` is left out when there are no tools (it means
  nothing then, and Cursor sends ``tools: null`` with ``tool_choice: "auto"``).
- ``response_format: {type: text}`` is left out (text is the upstream default).
- ``reasoning_effort`` wins over Cursor's non-standard ``reasoning.effort`` when both are
  given and differ: it is the documented Chat field. Alias values fill in what the client
  left out; a reasoning summary is requested by default (``"auto"``) only when summaries
  are streamed to the client and the model is a reasoning model (others reject it).
  Summary ``"none"`` means "do not request one".
- ``user`` is forwarded as ``user``: the Responses API still accepts it (deprecated), while
  ``safety_identifier`` has a 64-character limit a Chat ``user`` value need not respect.
  The same value is returned as ``TranslatedRequest.caller``.
- A ``null`` value means "not given" for every optional parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relay.settings.model_alias import ModelAlias
from relay.translate.messages import translate_messages
from relay.translate.parameters import (
    PASSTHROUGH,
    check_known_key,
    client_model_name,
    max_output_tokens,
    optional_str,
    parse_reasoning_object,
    reasoning_settings,
    stream_flags,
    translate_text,
)
from relay.translate.request_types import TranslatedRequest
from relay.translate.sampling import sampling_params
from relay.translate.tools import translate_tool_choice, translate_tools


def translate_chat(
    body: Mapping[str, Any], target: ModelAlias, *, reasoning_summaries: bool
) -> TranslatedRequest:
    """The Responses body of a Chat request: each key checked against the parameter policy
    (``parameters``), then messages, tools and controls translated by their modules."""
    for key, value in body.items():
        check_known_key(key, value)
    client_model = client_model_name(body)
    stream, include_usage = stream_flags(body)
    instructions, items, spans = translate_messages(body["messages"])

    out: dict[str, Any] = {"model": target.model}
    if instructions is not None:
        out["instructions"] = instructions
    out["input"] = items
    tools = translate_tools(body.get("tools"))
    if tools:
        out["tools"] = tools
    tool_choice = translate_tool_choice(body.get("tool_choice"))
    if tool_choice is not None and (tools or tool_choice not in ("auto", "none")):
        out["tool_choice"] = tool_choice
    text = translate_text(body.get("response_format"), body.get("verbosity"))
    if text:
        out["text"] = text
    effort = optional_str(body, "reasoning_effort")
    summary = context = None
    reasoning = body.get("reasoning")
    if reasoning is not None:
        cursor_effort, summary, context = parse_reasoning_object(reasoning, "reasoning")
        effort = effort if effort is not None else cursor_effort
    settings = reasoning_settings(
        effort, summary, target, context=context, reasoning_summaries=reasoning_summaries
    )
    if settings:
        out["reasoning"] = settings
    max_output = max_output_tokens(body)
    if max_output is not None:
        out["max_output_tokens"] = max_output
    out.update(sampling_params(body, target.model, target.sampling))
    for key in PASSTHROUGH:
        if body.get(key) is not None:
            out[key] = body[key]
    user = body.get("user")
    return TranslatedRequest(
        out, stream, include_usage, client_model, user, "chat", spans, custom_tool_calls="custom"
    )
