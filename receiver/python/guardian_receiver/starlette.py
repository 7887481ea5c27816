"""The kit on Starlette (and FastAPI, which is Starlette): an endpoint for
the action URL and the lookup URL.

    Route("/guardian/fulfil", guardian_endpoint(receiver), methods=["POST"])
    Route("/guardian/lookup/{key}", guardian_endpoint(receiver), methods=["GET"])

In FastAPI: ``app.add_route("/guardian/fulfil", guardian_endpoint(receiver), methods=["POST"])``.
The core runs in a worker thread (psycopg's blocking connection)."""

from __future__ import annotations

from typing import Awaitable, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from . import Receiver


def guardian_endpoint(receiver: Receiver) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint answering Guardian with receiver."""

    async def endpoint(request: Request) -> Response:
        # Read no more than one chunk past the cap, whatever Content-Length
        # says (a chunked body names none): nothing before the signature
        # grows with the body.
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > receiver.max_body:
                return Response(b"body too large", status_code=413, media_type="text/plain")
            chunks.append(chunk)
        body = b"".join(chunks)
        answer = await run_in_threadpool(receiver.handle, request.method, request.url.path, dict(request.headers), body)
        return Response(answer.body, status_code=answer.status, headers=answer.headers)

    return endpoint
