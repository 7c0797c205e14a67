"""CheckpointManager on a local root: when it saves, what it keeps, what a new manager on the
same root knows, and that Algorithm.from_checkpoint(root) resolves to the latest."""

from __future__ import annotations

import concurrent.futures
import json
import os
import socket
import time
import types

import pytest

import cairn
from cairn.checkpoint import save_schedule
from cairn.checkpoint.manager import ManagedCheckpoint, checkpoint_name, resolve_checkpoint
from cairn.checkpoint.reader import load_algorithm_state
from cairn.config.league_settings import league_settings
from cairn.errors import BackgroundSaveError, CheckpointError, ConfigError
from cairn.league import League
from tests.helpers import small_ppo


@pytest.fixture(scope="module")
def algo():
    algo = small_ppo().build()
    yield algo
    algo.stop()


def _save_at(manager: cairn.CheckpointManager, algo: cairn.Algorithm, iteration: int,
             result: dict | None = None, **kwargs):
    algo.iteration = iteration  # a public counter; saving needs no training
    return manager.save(algo, result, **kwargs)


def _names(root) -> list[str]:
    return sorted(os.listdir(root))


def test_keep_last_deletes_old_checkpoints_after_the_new_one_is_committed(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path, keep_last=2)
    locations = [_save_at(manager, algo, i) for i in range(1, 6)]
    assert locations == [str(tmp_path / checkpoint_name(i)) for i in range(1, 6)]
    assert [c.iteration for c in manager.checkpoints()] == [4, 5]
    assert manager.latest() == str(tmp_path / "checkpoint_000005")
    assert _names(tmp_path) == ["checkpoint_000004", "checkpoint_000004.record.json",
                                "checkpoint_000005", "checkpoint_000005.record.json"]
    assert load_algorithm_state(manager.latest())["iteration"] == 5
    assert manager.best() is None  # no keep_best


@pytest.mark.parametrize(("mode", "expected"), [("max", 3), ("min", 2)])
def test_keep_best_keeps_the_best_by_a_dotted_metric_as_well(algo, tmp_path, mode, expected):
    manager = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=("evaluation.return", mode))
    values = {1: 5.0, 2: 1.0, 3: 9.0, 4: 4.0, 5: float("nan")}
    for i, value in values.items():
        _save_at(manager, algo, i, {"training_iteration": i, "evaluation": {"return": value}})
    _save_at(manager, algo, 6, {"training_iteration": 6})  # no evaluation this iteration
    assert manager.best() == str(tmp_path / checkpoint_name(expected))
    kept = manager.checkpoints()
    assert [c.iteration for c in kept] == [expected, 6]
    assert kept[0] == ManagedCheckpoint(expected, str(tmp_path / checkpoint_name(expected)), values[expected])
    assert kept[1].metric is None


@pytest.mark.parametrize("kind", ["float32", "float16", "int64"])
def test_keep_best_takes_a_numpy_number_as_the_metric(algo, tmp_path, kind):
    """A metric computed with numpy (np.float32(np.mean(...)), an np.int64 count) is a number;
    it was taken for "not a finite number", never counted as best, and the best checkpoint was
    deleted as soon as keep_last no longer covered it."""
    import numpy as np

    number = getattr(np, kind)
    manager = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=("score", "max"))
    for i, value in [(1, 3), (2, 9), (3, 1), (4, 2)]:
        _save_at(manager, algo, i, {"training_iteration": i, "score": number(value)})
    assert [(c.iteration, c.metric) for c in manager.checkpoints()] == [(2, 9.0), (4, 2.0)]
    assert manager.best() == str(tmp_path / checkpoint_name(2))
    _save_at(manager, algo, 5, {"training_iteration": 5, "nested": {"score": number(7)}, "score": None})
    assert manager.checkpoints()[-1].metric is None  # None stays "no value"
    manager = cairn.CheckpointManager(tmp_path / "nested", keep_last=1, keep_best=("nested/score", "min"))
    for i, value in [(1, 3), (2, 1), (3, 5)]:
        _save_at(manager, algo, i, {"training_iteration": i, "nested": {"score": number(value)}})
    assert [(c.iteration, c.metric) for c in manager.checkpoints()] == [(2, 1.0), (3, 5.0)]


