"""What starting the relay imports: psycopg only for a shared store (REASONING_CACHE_URL),
so a local relay and every CLI command start without it (a quarter of the imports)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
import {module}
print(",".join(sorted({{m.split(".")[0] for m in sys.modules if m.startswith("psycopg")}})))
"""


@pytest.mark.parametrize(
    "module", ["relay.app.cli", "relay.app.server", "relay.ops.cache_commands"]
)
def test_psycopg_is_not_imported_to_start(module: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == ""


def test_the_shared_store_check_needs_no_import() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom relay.cache.shared_store import is_shared\n"
            "print(is_shared(object()), 'relay.storage.postgres.store' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.split() == ["False", "False"]
