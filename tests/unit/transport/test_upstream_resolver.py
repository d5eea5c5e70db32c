"""The upstream client's resolver: IP literals are their own address, names resolve."""

from __future__ import annotations

import asyncio
import socket

import pytest

from relay.transport.upstream_client import _LiteralResolver


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", [(socket.AF_INET, ("127.0.0.1", 8080))]),
        ("::1", [(socket.AF_INET6, ("::1", 8080))]),
        ("10.1.2.3", [(socket.AF_INET, ("10.1.2.3", 8080))]),
    ],
)
def test_ip_literals_resolve_to_themselves(host: str, expected: list[object]) -> None:
    assert asyncio.run(_LiteralResolver().resolve(host, 8080)) == expected


def test_names_go_through_getaddrinfo() -> None:
    found = asyncio.run(_LiteralResolver().resolve("localhost", 8080))
    assert found and all(address[1] == 8080 for _, address in found)


def test_a_literal_of_the_wrong_family_is_not_forced() -> None:
    with pytest.raises(socket.gaierror):
        asyncio.run(_LiteralResolver().resolve("127.0.0.1", 8080, socket.AF_INET6))