def _league_result(iteration: int, win_rate: dict) -> dict:
    return {"training_iteration": iteration, "episode_return_mean": 0.0,
            "league": {"rating": {"main": 25.0, "random_legal": 25.0}, "win_rate": win_rate, "games": 4}}


@pytest.mark.parametrize("metric", ["league/win_rate/random_legal", "league.win_rate.random_legal"])
def test_keep_best_by_a_slash_joined_name_as_progress_csv_names_it(algo, tmp_path, metric):
    manager = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=(metric, "max"))
    # Iteration 1: no game against random_legal in the window yet (no win rate: never the best).
    for i, rate in [(1, None), (2, 0.5), (3, 0.75), (4, 0.25)]:
        _save_at(manager, algo, i, _league_result(i, {} if rate is None else {"random_legal": rate}))
    assert manager.best() == str(tmp_path / checkpoint_name(3))
    assert [(c.iteration, c.metric) for c in manager.checkpoints()] == [(3, 0.75), (4, 0.25)]


@pytest.mark.parametrize("metric", ["league/winrate/random_legal", "league.rating.random",
                                    "episode_return_meen", "evaluation/league/random_legal/win_rate"])
def test_a_missing_keep_best_metric_is_an_error_naming_it_and_the_metrics(algo, tmp_path, metric):
    manager = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=(metric, "max"))
    result = {**_league_result(1, {"random_legal": 0.5}), "evaluation": {"episode_return_mean": 1.0}}
    with pytest.raises(ConfigError) as err:
        _save_at(manager, algo, 1, result)
    message = str(err.value)
    assert f"no metric {metric!r}" in message
    for name in ("league/win_rate/random_legal", "league/rating/main", "evaluation/episode_return_mean"):
        assert name in message
    assert manager.checkpoints() == [] and _names(tmp_path) == []  # nothing written


def _real_league_result(iteration: int) -> dict:
    """A result whose ``league`` section is a real League's metrics: main ``main``, the fixed
    opponent ``random_legal`` (no game yet: no win rate), one snapshot in the pool."""
    league = League(league_settings(opponents={"random_legal": "random_legal"}), seed=0)
    league.pool = ["main_v1"]
    league.ratings.ensure("main_v1", like="main")
    return {"training_iteration": iteration, "episode_return_mean": 0.0, "league": league.metrics()}


@pytest.mark.parametrize("opponent", ["random_legl", "main", "main_vx", "heuristic", "random.legal"])
def test_a_league_win_rate_against_an_opponent_that_can_never_play_is_an_error(algo, tmp_path, opponent):
    """A misspelt opponent would look like one with no game yet at every save, so that no
    checkpoint ever counts as best: refused when the league tells it can never appear (not a
    fixed opponent, not a snapshot name '<main>_v<n>'; main plays no games against itself)."""
    metric = f"league/win_rate/{opponent}"
    manager = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=(metric, "max"))
    with pytest.raises(ConfigError) as err:
        _save_at(manager, algo, 1, _real_league_result(1))
    message = str(err.value)
    assert repr(opponent) in message and "'random_legal'" in message and "'main_v<n>'" in message
    assert "Fix:" in message
    assert manager.checkpoints() == [] and _names(tmp_path) == []  # nothing written
    # The next call works: a name that can appear later is saved, not yet best.
    manager = cairn.CheckpointManager(tmp_path, keep_last=1,
                                      keep_best=("league/win_rate/random_legal", "max"))
    _save_at(manager, algo, 1, _real_league_result(1))
    assert manager.best() is None and len(manager.checkpoints()) == 1


