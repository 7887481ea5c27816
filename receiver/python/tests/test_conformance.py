"""Guardian's own conformance run (`guardian connector test`) against the
example receiver, and against three broken variants of the kit, each of
which the run must catch: no lock, 409 for a finished key, and a forgotten
decline."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading

import psycopg
import pytest

from conftest import SECRET
from guardian_receiver import Receiver, Status

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "example"))
from server import example_server  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def guardian_bin():
    """The guardian binary: GUARDIAN_BIN (`just test` builds it), else built here."""
    if os.environ.get("GUARDIAN_BIN"):
        return os.environ["GUARDIAN_BIN"]
    out = os.path.join(tempfile.mkdtemp(prefix="guardian-py-"), "guardian")
    subprocess.run(["go", "build", "-o", out, "."], cwd=REPO, check=True)
    return out


def conform(guardian_bin: str, url: str, receiver_class=Receiver):
    server = example_server(url, [SECRET], port=0, receiver_class=receiver_class)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"),
               "GUARDIAN_CONNECTOR_URL": f"{base}/fulfil", "GUARDIAN_CONNECTOR_LOOKUP_URL": f"{base}/lookup/{{key}}",
               "GUARDIAN_CONNECTOR_SECRET": SECRET}
        run = subprocess.run([guardian_bin, "connector", "test", "--json", "--provider", "stripe"], env=env,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode in (0, 1), run.stderr
        report = json.loads(run.stdout)
    finally:
        server.shutdown()
        server.server_close()
    with psycopg.connect(url) as conn:
        licences = conn.execute("SELECT count(*) FROM licence").fetchone()[0]
    return report, licences


def failing(report) -> dict[str, str]:
    return {s["name"]: s["verdict"] for s in report["steps"] if not s["ok"]}


def test_the_example_keeps_the_contract(guardian_bin, database_url):
    report, licences = conform(guardian_bin, database_url)
    assert failing(report) == {}
    assert report["ok"] and len(report["steps"]) >= 14
    assert licences == 0, "test deliveries never act"


class NoLock(Receiver):
    def try_lock(self, conn, key):
        return True


class ConflictForDone(Receiver):
    def replay(self, row, digest):
        return self.state(409, {"idempotency_key": row.answer["idempotency_key"], "status": Status.IN_PROGRESS})


class ForgetsDeclines(Receiver):
    def record(self, conn, delivery, digest, st):
        if st["status"] != Status.DECLINED:
            super().record(conn, delivery, digest, st)


@pytest.mark.parametrize("broken, wants", [
    # Without the lock the key's row still stands in the second request's way
    # (its primary key), so that one fails rather than acting: the run sees
    # no 409 while the key is in progress, and a lookup that says not_done.
    (NoLock, {"one key sent twice at once": "a key in progress answers 409", "lookup of a key in progress": "answered not_done"}),
    (ConflictForDone, {"a finished key sent again": "409 for a finished key"}),
    (ForgetsDeclines, {"a declined key sent with a body that would act": "ACTED on a declined key"}),
], ids=lambda v: v.__name__ if isinstance(v, type) else "")
def test_a_broken_kit_fails_the_run(guardian_bin, database_url, broken, wants):
    report, _ = conform(guardian_bin, database_url, broken)
    assert not report["ok"]
    failed = failing(report)
    for step, word in wants.items():
        assert word in failed.get(step, ""), f"{step}: want a failure saying {word}; the run said {failed}"
