"""A real replay store made through the code the chat handler uses (``ReplayCache.begin``,
``CacheSession.dispatch``, synthetic upstream events fed to the capture, ``complete``,
``delivered``), for tests that need the rows a relay writes: admitted text and tool-call
turns, each replaying the chain beneath it. Nothing here writes a row by hand."""

from __future__ import annotations

import copy
import itertools
import os
import sqlite3
from pathlib import Path
from typing import Any

from relay.cache.replay_cache import ReplayCache
from relay.clock import ManualClock
from relay.core.capture import ClientProjection
from relay.core.disk_policy import MIN_RESERVE_BYTES
from relay.settings.config import Config
from relay.settings.model_alias import ModelAlias
from relay.storage.schema import migrate_to
from relay.translate.request import translate_request
from relay.translate.responses_to_chat import response_to_chat_completion
from tests.support.replay_driver import captured

GPT5 = ModelAlias("gpt-5", "gpt-5")
TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
Message = dict[str, Any]


def ciphertext(n: int) -> str:
    """The encrypted reasoning of answer ``n`` (a test can look for it in any output)."""
    return f"gAAAAB{n:06d}secret-reasoning-ciphertext"


def answer_text(n: int) -> str:
    return f"visible answer text {n}"


class StoreBuilder:
    """A relay's cache on ``path``, answering turn by turn; :meth:`close` when done."""

    def __init__(self, path: Path, clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock()
        self._ids = itertools.count(1)
        config = Config(
            reasoning_cache_enabled=True,
            reasoning_cache_path=path,
            reasoning_cache_reserve_bytes=MIN_RESERVE_BYTES,
        )
        self.cache = ReplayCache.open(
            config, self.clock, upstream_url="https://api.openai.com/v1/responses",
            upstream_credential="sk-test", relay_token="relay-token",
            new_id=lambda prefix: f"{prefix}{next(self._ids)}",
        )  # fmt: skip

    def close(self) -> None:
        self.cache.close()

    def turn(self, messages: list[Message], *, tool: bool = False) -> list[Message]:
        """Answer ``messages`` (admitted: reasoning, then text or a tool call) and return
        the history extended by the answer and the client's next message."""
        n = next(self._ids)
        body = {"model": "gpt-5", "messages": messages, "tools": TOOLS}
        request = translate_request(body, GPT5, reasoning_summaries=False)
        session = self.cache.begin(request, body, f"req_{n}")
        assert session is not None
        session.dispatch()
        items: list[Message] = [
            {"type": "reasoning", "id": f"rs_{n}", "summary": [],
             "encrypted_content": ciphertext(n)},
        ]  # fmt: skip
        if tool:
            items.append({"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                          "name": "read", "arguments": f'{{"path":"f{n}.py"}}',
                          "status": "completed"})  # fmt: skip
        else:
            items.append({"type": "message", "id": f"msg_{n}", "status": "completed",
                          "role": "assistant", "content": [
                              {"type": "output_text", "text": answer_text(n), "annotations": []}
                          ]})  # fmt: skip
        events = [("response.output_item.done", {"type": "response.output_item.done",
                   "output_index": index, "item": copy.deepcopy(item)})
                  for index, item in enumerate(items)]  # fmt: skip
        response = {"id": f"resp_{n}", "object": "response", "status": "completed",
                    "model": "gpt-5", "output": copy.deepcopy(items)}  # fmt: skip
        events.append(("response.completed", {"type": "response.completed", "response": response}))
        completion = response_to_chat_completion(
            {"status": "completed", "output": items}, completion_id="chatcmpl-1", created=0,
            model="gpt-5", reasoning_summaries=False,
        )  # fmt: skip
        result = captured(session, events, ClientProjection.from_completion(completion))
        assert session.complete(result).kind == "admit"
        session.delivered()
        message: Message = dict(completion["choices"][0]["message"])
        visible: Message = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            visible["tool_calls"] = message["tool_calls"]
            follow: Message = {"role": "tool", "tool_call_id": f"call_{n}", "content": "ok"}
        else:
            follow = {"role": "user", "content": f"question {n}"}
        return [*messages, visible, follow]

    def conversation(self, turns: str, prompt: str = "hello") -> list[Message]:
        """``turns`` of ``t`` (text) and ``c`` (tool call), one after the other."""
        history: list[Message] = [{"role": "user", "content": prompt}]
        for kind in turns:
            history = self.turn(history, tool=kind == "c")
        return history


def build_store(path: Path, *conversations: str) -> None:
    """A closed store at ``path`` with one conversation per ``turns`` string."""
    builder = StoreBuilder(path)
    try:
        for index, turns in enumerate(conversations):
            builder.conversation(turns, prompt=f"hello {index}")
    finally:
        builder.close()


def rewrite_at_version(path: Path, version: int) -> None:
    """Rewrite the closed store at ``path`` exactly as schema ``version`` (5 or later)
    lays a file out: a new file made by the migrations up to ``version``, every row
    copied column by column. Columns the later schema dropped must be nullable or empty
    in the rows copied (a closed store built here has no open intent; a test adds its
    own, in the old layout). Its free pages are gone, as after a VACUUM."""
    old = path.with_name(f"{path.name}.v{version}")
    conn = sqlite3.connect(old, isolation_level=None)
    try:
        migrate_to(conn, version)
        conn.execute("ATTACH DATABASE ? AS built", (str(path),))
        conn.execute("BEGIN")
        tables = [row[0] for row in conn.execute(
            "SELECT name FROM main.sqlite_master WHERE type = 'table' "
            "AND name != 'sqlite_sequence'"  # the ids copied set it
        )]  # fmt: skip
        for table in tables:
            theirs = {row[1] for row in conn.execute(f"PRAGMA built.table_info({table})")}
            columns = ", ".join(
                row[1] for row in conn.execute(f"PRAGMA main.table_info({table})")
                if row[1] in theirs
            )  # fmt: skip
            conn.execute(
                f"INSERT INTO main.{table} ({columns}) SELECT {columns} FROM built.{table}"
            )
        conn.execute("COMMIT")
        conn.execute("DETACH DATABASE built")
    finally:
        conn.close()
    os.replace(old, path)