@pytest.mark.parametrize("metric", ["league/win_rate/random_legal", "league/win_rate/main_v1",
                                    "league/win_rate/main_v7", "league.win_rate.main_v7"])
def test_a_league_win_rate_against_an_opponent_that_can_still_play_is_saved_never_best(
        algo, tmp_path, metric):
    """A fixed opponent with no game yet, a pool snapshot, a snapshot the league has not taken
    yet: none has a win rate in this result, but each can have one later."""
    manager = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=(metric, "max"))
    _save_at(manager, algo, 1, _real_league_result(1))
    assert manager.best() is None and len(manager.checkpoints()) == 1


@pytest.mark.parametrize("metric", ["evaluation", "league", "env", "done"])
def test_a_keep_best_metric_that_is_no_number_is_an_error(algo, tmp_path, metric):
    """A top-level key naming a group of metrics, a string or a bool never has a finite value:
    refused at the save, as a missing metric is, instead of keeping no best checkpoint."""
    manager = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=(metric, "max"))
    result = {**_league_result(1, {"random_legal": 0.5}), "evaluation": {"episode_return_mean": 1.0},
              "env": "CartPole-v1", "done": False}
    with pytest.raises(ConfigError, match=f"'{metric}' is .*not a number") as err:
        _save_at(manager, algo, 1, result)
    assert "evaluation/episode_return_mean" in str(err.value)  # the metrics it could name
    assert manager.checkpoints() == [] and _names(tmp_path) == []  # nothing written
    manager = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=("episode_return_mean", "max"))
    _save_at(manager, algo, 1, {"episode_return_mean": None})  # no value yet: saved, never best
    assert manager.best() is None and len(manager.checkpoints()) == 1


def test_a_top_level_key_and_ties(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=("episode_return_mean", "max"))
    for i in (1, 2, 3):
        _save_at(manager, algo, i, {"episode_return_mean": 10.0 if i < 3 else 2.0})
    assert manager.best() == str(tmp_path / "checkpoint_000002")  # the newest among equals
    assert [c.iteration for c in manager.checkpoints()] == [2, 3]


def test_due_by_iterations_and_by_seconds(algo, tmp_path, monkeypatch):
    manager = cairn.CheckpointManager(tmp_path / "it", save_every_iterations=3, keep_last=None)
    saved = [i for i in range(1, 8) if _save_at(manager, algo, i) is not None]
    assert saved == [3, 6]
    assert _save_at(manager, algo, 7, force=True) == str(tmp_path / "it" / "checkpoint_000007")
    assert _save_at(manager, algo, 7) is None  # already saved

    # The schedule's clock is the test's: on a loaded machine 0.2 s of real time can pass
    # inside a save or between two calls, which made saves due that the test said were not.
    clock = types.SimpleNamespace(now=1000.0)
    monkeypatch.setattr(save_schedule, "time", types.SimpleNamespace(monotonic=lambda: clock.now))
    timed = cairn.CheckpointManager(tmp_path / "t", save_every_iterations=None, save_every_seconds=0.5)
    clock.now += 0.375  # binary fractions: the sums are exact
    assert _save_at(timed, algo, 1) is None
    clock.now += 0.125
    assert _save_at(timed, algo, 2) is not None
    clock.now += 0.375
    assert _save_at(timed, algo, 3) is None  # the clock restarts at each save
    clock.now += 0.125
    assert _save_at(timed, algo, 4) is not None


