"""Chat tools and ``tool_choice`` as Responses ones (pure): function tools flattened
(non-strict unless the client said, an empty object schema for none), custom tools with
their grammar format flattened.
"""

from __future__ import annotations

from typing import Any

from relay.errors import InvalidRequest, UnsupportedParameter
from relay.translate.parameters import optional_str

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


def translate_tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise InvalidRequest("'tools' must be an array of function or custom tools", param="tools")
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise InvalidRequest(f"'{where}' must be an object", param=where)
        if tool.get("type") == "custom":
            out.append(_custom_tool(tool, where))
            continue
        if tool.get("type") != "function":
            raise UnsupportedParameter(
                f"'{where}.type' must be 'function' or 'custom'; the relay translates function "
                "and custom tools only",
                param=f"{where}.type",
            )
        fn, flat = _tool_head(tool, "function", where)
        parameters = fn.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise InvalidRequest(
                f"'{where}.function.parameters' must be a JSON schema object",
                param=f"{where}.function.parameters",
            )
        flat["parameters"] = parameters if parameters is not None else dict(EMPTY_PARAMETERS)
        strict = fn.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise InvalidRequest(
                f"'{where}.function.strict' must be true or false", param=f"{where}.function.strict"
            )
        flat["strict"] = bool(strict)
        out.append(flat)
    return out


GRAMMAR_SYNTAXES = ("lark", "regex")


def _tool_head(
    tool: dict[str, Any], kind: str, where: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A tool's ``function``/``custom`` object and the flat Responses tool begun from it
    (type, name, description)."""
    spec = named(tool, kind, where)
    flat: dict[str, Any] = {"type": kind, "name": spec["name"]}
    description = optional_str(spec, "description", f"{where}.{kind}.description")
    if description is not None:
        flat["description"] = description
    return spec, flat


def _custom_tool(tool: dict[str, Any], where: str) -> dict[str, Any]:
    """A Chat custom tool as a Responses one (the grammar object flattened into format)."""
    spec, flat = _tool_head(tool, "custom", where)
    fmt = spec.get("format")
    at = f"{where}.custom.format"
    if fmt is None:
        return flat
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        flat["format"] = {"type": "text"}
        return flat
    if kind != "grammar":
        raise InvalidRequest(
            f'\'{at}\' must be {{"type": "text"}} or {{"type": "grammar", "grammar": '
            '{"syntax", "definition"}}',
            param=at,
        )
    assert isinstance(fmt, dict)
    grammar = fmt.get("grammar")
    syntax = grammar.get("syntax") if isinstance(grammar, dict) else None
    definition = grammar.get("definition") if isinstance(grammar, dict) else None
    if syntax not in GRAMMAR_SYNTAXES:
        raise InvalidRequest(f"'{at}.grammar.syntax' must be 'lark' or 'regex'", param=at)
    if not isinstance(definition, str):
        raise InvalidRequest(f"'{at}.grammar.definition' must be a string", param=at)
    flat["format"] = {"type": "grammar", "syntax": syntax, "definition": definition}
    return flat


def translate_tool_choice(choice: Any) -> str | dict[str, Any] | None:
    if choice is None or choice in ("none", "auto", "required"):
        return choice  # type: ignore[no-any-return]
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in ("function", "custom"):
        assert isinstance(choice, dict)
        named = choice.get(kind)
        name = named.get("name") if isinstance(named, dict) else None
        if isinstance(name, str) and name:
            return {"type": kind, "name": name}
        raise InvalidRequest(
            f"'tool_choice.{kind}.name' must name one of the tools",
            param=f"tool_choice.{kind}.name",
        )
    raise InvalidRequest(
        "'tool_choice' must be 'none', 'auto', 'required', "
        '{"type": "function", "function": {"name": ...}} or '
        '{"type": "custom", "custom": {"name": ...}}',
        param="tool_choice",
    )


def named(holder: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """The ``function`` or ``custom`` object of a tool or call, with a non-empty ``name``."""
    named = holder.get(key)
    if not isinstance(named, dict):
        raise InvalidRequest(f"'{where}.{key}' must be an object", param=f"{where}.{key}")
    name = named.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(
            f"'{where}.{key}.name' must be a non-empty string", param=f"{where}.{key}.name"
        )
    return named
