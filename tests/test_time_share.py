"""``explorer.train.time_share``: the Train page's training time shared by everyone training, in one server or
across the replicas of one machine (a folder of marks)."""

from __future__ import annotations

import os

import pytest

from explorer.train import time_share
from explorer.train.time_share import TRAIN_SECONDS_PER_TICK, Trainers


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["process", "folder"])
def make_trainers(request, tmp_path):
    """Trainers of one process, or of one folder (each call: another replica marking the same folder)."""
    clock = Clock()

    def make() -> Trainers:
        return Trainers(tmp_path if request.param == "folder" else None, stale_seconds=4.0, clock=clock)

    make.clock = clock
    return make


def test_the_tick_budget_is_split_between_everyone_training(make_trainers):
    trainers = make_trainers()
    assert trainers.seconds_for("a1") == TRAIN_SECONDS_PER_TICK == 0.5
    assert trainers.seconds_for("b2") == 0.25
    assert trainers.tick("a1") == 2  # a second tick of the same trainer is not a third trainer
    assert trainers.seconds_for("c3") == pytest.approx(0.5 / 3)


def test_a_trainer_quiet_for_longer_than_the_stale_time_no_longer_counts_and_one_that_left_at_once(make_trainers):
    trainers, clock = make_trainers(), make_trainers.clock
    trainers.tick("a1")
    trainers.tick("b2")
    clock.now += 4.0  # exactly the stale time: still training (a tick can be late by up to that)
    assert trainers.tick("c3") == 3
    clock.now += 0.5  # a1 and b2 last ticked 4.5 s ago
    assert trainers.tick("c3") == 1
    trainers.tick("d4")
    trainers.leave("d4")
    trainers.leave("d4")  # leaving twice (Stop, then the last tick) is harmless
    assert trainers.tick("c3") == 1


def test_replicas_marking_one_folder_share_the_machines_training_time(tmp_path):
    clock = Clock()
    first, second = Trainers(tmp_path, clock=clock), Trainers(tmp_path, clock=clock)
    assert first.seconds_for("a1") == 0.5
    assert second.seconds_for("b2") == 0.25  # the other replica's trainer counts
    assert sorted(os.listdir(tmp_path)) == ["a1", "b2"]
    clock.now += time_share.STALE_SECONDS + 1  # replica one died with a1 training: its mark goes stale
    assert second.seconds_for("b2") == 0.5
    assert os.listdir(tmp_path) == ["b2"]  # and is removed by whoever counted next
    second.leave("b2")
    assert os.listdir(tmp_path) == []


def test_a_trainer_id_must_be_a_safe_file_name(tmp_path):
    for bad in ("", "../x", "A1", "a" * 65, "a/b"):
        with pytest.raises(ValueError, match="1 to 64 lowercase hex digits"):
            Trainers(tmp_path).tick(bad)
    with pytest.raises(ValueError, match="stale_seconds must be > 0"):
        Trainers(stale_seconds=0)


def test_the_folder_comes_from_the_replica_command_or_there_is_none(monkeypatch, tmp_path):
    monkeypatch.delenv(time_share.TRAINERS_DIR_ENV, raising=False)
    assert time_share.from_environment().folder is None
    monkeypatch.setenv(time_share.TRAINERS_DIR_ENV, str(tmp_path))
    assert time_share.from_environment().folder == tmp_path
    monkeypatch.setenv(time_share.TRAINERS_DIR_ENV, str(tmp_path / "gone"))
    with pytest.raises(ValueError, match="is not a folder; it is set by `gradient-explorer run --replicas N`"):
        time_share.from_environment()