def test_a_new_manager_on_the_same_root_knows_the_checkpoints_and_their_metrics(algo, tmp_path):
    first = cairn.CheckpointManager(tmp_path, keep_last=2, keep_best=("score", "max"))
    for i, score in [(1, 7.0), (2, 1.0), (3, 2.0)]:
        _save_at(first, algo, i, {"score": score})
    resumed = cairn.CheckpointManager(tmp_path, keep_last=2, keep_best=("score", "max"))
    assert resumed.checkpoints() == first.checkpoints()
    assert [c.iteration for c in resumed.checkpoints()] == [1, 2, 3]
    assert resumed.best() == str(tmp_path / "checkpoint_000001")
    assert not resumed.due(3) and resumed.due(4)
    _save_at(resumed, algo, 4, {"score": 3.0})
    assert [c.iteration for c in resumed.checkpoints()] == [1, 3, 4]  # the best stays
    with pytest.raises(CheckpointError, match="later iteration 4"):
        _save_at(resumed, algo, 2, force=True)


def test_a_manager_restarted_with_another_keep_best_metric_ignores_the_old_values(algo, tmp_path):
    """The records name their metric: a training return of 500 is no win rate of 500, so it
    neither stays as the best by the new metric nor is returned by best()."""
    first = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=("score", "max"))
    for i, score in [(1, 500.0), (2, 1.0)]:
        _save_at(first, algo, i, {"score": score, "win_rate": 0.0})
    resumed = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=("win_rate", "max"))
    assert resumed.best() is None and [c.metric for c in resumed.checkpoints()] == [None, None]
    for i, rate in [(3, 0.9), (4, 0.2)]:
        _save_at(resumed, algo, i, {"score": 0.0, "win_rate": rate})
    assert resumed.best() == str(tmp_path / "checkpoint_000003")
    assert [c.iteration for c in resumed.checkpoints()] == [3, 4]
    # the same metric spelt with '.' instead of '/' is the same metric
    nested = tmp_path / "nested"
    first = cairn.CheckpointManager(nested, keep_last=1, keep_best=("evaluation/episode_return_mean", "max"))
    _save_at(first, algo, 1, {"evaluation": {"episode_return_mean": 7.0}})
    resumed = cairn.CheckpointManager(nested, keep_last=1,
                                      keep_best=("evaluation.episode_return_mean", "max"))
    assert resumed.best() == str(nested / "checkpoint_000001")


def test_algorithm_from_checkpoint_of_a_manager_root_is_the_latest(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path / "run", keep_last=2)
    for i in (1, 2):
        _save_at(manager, algo, i)
    restored = cairn.Algorithm.from_checkpoint(tmp_path / "run")
    assert restored.iteration == 2
    restored.stop()
    assert resolve_checkpoint(str(tmp_path / "run")) == manager.latest()
    assert resolve_checkpoint(manager.latest()) == manager.latest()  # a checkpoint is itself
    empty = tmp_path / "empty"
    empty.mkdir()
    assert resolve_checkpoint(empty) == empty
    with pytest.raises(CheckpointError):
        cairn.Algorithm.from_checkpoint(empty)


def test_a_new_manager_removes_what_crashed_saves_left(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path)
    _save_at(manager, algo, 1)
    dead = 2 ** 22 + 12345  # above the default pid_max: no such process
    stale = [f".checkpoint_000002.cairn-tmp-{dead}-abcd1234",
             f".checkpoint_000001.record.json.cairn-tmp-{dead}-00"]
    (tmp_path / stale[0]).mkdir()
    (tmp_path / stale[0] / "algorithm_state.json").write_text("{}")
    (tmp_path / stale[1]).write_text("{}")
    records = {3: {"iteration": 3, "host": socket.gethostname(), "pid": dead, "renewed": time.time()},
               4: {"iteration": 4, "time": 0.0},  # an older cairn's record, its lease long expired
               5: {"iteration": 5, "host": "elsewhere", "pid": dead, "renewed": time.time()}}
    for iteration in (3, 5, 6):  # a store without rename leaves uncommitted prefixes
        (tmp_path / checkpoint_name(iteration)).mkdir()
        (tmp_path / checkpoint_name(iteration) / "algorithm_state.json").write_text("{}")
    for iteration, record in records.items():
        (tmp_path / f"{checkpoint_name(iteration)}.record.json").write_text(json.dumps(record))
    (tmp_path / "notes.txt").write_text("not the manager's")
    cairn.CheckpointManager(tmp_path)
    # 3: its writer is dead; 4: its lease expired; 5 (a writer on another host that renews its
    # lease) and 6 (no record: nothing proves it abandoned) may be in use and stay
    assert _names(tmp_path) == ["checkpoint_000001", "checkpoint_000001.record.json", "checkpoint_000005",
                                "checkpoint_000005.record.json", "checkpoint_000006", "notes.txt"]


