"""A refused request's answer reaches a client that is still sending: the server ends its side, reads
and drops the rest for a while, and only then closes, rather than resetting the connection (which
makes the client's kernel drop the answer it has not read). A real loopback socket and asyncio."""

from __future__ import annotations

import asyncio
import socket

from trt.server.http.limits import HttpLimits
from trt.server.http.messages import HttpRequest, HttpResponse
from trt.server.http.server import HttpServer


async def _answer(request: HttpRequest) -> HttpResponse:
    return HttpResponse(200, b"answered")


def test_a_431_reaches_a_client_that_goes_on_sending_its_head() -> None:
    async def scenario() -> bytes:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
        server = HttpServer(_answer, HttpLimits(max_header_size=1024))
        await server.start(sock)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
            writer.write(b"GET /x HTTP/1.1\r\nHost: a\r\n" + b"X-Big: " + b"y" * 4096)
            await writer.drain()
            await asyncio.sleep(0.2)  # past 1 KiB of head: the server has answered 431 and ended its side
            for _ in range(64):  # the client, not reading yet, sends on: 8 MiB the server never takes
                writer.write(b"y" * (128 << 10))
                await asyncio.sleep(0)
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return answer
        finally:
            await server.stop(1.0)

    answer = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 431 "), answer
