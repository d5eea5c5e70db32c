"""Tiny JSON-over-HTTP helper for control APIs (the fake's ``/__fake/*``, ``/healthz``).

Plain :mod:`http.client` on purpose: the harness must not share connection pools or
retry logic with the code under test, and a control call must fail loudly, not retry.
"""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit


class ControlError(RuntimeError):
    """A control endpoint answered with an unexpected status."""


def request_json(
    method: str,
    url: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
    expect: tuple[int, ...] = (200,),
) -> tuple[int, Any]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        payload = None if body is None else json.dumps(body).encode("utf-8")
        sent_headers = {"Content-Type": "application/json", **(headers or {})}
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request(method, path or "/", body=payload, headers=sent_headers)
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    if response.status not in expect:
        raise ControlError(f"{method} {url} answered {response.status}: {raw[:500]!r}")
    if not raw:
        return response.status, None
    try:
        return response.status, json.loads(raw)
    except ValueError:
        return response.status, raw.decode("utf-8", "replace")
