"""``RELAY_CUSTOM_TOOL_CALLS``: how a custom tool call reaches the client.

A function-type call whose ``arguments`` is the raw input, or the Chat API's own
``{"type": "custom", "custom": {name, input}}``. A setting the translation reads, so it
lives here, below both.
"""

from __future__ import annotations

from typing import Literal

CustomCallForm = Literal["function", "custom"]
CUSTOM_CALL_FORMS: tuple[CustomCallForm, ...] = ("function", "custom")
