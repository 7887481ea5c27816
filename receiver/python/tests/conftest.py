"""What the kit's tests share: a database of their own on the test Postgres,
and requests signed as Guardian signs them."""

from __future__ import annotations

import json
import os
import pathlib
import secrets as _secrets
import sys
import time
import urllib.parse

import psycopg
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from guardian_receiver import TEST_EVENT_TYPE, TEST_KEY_PREFIX, sign  # noqa: E402

VECTORS = json.loads((pathlib.Path(__file__).resolve().parents[2] / "vectors.json").read_text())
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
NEW_SECRET = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"


@pytest.fixture
def database_url():
    """A database of the test's own, dropped when it ends. TEST_DATABASE_URL
    names the server (`just test` sets the local one)."""
    url = os.environ.get("TEST_DATABASE_URL")
    if not url:
        pytest.fail("TEST_DATABASE_URL is not set: point it at a PostgreSQL server the tests may create databases on "
                    "(`just test` sets postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
    name = "guardian_py_" + _secrets.token_hex(6)
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    parts = urllib.parse.urlsplit(url)
    yield urllib.parse.urlunsplit(parts._replace(path="/" + name))
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def body(key: str, *, test: bool = False, payload=None, payment_id: str = "pi_1") -> bytes:
    """A request body as Guardian sends it."""
    return json.dumps({
        "idempotency_key": key, "provider": "stripe",
        "payment_id": "guardian-connector-test" if test else payment_id, "event_id": "evt_1",
        "event_type": TEST_EVENT_TYPE if test else "checkout.session.completed", "payload": payload or {},
    }, separators=(",", ":")).encode()


def action_headers(key: str, raw: bytes, *, secret: str = SECRET, now: int | None = None, attempt: int = 1) -> dict[str, str]:
    """An action request's headers, signed as Guardian signs them."""
    now = int(time.time()) if now is None else now
    return {"content-type": "application/json", "idempotency-key": key, "guardian-attempt": str(attempt),
            "webhook-id": key, "webhook-timestamp": str(now), "webhook-signature": sign(secret, key, now, raw)}


def lookup_headers(key: str, *, secret: str = SECRET) -> dict[str, str]:
    now = int(time.time())
    return {"idempotency-key": key, "webhook-id": key, "webhook-timestamp": str(now), "webhook-signature": sign(secret, key, now, b"")}


def gtest_key() -> str:
    return TEST_KEY_PREFIX + _secrets.token_hex(8)


def real_key() -> str:
    return "gk1_" + _secrets.token_hex(20)
