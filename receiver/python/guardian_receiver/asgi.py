"""The kit as an ASGI application. The core is synchronous (psycopg's
blocking connection): each request runs it in a worker thread, so the event
loop never waits on Postgres."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from . import Receiver


def asgi_app(receiver: Receiver) -> Callable[[dict, Callable, Callable], Awaitable[None]]:
    """An ASGI application answering Guardian with receiver."""

    async def app(scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[[dict], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        chunks, size, more = [], 0, True
        while more:
            message: dict[str, Any] = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > receiver.max_body:
                await _send(send, 413, {"content-type": "text/plain; charset=utf-8"}, b"body too large")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        path = scope.get("root_path", "") + scope["path"]
        answer = await asyncio.to_thread(receiver.handle, scope["method"], path, headers, b"".join(chunks))
        await _send(send, answer.status, answer.headers, answer.body)

    return app


async def _send(send: Callable[[dict], Awaitable[None]], status: int, headers: dict[str, str], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]})
    await send({"type": "http.response.body", "body": body})
