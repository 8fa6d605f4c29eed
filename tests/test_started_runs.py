"""Who started which training run: in memory for one server, one shared file for the replicas of a machine."""

from __future__ import annotations

import json

from explorer.train import started_runs


def test_one_server_keeps_the_last_runs_newest_first(monkeypatch):
    monkeypatch.delenv(started_runs.STARTED_RUNS_ENV, raising=False)
    started_runs.clear()
    for number in range(started_runs.KEPT + 3):
        started_runs.record(f"run{number}", "alice@example.com", ("atan (custom)",), 40, now=1000.0 + number)
    recent = started_runs.recent()
    assert len(recent) == started_runs.KEPT
    assert [entry.run_id for entry in recent[:2]] == [f"run{started_runs.KEPT + 2}", f"run{started_runs.KEPT + 1}"]
    assert recent[-1].run_id == "run3"  # the three oldest are gone
    assert started_runs.recent(1)[0].user == "alice@example.com"
    started_runs.clear()


def test_replicas_share_one_file_and_see_each_others_runs(monkeypatch, tmp_path):
    shared = tmp_path / "started_runs.jsonl"
    monkeypatch.setenv(started_runs.STARTED_RUNS_ENV, str(shared))
    started_runs.record("a1", "alice@example.com", ("atan (custom)", "atan (true)"), 40, replica="r1", now=1.0)
    started_runs.record("b1", "bob@example.com", ("sigmoid (custom)",), 20, replica="r2", now=2.0)
    recent = started_runs.recent()
    assert [(e.run_id, e.user, e.replica, e.labels) for e in recent] == [
        ("b1", "bob@example.com", "r2", ("sigmoid (custom)",)),
        ("a1", "alice@example.com", "r1", ("atan (custom)", "atan (true)")),
    ]
    assert oct(shared.stat().st_mode & 0o777) == "0o600"
    assert json.loads(shared.read_text().splitlines()[0])["user"] == "alice@example.com"


def test_only_the_tail_of_a_long_shared_file_is_read(monkeypatch, tmp_path):
    shared = tmp_path / "started_runs.jsonl"
    monkeypatch.setenv(started_runs.STARTED_RUNS_ENV, str(shared))
    for number in range(2000):  # ~150 bytes a line: several times TAIL_BYTES
        started_runs.record(f"r{number}", "alice@example.com", ("atan (custom)",), 40, now=float(number))
    assert shared.stat().st_size > 2 * started_runs.TAIL_BYTES
    recent = started_runs.recent(started_runs.KEPT)
    assert [entry.run_id for entry in recent[:3]] == ["r1999", "r1998", "r1997"]
    assert len(recent) == started_runs.KEPT
    shared.write_text(shared.read_text() + "not json\n")  # a foreign line is skipped, not an error
    assert started_runs.recent(1)[0].run_id == "r1999"
