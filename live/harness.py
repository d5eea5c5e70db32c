"""A relay in a background thread pointed at the real OpenAI API, for live checks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from relay.config import load_config
from relay.server import RelayServer
from tests.support.stack import TOKEN, LoopThread

LIVE_MODEL = os.environ.get("RELAY_LIVE_MODEL", "gpt-5-mini")


@contextmanager
def live_relay(data_dir: Path, env: dict[str, str] | None = None) -> Iterator[Any]:
    """Yield a strict openai SDK client talking to a relay that talks to OpenAI."""
    import openai

    config = load_config(
        {
            **{k: v for k, v in os.environ.items() if k.startswith("OPENAI_")},
            "RELAY_PORT": "0",
            "RELAY_TOKEN": TOKEN,
            "RELAY_DATA_DIR": str(data_dir),
            **(env or {}),
        }
    )
    loop = LoopThread()
    relay = RelayServer(config)
    try:
        port = loop.run(relay.start())
        yield openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key=TOKEN,
            max_retries=0,
            timeout=120,
            _strict_response_validation=True,
        )
    finally:
        loop.run(relay.stop())
        loop.close()
