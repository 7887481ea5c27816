"""The kit's contract against a real Postgres, with real concurrency: a key
acts once, a finished key replays, another body is refused, a decline stays,
a failure records nothing, a lookup tells the truth, a test delivery never
reaches the handler; and the WSGI, ASGI, Flask and Starlette adapters."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg

from conftest import NEW_SECRET, SECRET, action_headers, body, lookup_headers, real_key, gtest_key
from guardian_receiver import Decline, Receiver, migrate


class Setup:
    def __init__(self, url: str, then=None) -> None:
        self.url, self.calls, self.lock = url, 0, threading.Lock()
        with psycopg.connect(url, autocommit=True) as conn:
            migrate(conn)
            migrate(conn)  # idempotent
            conn.execute("CREATE TABLE act (key text NOT NULL)")

        def handler(delivery, conn):
            with self.lock:
                self.calls += 1
                n = self.calls
            conn.execute("INSERT INTO act VALUES (%s)", (delivery.idempotency_key,))
            if then:
                then(delivery, conn, n)

        self.receiver = Receiver(connect=lambda: psycopg.connect(url, autocommit=True), secrets=[SECRET, NEW_SECRET], handler=handler)

    def post(self, key: str, raw: bytes, **kw):
        answer = self.receiver.handle("POST", "/fulfil", action_headers(key, raw, **kw), raw)
        return answer.status, (json.loads(answer.body) if answer.body.startswith(b"{") else answer.body)

    def lookup(self, key: str):
        answer = self.receiver.handle("GET", f"/lookup/{key}", lookup_headers(key), b"")
        return answer.status, json.loads(answer.body)

    def count(self, sql: str) -> int:
        with psycopg.connect(self.url) as conn:
            return conn.execute(sql).fetchone()[0]


def test_the_same_key_sent_32_times_at_once_acts_once(database_url):
    s = Setup(database_url, then=lambda d, c, n: time.sleep(0.05))
    key, raw = real_key(), body(real_key())
    key = json.loads(raw)["idempotency_key"]
    start = threading.Barrier(32)

    def send():
        start.wait()
        return s.post(key, raw)

    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda _: send(), range(32)))
    assert s.calls == 1, "the handler ran once"
    assert s.count("SELECT count(*) FROM act") == 1, "its write happened once"
    done = [st for code, st in answers if code == 200]
    assert done and all((code, st["status"]) in ((200, "done"), (409, "in_progress")) for code, st in answers), answers
    assert len({st["receipt"] for st in done}) == 1, "one act, one receipt, replayed"
    assert s.post(key, raw, attempt=2) == (200, done[0]), "a finished key replays its answer"
    assert s.lookup(key) == (200, {"idempotency_key": key, "status": "done", "receipt": done[0]["receipt"]})


def test_another_body_under_a_finished_key_is_refused(database_url):
    s = Setup(database_url)
    key = real_key()
    assert s.post(key, body(key))[0] == 200
    assert s.post(key, body(key, payment_id="pi_other")) == (422, {"idempotency_key": key, "status": "mismatch"})
    assert s.calls == 1


def test_a_decline_is_kept_for_good_and_its_writes_rolled_back(database_url):
    def decline(d, c, n):
        raise Decline("no such course")

    s = Setup(database_url, then=decline)
    key = real_key()
    first = s.post(key, body(key))
    assert first == (422, {"idempotency_key": key, "status": "declined", "reason": "no such course"})
    assert s.count("SELECT count(*) FROM act") == 0, "the handler's writes are rolled back"
    assert s.post(key, body(key), attempt=2) == first, "the stored decline, signed"
    assert s.calls == 1
    assert s.lookup(key)[1] == {"idempotency_key": key, "status": "declined", "reason": "no such course"}


def test_a_failure_records_nothing_and_the_next_attempt_acts(database_url):
    def fail_first(d, c, n):
        if n == 1:
            raise RuntimeError("the licence service is down")

    s = Setup(database_url, then=fail_first)
    key = real_key()
    assert s.post(key, body(key))[0] == 500
    assert s.count("SELECT count(*) FROM guardian_receiver_key") == 0
    assert s.lookup(key)[1]["status"] == "not_done"
    assert s.post(key, body(key), attempt=2)[0] == 200
    assert s.calls == 2
    assert s.count("SELECT count(*) FROM act") == 1, "the failed attempt wrote nothing"


def test_a_test_delivery_never_reaches_the_handler(database_url):
    s = Setup(database_url)
    key = gtest_key()
    raw = body(key, test=True, payload={"hold_ms": 400})
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(s.post, key, raw)
        time.sleep(0.15)
        assert s.lookup(key)[1]["status"] == "in_progress", "a key in progress, looked up"
        assert s.post(key, raw)[0] == 409
        assert held.result()[0] == 200
    declined = gtest_key()
    assert s.post(declined, body(declined, test=True, payload={"decline": True}))[0] == 422
    assert s.calls == 0
    assert s.count("SELECT count(*) FROM guardian_receiver_key WHERE test") == 2


def test_refusals(database_url):
    s = Setup(database_url)
    key = real_key()
    raw = body(key)
    assert s.post(key, raw, secret="whsec_b3RoZXIgc2VjcmV0IG9mIGFub3RoZXIgcmVjZWl2ZXI=")[0] == 401
    assert s.post(key, raw, now=int(time.time()) - 600)[0] == 401, "a replay"
    assert s.post(key, raw, secret=NEW_SECRET)[0] == 200, "any listed secret: rotation"
    headers = lookup_headers(key)
    headers["idempotency-key"] = real_key()
    assert s.receiver.handle("GET", f"/lookup/{key}", headers, b"").status == 400
    big = real_key()
    assert s.post(big, body(big, payload={"pad": "x" * ((1 << 20) + 9000)}))[0] == 413
    assert s.calls == 1


def test_flask(database_url):
    import flask

    from guardian_receiver.flask import guardian_view

    s = Setup(database_url)
    app = flask.Flask(__name__)
    app.add_url_rule("/guardian/fulfil", view_func=guardian_view(s.receiver), methods=["POST"])
    app.add_url_rule("/guardian/lookup/<key>", view_func=guardian_view(s.receiver, "lookup"), methods=["GET"])
    client, key = app.test_client(), real_key()
    raw = body(key)
    res = client.post("/guardian/fulfil", data=raw, headers=action_headers(key, raw))
    assert res.status_code == 200 and res.headers["webhook-signature"].startswith("v1,")
    assert client.get(f"/guardian/lookup/{key}", headers=lookup_headers(key)).get_json()["status"] == "done"
    assert s.calls == 1
    big = real_key()
    raw = body(big, payload={"pad": "x" * ((1 << 20) + 9000)})
    assert client.post("/guardian/fulfil", data=raw, headers=action_headers(big, raw)).status_code == 413


def test_starlette(database_url):
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route
    from starlette.testclient import TestClient

    from guardian_receiver.asgi import asgi_app
    from guardian_receiver.starlette import guardian_endpoint

    s = Setup(database_url)
    endpoint = guardian_endpoint(s.receiver)
    app = Starlette(routes=[
        Route("/guardian/fulfil", endpoint, methods=["POST"]),
        Route("/guardian/lookup/{key}", endpoint, methods=["GET"]),
        Mount("/asgi", app=asgi_app(s.receiver)),
    ])
    client = TestClient(app)
    for prefix in ("/guardian", "/asgi"):
        key = real_key()
        raw = body(key)
        res = client.post(f"{prefix}/fulfil", content=raw, headers=action_headers(key, raw))
        assert res.status_code == 200, res.text
        assert client.get(f"{prefix}/lookup/{key}", headers=lookup_headers(key)).json()["status"] == "done"
        # A chunked body names no length: the cap holds as it streams.
        big = real_key()
        raw = body(big, payload={"pad": "x" * ((1 << 20) + 9000)})
        chunks = (raw[i:i + 65536] for i in range(0, len(raw), 65536))
        assert client.post(f"{prefix}/fulfil", content=chunks, headers=action_headers(big, raw)).status_code == 413
    assert s.calls == 2
