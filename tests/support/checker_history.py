"""Hand-made event histories for the scenario checker's tests (scenarios.checker): the
events a run records (a relay's start and exit, an upstream exchange, the client's answer)
and :func:`run`, which checks them."""

from __future__ import annotations

from typing import Any

from scenarios.checker import check_history
from scenarios.history import History

USER = {"type": "message", "role": "user"}


def user(text: str) -> dict[str, Any]:
    return {**USER, "content": [{"type": "input_text", "text": text}]}


def assistant(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def reasoning(rid: str, token: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "id": rid, "summary": []}
    if token is not None:
        item["encrypted_content"] = token
    return item


def call(
    index: int,
    items: list[Any],
    output: list[Any],
    *,
    outcome: str = "completed",
    model: str = "gpt-5",
) -> tuple[str, dict[str, Any]]:
    terminal = {
        "completed": "response.completed",
        "incomplete": "response.incomplete",
        "failed": "response.failed",
    }.get(outcome)
    events = [{"type": "response.created", "data": {}}]
    if terminal:
        events.append({"type": terminal, "data": {}})
    return (
        "upstream_exchange",
        {
            "index": index,
            "path": "/v1/responses",
            "body": {"model": model, "input": items},
            "continuity": {},
            "status": 200,
            "events": events,
            "terminal": terminal,
            "outcome": outcome,
            "output": output,
            "ended": "finish",
            "finished": True,
        },
    )


def answer(
    turn: str,
    text: str,
    *,
    outcome: str = "success",
    finish: str | None = "stop",
    done: bool = True,
    error: Any = None,
) -> tuple[str, dict[str, Any]]:
    return (
        "client_answer",
        {
            "turn": turn,
            "status": 200 if error is None else 502,
            "outcome": outcome,
            "text": text,
            "refusal": "",
            "tool_calls": [],
            "finish_reason": finish,
            "done": done,
            "error": error,
            "frames": 5,
            "frames_after_done": 0,
        },
    )


def relay_start(cache: bool, incarnation: int = 1) -> tuple[str, dict[str, Any]]:
    return (
        "process_start",
        {
            "role": "relay",
            "pid": 100 + incarnation,
            "incarnation": incarnation,
            "cache_enabled": cache,
        },
    )


def relay_exit(cause: str, incarnation: int = 1) -> tuple[str, dict[str, Any]]:
    return (
        "process_exit",
        {
            "role": "relay",
            "pid": 100 + incarnation,
            "incarnation": incarnation,
            "returncode": -9,
            "cause": cause,
            "stderr_tail": "Traceback",
        },
    )


def run(events: list[tuple[str, dict[str, Any]]], *checks: str) -> Any:
    return check_history(History.from_events(events), checks or ("all",))
