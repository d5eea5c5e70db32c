"""``python -m bench.floor_proxy UPSTREAM_PORT``: the floor of any proxy hop, for the bench.

A TCP pump on the relay's own event loop (uvloop when installed, as ``relay serve``): each
client connection gets one upstream connection, and bytes are copied both ways as they
arrive, with no HTTP parsing, no buffering of the body and no JSON. Sent the direct
Responses request, what it adds to the time to the first content byte is what one more
Python process between client and upstream costs on this machine (two more socket hops
and wake-ups per direction), below which no relay can go; the relay's added time minus
this one is what its own work costs (:mod:`bench.contestants`).

Prints ``floor listening on http://127.0.0.1:<port>`` once it accepts connections.
"""

from __future__ import annotations

import asyncio
import socket
import sys

from relay.app.event_loop import loop_factory

READ_BYTES = 256 * 1024


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until end of file, then half-close ``writer``."""
    try:
        while data := await reader.read(READ_BYTES):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except ConnectionError:
        writer.close()


async def serve(upstream_port: int) -> None:
    async def connected(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        upstream_r, upstream_w = await asyncio.open_connection("127.0.0.1", upstream_port)
        for w in (client_w, upstream_w):  # as the relay does: no Nagle delay on either side
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(pump(client_r, upstream_w), pump(upstream_r, client_w))
        client_w.close()
        upstream_w.close()

    server = await asyncio.start_server(connected, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"floor listening on http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m bench.floor_proxy UPSTREAM_PORT", file=sys.stderr)
        return 2
    with asyncio.Runner(loop_factory=loop_factory("auto")) as runner:
        runner.run(serve(int(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
