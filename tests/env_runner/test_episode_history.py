"""The episode getters' indexing (RLlib's): an int (-1 the latest), a slice, a list of indices
or None (all); bounded histories and histories restored mid-episode refuse what they do not
hold, never answer with part of it. The getters in real runners: tests/callbacks/test_episode_data.py."""

from __future__ import annotations

import numpy as np
import pytest

from cairn.env_runner.episode_history import EpisodeHistory
from cairn.errors import EpisodeHistoryError


def _history(steps: int, limit: int | None = None, restored: bool = False) -> EpisodeHistory:
    history = EpisodeHistory(multi_agent=False, limit=limit, restored=restored)
    if not restored:
        history.observe("a", np.array([0.0]), {"t": 0})
    for t in range(1, steps + 1):
        history.step("a", t * 10, float(t), np.array([float(t)]), {"t": t})
    return history


def test_getters_index_as_rllib_does() -> None:
    h = _history(4)
    assert h.get("rewards", None) == [1.0, 2.0, 3.0, 4.0]
    assert h.get("rewards", -1) == 4.0 and h.get("actions", 0) == 10
    assert [float(o[0]) for o in h.get("observations", None)] == [0, 1, 2, 3, 4]  # one more than actions
    assert h.get("infos", -1) == {"t": 4} and h.get("infos", 0) == {"t": 0}
    assert h.get("rewards", slice(1, 3)) == [2.0, 3.0] and h.get("rewards", slice(-2, None)) == [3.0, 4.0]
    assert h.get("rewards", [0, -1, 2]) == [1.0, 4.0, 3.0]
    assert h.get("rewards", slice(None, None, -2)) == [4.0, 2.0]
    for index in (4, -5):
        with pytest.raises(IndexError, match="has 4 rewards so far") as info:
            h.get("rewards", index)
        assert not isinstance(info.value, EpisodeHistoryError)
    with pytest.raises(TypeError, match="expected an int, a slice"):
        h.get("rewards", "last")


def test_a_bounded_history_refuses_what_it_dropped() -> None:
    h = _history(5, limit=2)
    assert h.get("rewards", slice(-2, None)) == [4.0, 5.0] and h.get("rewards", 3) == 4.0
    assert [float(o[0]) for o in h.get("observations", slice(-3, None))] == [3, 4, 5]
    for indices in (None, 2, -3, slice(0, 5), [4, 1]):
        with pytest.raises(EpisodeHistoryError, match="only the last 2 rewards are kept"):
            h.get("rewards", indices)


def test_a_restored_history_answers_only_from_the_end_of_what_followed() -> None:
    h = _history(2, restored=True)
    assert h.get("rewards", -1) == 2.0 and h.get("rewards", slice(-2, None)) == [1.0, 2.0]
    for indices in (None, 0, -3, slice(-3, None), slice(0, 1)):
        with pytest.raises(EpisodeHistoryError, match="in flight when the env runner's state was restored"):
            h.get("rewards", indices)


def test_multi_agent_getters_leave_out_agents_without_an_entry_there() -> None:
    h = EpisodeHistory(multi_agent=True, limit=None)
    h.observe("x", 1, {})
    h.observe("y", 2, {})
    h.act("x", 5)
    assert h.get("actions", -1) == {"x": 5} and h.get("actions", None) == {"x": [5], "y": []}
    assert h.get("observations", -1, agent_ids="y") == {"y": 2}
    assert h.get("observations", 0, agent_ids=["x", "z"]) == {"x": 1}


def test_the_recorded_arrays_are_copies() -> None:
    """An env that writes into the observation it returned, and a policy into its action
    array, change nothing that was recorded."""
    obs, action = np.zeros(2), np.zeros(2)
    h = EpisodeHistory(multi_agent=False, limit=None)
    h.observe("a", obs, {})
    h.step("a", action, 1.0, obs, {})
    obs[:] = 7.0
    action[:] = 3.0
    assert h.get("observations", 0).tolist() == [0.0, 0.0] and h.get("actions", -1).tolist() == [0.0, 0.0]
