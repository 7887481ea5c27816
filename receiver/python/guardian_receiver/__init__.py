"""Guardian's receiver kit for Python (docs/receivers.md in Guardian's repository).

The whole receiver contract, with the keys in the merchant's own Postgres
through psycopg 3::

    receiver = Receiver(connect=lambda: psycopg.connect(url, autocommit=True),
                        secrets=[os.environ["GUARDIAN_SECRET"]], handler=grant)
    answer = receiver.handle("POST", "/fulfil", headers, body)

An action request (POST) is verified (Standard Webhooks, any of the
secrets, 5 minutes either way), read strictly, and answered from its key's
row when the key finished; otherwise the merchant's handler runs inside the
transaction that records the key, holding the key's lock: a write through
the handler's connection happens exactly once. A lookup (GET, the key as
the last path segment) states what the key's row says, or whether the key
is in progress. Every statement is signed. ``wsgi``, ``asgi``, ``flask``
and ``starlette`` serve it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import secrets as _secrets
import time
import urllib.parse
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable, Mapping

import psycopg
from psycopg.types.json import Jsonb

__all__ = [
    "Answer", "Decline", "Delivery", "Receiver", "Status", "migrate", "schema", "sign",
    "sign_statement", "verify", "DEFAULT_MAX_BODY", "TEST_EVENT_TYPE", "TEST_KEY_PREFIX", "TOLERANCE_SECONDS",
]

TOLERANCE_SECONDS = 300
"""How far a signed timestamp may be from the receiver's clock, either way, in seconds."""
TEST_EVENT_TYPE = "guardian.connector.test"
"""The event type of a conformance run's deliveries: never the merchant's action."""
TEST_KEY_PREFIX = "gtest_"
"""The prefix of every key a conformance run sends, and of no key Guardian derives from a payment."""
DEFAULT_MAX_BODY = (1 << 20) + (8 << 10)
"""The largest request Guardian sends for a payload intake took under its default cap."""


class Status:
    """The statuses a receiver states about a key."""

    DONE = "done"
    NOT_DONE = "not_done"
    IN_PROGRESS = "in_progress"
    DECLINED = "declined"
    MISMATCH = "mismatch"


# The body's fields and what each must be: a request with any other is not
# Guardian's.
_FIELDS = {
    "idempotency_key": str, "provider": str, "payment_id": str, "event_id": str, "event_type": str,
    "action": str, "action_name": str, "purchase": object, "payload": object,
}
_BASE64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
_DECIMAL = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() takes "²", which int() refuses


class Decline(Exception):
    """A handler's decision to decline its key for good: nothing was done, and
    nothing will be for this key. Its writes are rolled back."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"declined: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class Delivery:
    """One request from Guardian, as the handler sees it."""

    idempotency_key: str
    provider: str
    payment_id: str
    event_id: str
    event_type: str
    action: str
    """"revoke" takes the payment back; "" fulfils."""
    action_name: str
    """The action of the purchase this request performs ("" without an actions file)."""
    purchase: dict[str, Any] | None
    payload: Any
    """The provider's event, parsed."""
    attempt: int
    """Guardian's attempt number for the key (1 first); the body is the same for every attempt."""
    test: bool
    """A conformance run's delivery: never given to the handler."""


