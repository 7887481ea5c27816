"""An example receiver on Guardian's Python kit: it grants one licence per
paid payment, in its own Postgres, exactly once, and takes it back once when
Guardian sends a revoke. It records which action sent it and the course the
purchase's metadata names.

    RECEIVER_DATABASE_URL=postgres://... RECEIVER_SECRET=whsec_... RECEIVER_ADDR=127.0.0.1:8081 \\
        /usr/bin/python3 example/server.py

Point Guardian at it with GUARDIAN_CONNECTOR_URL=http://127.0.0.1:8081/fulfil,
GUARDIAN_CONNECTOR_LOOKUP_URL=http://127.0.0.1:8081/lookup/{key} and the same
secret in GUARDIAN_CONNECTOR_SECRET, and check it with `guardian connector test`.
"""

from __future__ import annotations

import os
import socketserver
import sys
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from guardian_receiver import Decline, Delivery, Receiver, migrate  # noqa: E402
from guardian_receiver.wsgi import wsgi_app  # noqa: E402

# The example's own table: the action's result.
LICENCE_SCHEMA = """
CREATE TABLE IF NOT EXISTS licence (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text        NOT NULL,
    provider        text        NOT NULL,
    payment_id      text        NOT NULL,
    action_name     text        NOT NULL DEFAULT '',
    course          text        NOT NULL DEFAULT '',
    revoked_at      timestamptz,
    granted_at      timestamptz NOT NULL DEFAULT now()
)"""


def grant(delivery: Delivery, conn: psycopg.Connection) -> None:
    """The licence: granted once per key, taken back once on a revoke."""
    if delivery.action == "revoke":
        taken = conn.execute(
            "UPDATE licence SET revoked_at = now() WHERE provider = %s AND payment_id = %s AND action_name = %s AND revoked_at IS NULL",
            (delivery.provider, delivery.payment_id, delivery.action_name),
        )
        if taken.rowcount == 0:
            raise Decline("no licence of this payment to take back")
        return
    course = ((delivery.purchase or {}).get("metadata") or {}).get("course", "")
    conn.execute(
        "INSERT INTO licence (idempotency_key, provider, payment_id, action_name, course) VALUES (%s, %s, %s, %s, %s)",
        (delivery.idempotency_key, delivery.provider, delivery.payment_id, delivery.action_name, course),
    )


class ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    """A WSGI server answering each request in its own thread: Guardian sends
    a key's attempts at once, and the receiver must answer both."""

    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args) -> None:  # one line per request is the example's noise
        pass


def example_server(url: str, secrets: list[str], host: str = "127.0.0.1", port: int = 8081, receiver_class=Receiver):
    """The example's HTTP server on url's database, with its tables made."""
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn)
        conn.execute(LICENCE_SCHEMA)
    receiver = receiver_class(connect=lambda: psycopg.connect(url, autocommit=True), secrets=secrets, handler=grant)
    return make_server(host, port, wsgi_app(receiver), server_class=ThreadingServer, handler_class=QuietHandler)


def main() -> None:
    url, secret = os.environ.get("RECEIVER_DATABASE_URL"), os.environ.get("RECEIVER_SECRET")
    if not url or not secret:
        sys.exit("example receiver: set RECEIVER_DATABASE_URL and RECEIVER_SECRET (whsec_...; several, space-separated, while rotating)")
    host, _, port = os.environ.get("RECEIVER_ADDR", "127.0.0.1:8081").rpartition(":")
    server = example_server(url, secret.split(), host, int(port))
    print(f"example receiver listening on {host}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
