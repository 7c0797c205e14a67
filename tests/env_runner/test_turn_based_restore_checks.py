"""A turn-based runner's pending moves, restored from a state, pass the check a parallel env's
waiting rows pass (``cairn.env_runner.parallel_state.check_row``): an observation row of its
policy's shape, a raw action of its policy's shape and dtype, every number finite, a finite
behaviour log-probability where the policy wants one. A move that does not fit is refused with
a ``CheckpointFormatError`` naming the key, and the runner keeps what it had.
"""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3
from pettingzoo.utils.env_logger import EnvLogger

import cairn
from cairn.errors import CheckpointFormatError
from tests.helpers import assert_trees_equal
from tests.league.games import small_league


@pytest.fixture(autouse=True)
def _quiet_illegal_moves():
    EnvLogger.suppress_output()
    yield
    EnvLogger.unsuppress_output()


def make_tictactoe(env_config: dict) -> object:
    return tictactoe_v3.env()


def shared_policy(agent_id: str, **kwargs: object) -> str:
    return "shared"


def _set(index: tuple[int, ...], value: float):
    """An edit of a saved array: ``value`` at ``index``, the array made float64 to hold it."""
    def edit(array: np.ndarray) -> np.ndarray:
        out = np.array(array, dtype=np.float64)
        out[index] = value
        return out
    return edit


#: Edits of env 0's first pending move: (key, edit of the saved array).
TAMPERED = {
    # Accepted before: restored as the float 1.5, a row no policy acted.
    "a fractional action": ("pending_actions", _set((0,), 1.5)),
    "an action that is not finite": ("pending_actions", _set((0,), np.inf)),
    "an action of another shape": ("pending_actions", lambda a: np.stack([a, a], axis=1)),
    "an observation that is not finite": ("pending_obs", _set((0, 0), np.nan)),
    "an observation of another shape": ("pending_obs", lambda a: np.asarray(a)[:, :-1]),
    "a NaN log-probability": ("pending_action_logp", _set((0,), np.nan)),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_tampered_pending_moves_are_refused_and_nothing_changes(case):
    key, edit = TAMPERED[case]
    algo = (cairn.PPOConfig().environment(make_tictactoe)
            .training(train_batch_size=128, minibatch_size=64)
            .env_runners(num_envs_per_env_runner=1)
            .multi_agent(policies={"shared"}, policy_mapping_fn=shared_policy).debugging(seed=0)).build()
    try:
        runner = algo.env_runner_group.local
        runner.sample(3)  # mid-game: one player to move, the other's move pending
        state = runner.get_state()
        assert len(state["current_obs"][0]["pending_agents"]) == 1
        bad = copy.deepcopy(state)
        bad["current_obs"][0][key] = edit(bad["current_obs"][0][key])
        with pytest.raises(CheckpointFormatError, match=re.escape(f"current_obs[0]['{key}'][0]")):
            runner.set_state(bad)
        assert_trees_equal(runner.get_state()["current_obs"], state["current_obs"])
        runner.set_state(state)  # the unedited state restores, and the runner goes on
        assert_trees_equal(runner.get_state()["current_obs"], state["current_obs"])
        assert runner.sample(6)["shared"]["obs"].shape[1:] == state["current_obs"][0]["pending_obs"].shape[1:]
    finally:
        algo.stop()


def test_a_pending_move_of_a_scripted_opponent_is_refused():
    """A league's scripted opponent moves on the env's observation and leaves no move pending: a
    state that says it does is refused by name (an AttributeError on its missing policy before)."""
    algo = small_league(opponents={"random_legal": "random_legal"}, matchmaking="uniform").build()
    try:
        runner = algo.env_runner_group.local
        for _ in range(200):  # step until an env's learning player is to move against it (any seed)
            state = runner.get_state()
            envs = [(i, name) for i, env in enumerate(state["current_obs"])
                    for name, pid in env["agent_pids"].items()
                    if pid == "random_legal" and env["to_move"]["agent"] != name]
            if envs:
                break
            runner.sample(1)
        [(i, opponent), *_] = envs
        edited = copy.deepcopy(state)
        entry = edited["current_obs"][i]
        row = entry["to_move"]["obs"]
        entry.update(pending_agents=[opponent], pending_obs=row[None], pending_actions=np.zeros(1, np.int64),
                     pending_action_logp=np.zeros(1, np.float32))
        with pytest.raises(CheckpointFormatError, match=re.escape(f"current_obs[{i}]['pending_obs'][0]")
                           + ".*scripted opponent"):
            runner.set_state(edited)
        assert_trees_equal(runner.get_state()["current_obs"], state["current_obs"])
        runner.set_state(state)  # the unedited state restores
        assert runner.sample(4)
    finally:
        algo.stop()
