"""The kit on Flask: a view for the action URL and the lookup URL.

    app.add_url_rule("/guardian/fulfil", view_func=guardian_view(receiver), methods=["POST"])
    app.add_url_rule("/guardian/lookup/<key>", view_func=guardian_view(receiver), methods=["GET"])
"""

from __future__ import annotations

from typing import Any, Callable

from flask import Response, request

from . import Receiver


def guardian_view(receiver: Receiver, endpoint: str = "guardian") -> Callable[..., Response]:
    """A Flask view answering Guardian with receiver. It reads the raw body
    (the signature covers the bytes), never Flask's parsed JSON."""

    def view(**_: Any) -> Response:
        # Read at most one byte past the cap, whatever Content-Length says
        # (a chunked body names none): nothing before the signature grows
        # with the body.
        body = request.stream.read(receiver.max_body + 1)
        if len(body) > receiver.max_body:
            return Response(b"body too large", status=413, content_type="text/plain; charset=utf-8")
        answer = receiver.handle(request.method, request.path, dict(request.headers), body)
        return Response(answer.body, status=answer.status, headers=answer.headers)

    view.__name__ = endpoint
    return view