def test_bad_arguments_are_refused_with_the_value(tmp_path):
    for kwargs, match in [({"keep_last": 0}, "keep_last=0"), ({"keep_best": ("m", "up")}, "keep_best"),
                          ({"save_every_iterations": 0}, "save_every_iterations=0"),
                          ({"save_every_seconds": -1}, "save_every_seconds=-1")]:
        with pytest.raises(ConfigError, match=match):
            cairn.CheckpointManager(tmp_path, **kwargs)


def test_background_saves_retain_after_commit_and_wait_reports_failures(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path / "run", keep_last=1)
    futures = [_save_at(manager, algo, i, blocking=False) for i in (1, 2, 3)]
    manager.wait()
    assert [f.result() for f in futures] == [str(tmp_path / "run" / checkpoint_name(i)) for i in (1, 2, 3)]
    assert [c.iteration for c in manager.checkpoints()] == [3]

    (tmp_path / "run" / "checkpoint_000004").write_text("in the way")  # a file: the write fails
    failed = _save_at(manager, algo, 4, blocking=False)
    with pytest.raises(CheckpointError, match="background save") as raised:
        manager.wait()
    assert raised.value.__cause__ is failed.exception()
    assert [c.iteration for c in manager.checkpoints()] == [3]  # nothing was deleted
    manager.wait()  # reported once; delivered, so the algorithm does not raise it again either
    assert _save_at(manager, algo, 5) == str(tmp_path / "run" / "checkpoint_000005")

    (tmp_path / "run" / "checkpoint_000006").write_text("in the way")
    unseen = _save_at(manager, algo, 6, blocking=False)
    concurrent.futures.wait([unseen], timeout=30)  # failed, but nobody asked: the algorithm owes it
    with pytest.raises(BackgroundSaveError):
        _save_at(manager, algo, 7)
    assert _save_at(manager, algo, 7) == str(tmp_path / "run" / "checkpoint_000007")
    manager.wait()  # raised once, by the algorithm

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    broken = cairn.CheckpointManager(blocker / "run")  # nothing can be written under a file
    with pytest.raises(OSError):
        _save_at(broken, algo, 4, blocking=False)  # the record fails at once, in this thread


