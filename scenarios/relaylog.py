"""Parse the relay's stderr: ``<time> <LEVEL> relay <event_name> key=value ...``.

Values with spaces are quoted by ``relay.observability.log`` with Python's ``repr``;
everything else is bare. Lines that are not relay events (tracebacks, third-party
warnings) are skipped here; the checker looks at process exits, not at stray text.
"""

from __future__ import annotations

import ast
import re

_LINE = re.compile(r"^\S+ \S+ (?P<level>[A-Z]+) relay (?P<event>[a-z_][a-z0-9_]*)(?P<rest>.*)$")
_FIELD = re.compile(
    r"(?P<key>[A-Za-z_][\w.]*)=(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\S+)"
)


def parse_relay_events(text: str) -> list[tuple[str, dict[str, str]]]:
    events: list[tuple[str, dict[str, str]]] = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        fields = {"level": match["level"]}
        for field in _FIELD.finditer(match["rest"]):
            value = field["value"]
            if value[:1] in ("'", '"'):
                try:
                    value = str(ast.literal_eval(value))
                except (ValueError, SyntaxError):
                    value = value[1:-1]
            fields[field["key"]] = value
        events.append((match["event"], fields))
    return events
