"""The effect service on SQLite, as the demo runs it: same code, races serialized by the file."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = pytest.mark.acceptance


def test_sqlite_service_replays_and_makes_one_effect_per_racing_key(start_effect_service, tmp_path):
    path = tmp_path / "effect.sqlite3"
    service = start_effect_service(f"sqlite:///{path}", threads=4)
    racers, key = 8, f"race-{uuid.uuid4().hex}"
    start = threading.Barrier(racers)

    def post(_: int):
        start.wait()
        return service.post(key, {"amount": 9})

    with ThreadPoolExecutor(racers) as pool:
        replies = list(pool.map(post, range(racers)))
    assert sorted(r.status for r in replies) == [200] * (racers - 1) + [201]
    assert len({r.text for r in replies}) == 1
    assert service.post(key, {"amount": 10}).status == 422
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM effects_effect").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM rivet_idempotency_record").fetchone() == (1,)
    conn.close()
    assert service.get("/verify").json["ok"]