def test_a_failed_background_save_is_reported_once_whoever_reports_it(algo, tmp_path):
    root = tmp_path / "run"
    manager = cairn.CheckpointManager(root, save_every_iterations=2, keep_last=None)
    _save_at(manager, algo, 2)

    # A save that is not due still reports an earlier failure, so wait() cannot miss it.
    (root / checkpoint_name(4)).write_text("in the way")  # a file: the write fails
    failed = _save_at(manager, algo, 4, blocking=False)
    concurrent.futures.wait([failed], timeout=30)
    with pytest.raises(BackgroundSaveError, match="background save under") as raised:
        _save_at(manager, algo, 5)  # not due: saves nothing, but reports the failure
    assert raised.value.__cause__ is failed.exception()
    manager.wait()  # reported: not again, neither here nor by the algorithm
    assert _save_at(manager, algo, 6) == str(root / checkpoint_name(6))

    # The algorithm reported it first (its own next save): the manager does not repeat it.
    (root / checkpoint_name(10)).write_text("in the way")
    unseen = _save_at(manager, algo, 10, blocking=False)
    concurrent.futures.wait([unseen], timeout=30)
    with pytest.raises(BackgroundSaveError):
        algo.save(tmp_path / "elsewhere")
    manager.wait()
    assert _save_at(manager, algo, 12) == str(root / checkpoint_name(12))

    # The caller took it from the Future: nobody raises it again.
    (root / checkpoint_name(14)).write_text("in the way")
    asked = _save_at(manager, algo, 14, blocking=False)
    with pytest.raises(FileExistsError):  # the write's own error
        asked.result(timeout=30)
    manager.wait()
    assert _save_at(manager, algo, 16) == str(root / checkpoint_name(16))
    assert [c.iteration for c in manager.checkpoints()] == [2, 6, 12, 16]
    manager.wait()  # nothing is owed


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "background"])
def test_a_replacement_that_fails_keeps_the_replaced_checkpoints_metric(algo, tmp_path, monkeypatch,
                                                                        blocking):
    """save(force=True) of an iteration already saved writes its record first; when the save
    then fails, the checkpoint it was to replace is still there and keeps its own metric, so
    that best() and keep_best still rank it by its own result."""
    manager = cairn.CheckpointManager(tmp_path / "run", keep_last=1, keep_best=("score", "max"))
    best = _save_at(manager, algo, 1, {"score": 5.0})

    def failing(*args, **kwargs):
        raise RuntimeError("injected failure in the policy's state")

    monkeypatch.setattr(algo.get_policy(), "get_state", failing)
    with pytest.raises(RuntimeError, match="injected failure"):
        _save_at(manager, algo, 1, {"score": 0.5}, force=True, blocking=blocking)
    monkeypatch.undo()
    assert [(c.iteration, c.metric) for c in manager.checkpoints()] == [(1, 5.0)]
    assert manager.best() == best
    _save_at(manager, algo, 2, {"score": 1.0})  # keep_last=1 keeps 2, keep_best keeps 1 (5.0)
    assert [(c.iteration, c.metric) for c in manager.checkpoints()] == [(1, 5.0), (2, 1.0)]
    assert manager.best() == best


def test_a_failed_replacement_of_a_checkpoint_without_a_record_leaves_it_without_one(algo, tmp_path,
                                                                                    monkeypatch):
    """A committed checkpoint copied in by hand has no record (no metric); a replacement of it
    that fails does not give it the failed save's metric."""
    root = tmp_path / "run"
    algo.iteration = 3
    algo.save(root / checkpoint_name(3))
    manager = cairn.CheckpointManager(root, keep_best=("score", "max"))
    monkeypatch.setattr(algo.get_policy(), "get_state", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        _save_at(manager, algo, 3, {"score": 9.0}, force=True)
    monkeypatch.undo()
    assert [(c.iteration, c.metric) for c in manager.checkpoints()] == [(3, None)]
    assert _names(root) == [checkpoint_name(3)]


def test_a_damaged_record_at_retention_keeps_its_checkpoint(algo, tmp_path):
    """A record that is there but cannot be parsed (damaged on disk) passed for "no metric", so
    keep_best deleted what may be the best checkpoint. It is kept, with a warning naming the
    record; once the record is deleted (the fix the warning gives), the rules decide."""
    from cairn.errors import StorageCleanupWarning

    manager = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=("score", "max"))
    for iteration, score in [(1, 9.0), (2, 1.0)]:
        _save_at(manager, algo, iteration, {"score": score})
    record = tmp_path / f"{checkpoint_name(1)}.record.json"
    record.write_bytes(record.read_bytes()[:-3])
    with pytest.warns(StorageCleanupWarning, match=f"{checkpoint_name(1)}.record.json"):
        _save_at(manager, algo, 3, {"score": 2.0})
    assert [c.iteration for c in manager.checkpoints()] == [1, 3]
    record.unlink()
    _save_at(manager, algo, 4, {"score": 0.0})
    assert [(c.iteration, c.metric) for c in manager.checkpoints()] == [(3, 2.0), (4, 0.0)]
