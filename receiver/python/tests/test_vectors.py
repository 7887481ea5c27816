"""The kit against the one vector set every kit is held to
(receiver/vectors.json, made by Guardian's own contract package)."""

import psycopg

from conftest import VECTORS
from guardian_receiver import Receiver, migrate, schema, sign, sign_statement, verify


def test_signatures():
    for v in VECTORS["signatures"]:
        assert sign(v["secret"], v["msg_id"], v["timestamp"], v["body"]) == v["signature"], v["name"]


def test_verification():
    for v in VECTORS["verify"]:
        headers = {k: h for k, h in v["headers"].items() if h != ""}
        assert verify(v["secrets"], headers, v["body"], v["now"]) is v["valid"], v["name"]


def test_statements():
    for v in VECTORS["statements"]:
        raw, headers = sign_statement(v["secret"], v["statement"], v["timestamp"])
        assert raw.decode() == v["body"], v["name"]
        for name, value in v["headers"].items():
            assert headers[name] == value, f"{v['name']}: {name}"


def test_schema_is_every_kits():
    assert VECTORS["schema"].strip() in schema()


def test_bodies(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        migrate(conn)
    acted = []
    secret = VECTORS["signatures"][0]["secret"]
    receiver = Receiver(connect=lambda: psycopg.connect(database_url, autocommit=True), secrets=[secret],
                        handler=lambda d, c: acted.append(d.idempotency_key), now=lambda: 1764576000)
    for v in VECTORS["bodies"]:
        msg_id = "msg_" + v["name"]
        headers = {"webhook-id": msg_id, "webhook-timestamp": "1764576000",
                   "webhook-signature": sign(secret, msg_id, 1764576000, v["body"])}
        if v["idempotency_key_header"]:
            headers["idempotency-key"] = v["idempotency_key_header"]
        before = len(acted)
        answer = receiver.handle("POST", "/fulfil", headers, v["body"].encode())
        if not v["valid"]:
            assert answer.status == 400, v["name"]
            continue
        assert answer.status == 200, f"{v['name']}: {answer.body!r}"
        assert len(acted) == (before if v["test"] else before + 1), f"{v['name']}: a test delivery never reaches the handler"
