"""The kit as a WSGI application: mount it at the action URL and at the
lookup URL (".../{key}"), or serve it whole (POST acts, GET looks up)."""

from __future__ import annotations

from typing import Callable, Iterable

from . import Receiver

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 405: "Method Not Allowed", 409: "Conflict",
            413: "Payload Too Large", 422: "Unprocessable Entity", 500: "Internal Server Error"}


def wsgi_app(receiver: Receiver) -> Callable[[dict, Callable], Iterable[bytes]]:
    """A WSGI application answering Guardian with receiver."""

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
        if environ.get("CONTENT_TYPE"):
            headers["content-type"] = environ["CONTENT_TYPE"]
        body = b""
        if environ["REQUEST_METHOD"] == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            if length > receiver.max_body:
                start_response("413 Payload Too Large", [("content-type", "text/plain; charset=utf-8")])
                return [b"body too large"]
            body = environ["wsgi.input"].read(length)
        answer = receiver.handle(environ["REQUEST_METHOD"], environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""), headers, body)
        start_response(f"{answer.status} {_REASONS.get(answer.status, '')}", list(answer.headers.items()))
        return [answer.body]

    return app