@dataclass(frozen=True)
class Answer:
    """What the receiver answers: a status code, headers and body."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


Handler = Callable[[Delivery, psycopg.Connection], None]
"""Performs the action through the connection, inside the transaction that
records the key: a write through it happens exactly once. Return when done;
raise Decline to decline the key for good; raise anything else to fail
without recording anything (Guardian's next attempt runs it again). An action
outside the database (an API call) is not covered by the transaction: give it
the key as its own idempotency key."""


def _decode_secret(secret: str) -> bytes:
    raw = secret[6:] if isinstance(secret, str) and secret.startswith("whsec_") else ""
    if raw == "" or len(raw) % 4 != 0 or not _BASE64.match(raw):
        raise ValueError("connector secret is not whsec_ followed by base64")
    return base64.b64decode(raw)


def sign(secret: str, msg_id: str, timestamp: int | str, body: bytes | str) -> str:
    """The Standard Webhooks signature ("v1,<base64>") of body under msg_id at timestamp."""
    if isinstance(body, str):
        body = body.encode()
    mac = hmac.new(_decode_secret(secret), f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for k, v in headers.items():
        if k.lower() == name:
            return v
    return None


def verify(secrets: list[str], headers: Mapping[str, str], body: bytes | str, now: int) -> bool:
    """Whether body and headers carry a signature by one of secrets (several
    while rotating; the header may hold one signature per secret, space
    separated) whose timestamp is within TOLERANCE_SECONDS of now, either way."""
    msg_id, ts, signatures = (_header(headers, h) for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
    if not msg_id or not signatures or not ts or not _DECIMAL.fullmatch(ts):
        return False
    if abs(now - int(ts)) > TOLERANCE_SECONDS:
        return False
    given = [s[3:].encode() for s in signatures.split(" ") if s.startswith("v1,")]
    for secret in secrets:
        want = sign(secret, msg_id, ts, body)[3:].encode()
        if any(hmac.compare_digest(g, want) for g in given):
            return True
    return False


def sign_statement(secret: str, statement: Mapping[str, str], now: int) -> tuple[bytes, dict[str, str]]:
    """A receiver's signed statement about a key: the exact JSON body and the
    headers that sign it (msg id the key and ".answer"), as every kit makes
    them (receiver/vectors.json)."""
    st = {"idempotency_key": statement["idempotency_key"], "status": statement["status"]}
    for optional in ("reason", "receipt"):
        if statement.get(optional):
            st[optional] = statement[optional]
    body = json.dumps(st, separators=(",", ":"), ensure_ascii=False).encode()
    msg_id = st["idempotency_key"] + ".answer"
    return body, {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(now),
        "webhook-signature": sign(secret, msg_id, now, body),
    }


def schema() -> str:
    """The SQL that creates the table the kit keeps its keys in (idempotent)."""
    return resources.files(__package__).joinpath("schema.sql").read_text()


def migrate(conn: psycopg.Connection) -> None:
    """Creates the kit's table in the merchant's database, if it does not exist."""
    conn.execute(schema())
    if not conn.autocommit:
        conn.commit()


class _Refusal(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class _Row:
    hash: bytes
    status: str
    answer: dict[str, str]


class Receiver:
    """Guardian's receiver: handle() answers Guardian's action requests (POST)
    and lookups (GET, the key as the last path segment).

    connect returns a context manager yielding a psycopg connection in
    autocommit mode (the kit opens its own transactions): a psycopg_pool
    ConnectionPool's ``pool.connection``, or
    ``lambda: psycopg.connect(url, autocommit=True)``.
    """

    def __init__(
        self,
        *,
        connect: Callable[[], AbstractContextManager[psycopg.Connection]],
        secrets: list[str],
        handler: Handler,
        max_body: int = DEFAULT_MAX_BODY,
        now: Callable[[], int] = lambda: int(time.time()),
        logger: logging.Logger | None = None,
    ) -> None:
        if connect is None or handler is None:
            raise ValueError("receiver: connect and handler are required")
        if not secrets:
            raise ValueError("receiver: at least one connector secret is required")
        for i, s in enumerate(secrets):
            try:
                _decode_secret(s)
            except ValueError as err:
                raise ValueError(f"receiver: secret {i + 1} is {str(err).removeprefix('connector secret is ')}") from None
        self.connect, self.secrets, self.handler = connect, list(secrets), handler
        self.max_body, self.now = max_body, now
        self.logger = logger or logging.getLogger("guardian_receiver")

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Answer:
        """Answers one request from Guardian."""
        try:
            if method == "POST":
                return self._action(headers, body)
            if method in ("GET", "HEAD"):
                return self._lookup(path, headers)
            return Answer(405, {"allow": "POST, GET"}, b"method not allowed")
        except _Refusal as refusal:
            if refusal.status == 401:
                self.logger.warning("receiver: refused a request: %s", refusal)
            return Answer(refusal.status, {"content-type": "text/plain; charset=utf-8"}, str(refusal).encode())
        except Exception:
            # Nothing was recorded (or, after a failed commit, nothing is
            # known: the lookup reads the truth from the table).
            self.logger.exception("receiver: request failed")
            return Answer(500, {"content-type": "text/plain; charset=utf-8"}, b"internal error")

    def _action(self, headers: Mapping[str, str], body: bytes) -> Answer:
        if len(body) > self.max_body:
            raise _Refusal(413, "body too large")
        if not verify(self.secrets, headers, body, self.now()):
            raise _Refusal(401, "signature or timestamp not valid")
        delivery = self.read(body, headers)
        digest = hashlib.sha256(body).digest()
        with self.connect() as conn:
            # A finished key answers from its row, without waiting for anything.
            row = self.find(conn, delivery.idempotency_key)
            if row is not None:
                return self.replay(row, digest)
            return self.act(conn, delivery, digest)

    def read(self, body: bytes, headers: Mapping[str, str]) -> Delivery:
        """Reads an action request's body strictly: exactly the contract's
        fields, a key equal to the Idempotency-Key header, and a test delivery
        under a test key and only then. Raises a 400 refusal otherwise."""
        try:
            b = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise _Refusal(400, "not a Guardian request: body and Idempotency-Key disagree") from None
        ok = (
            isinstance(b, dict)
            and all(k in _FIELDS and isinstance(v, _FIELDS[k]) for k, v in b.items())
            and isinstance(b.get("idempotency_key"), str)
            and b["idempotency_key"] != ""
            and b["idempotency_key"] == _header(headers, "idempotency-key")
        )
        if not ok:
            raise _Refusal(400, "not a Guardian request: body and Idempotency-Key disagree")
        test = b.get("event_type") == TEST_EVENT_TYPE
        if test != b["idempotency_key"].startswith(TEST_KEY_PREFIX):
            raise _Refusal(400, "test deliveries use test keys, and only they do")
        attempt = _header(headers, "guardian-attempt") or ""
        return Delivery(
            idempotency_key=b["idempotency_key"], provider=b.get("provider", ""), payment_id=b.get("payment_id", ""),
            event_id=b.get("event_id", ""), event_type=b.get("event_type", ""), action=b.get("action", ""),
            action_name=b.get("action_name", ""), purchase=b.get("purchase"), payload=b.get("payload"),
            attempt=int(attempt) if _DECIMAL.fullmatch(attempt) else 0, test=test,
        )

    def act(self, conn: psycopg.Connection, delivery: Delivery, digest: bytes) -> Answer:
        """Runs the handler for a key with no row yet, holding the key's lock for the transaction."""
        with conn.transaction():
            if not self.try_lock(conn, delivery.idempotency_key):
                return self.state(409, {"idempotency_key": delivery.idempotency_key, "status": Status.IN_PROGRESS})
            # The key may have finished between the first read and the lock.
            row = self.find(conn, delivery.idempotency_key)
            if row is not None:
                return self.replay(row, digest)
            try:
                self.perform(conn, delivery)
                st = {"idempotency_key": delivery.idempotency_key, "status": Status.DONE, "receipt": "rcpt_" + _secrets.token_hex(12)}
            except Decline as decline:
                st = {"idempotency_key": delivery.idempotency_key, "status": Status.DECLINED, "reason": decline.reason}
            self.record(conn, delivery, digest, st)
        return self.state(200 if st["status"] == Status.DONE else 422, st)

    def perform(self, conn: psycopg.Connection, delivery: Delivery) -> None:
        """Runs the merchant's handler in a savepoint, so that a decline rolls
        back its writes and keeps the transaction for the key's row; a test
        delivery runs the test action instead, never the handler."""
        if delivery.test:
            return _test_action(delivery.payload)
        with conn.transaction():  # a savepoint: a Decline rolls its writes back
            self.handler(delivery, conn)

    def record(self, conn: psycopg.Connection, delivery: Delivery, digest: bytes, st: dict[str, str]) -> None:
        """Records a finished key: its body's hash and the answer every later request with it gets."""
        conn.execute(
            "INSERT INTO guardian_receiver_key (idempotency_key, body_sha256, status, answer, test) VALUES (%s, %s, %s, %s, %s)",
            (delivery.idempotency_key, digest, st["status"], Jsonb(st), delivery.test),
        )

    def replay(self, row: _Row, digest: bytes) -> Answer:
        """Answers a finished key: its stored answer for the same body, a mismatch for another."""
        if not hmac.compare_digest(row.hash, digest):
            return self.state(422, {"idempotency_key": row.answer["idempotency_key"], "status": Status.MISMATCH})
        return self.state(422 if row.status == Status.DECLINED else 200, row.answer)

    def _lookup(self, path: str, headers: Mapping[str, str]) -> Answer:
        if not verify(self.secrets, headers, b"", self.now()):
            raise _Refusal(401, "signature or timestamp not valid")
        key = urllib.parse.unquote(path.rsplit("/", 1)[-1])
        if key == "" or key != _header(headers, "idempotency-key"):
            raise _Refusal(400, "the path's key and the Idempotency-Key disagree")
        with self.connect() as conn:
            row = self.find(conn, key)
            if row is None:
                # No row: either nothing happened, or the key's transaction is open.
                with conn.transaction():
                    if not self.try_lock(conn, key):
                        return self.state(200, {"idempotency_key": key, "status": Status.IN_PROGRESS})
                    row = self.find(conn, key)
            if row is None:
                return self.state(200, {"idempotency_key": key, "status": Status.NOT_DONE})
            return self.state(200, {"idempotency_key": key, "status": row.status, "reason": row.answer.get("reason", ""),
                                    "receipt": row.answer.get("receipt", "")})

    def find(self, conn: psycopg.Connection, key: str) -> _Row | None:
        """Reads a finished key's row: its body's hash, its status and its answer."""
        found = conn.execute(
            "SELECT body_sha256, status, answer FROM guardian_receiver_key WHERE idempotency_key = %s", (key,)
        ).fetchone()
        if found is None:
            return None
        answer = found[2] if isinstance(found[2], dict) else json.loads(found[2])
        return _Row(bytes(found[0]), found[1], answer)

    def try_lock(self, conn: psycopg.Connection, key: str) -> bool:
        """Takes the key's transaction-scoped advisory lock without waiting:
        False means another transaction holds it (the key is in progress). The
        lock is every kit's, so kits in several languages can share a table."""
        return bool(conn.execute(
            "SELECT pg_try_advisory_xact_lock(hashtextextended('guardian-receiver:' || %s, 0))", (key,)
        ).fetchone()[0])

    def state(self, status: int, statement: Mapping[str, str]) -> Answer:
        """A signed statement with its status code."""
        body, headers = sign_statement(self.secrets[0], statement, self.now())
        return Answer(status, headers, body)


def _test_action(payload: Any) -> None:
    """What a test delivery does: nothing, after an optional hold (so a
    conformance run can see the key in progress), or a decline."""
    p = payload if isinstance(payload, dict) else {}
    hold = min(int(p.get("hold_ms") or 0), 10_000)
    if hold > 0:
        time.sleep(hold / 1000)
    if p.get("decline"):
        raise Decline("conformance test: declined as asked")
