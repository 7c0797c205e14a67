"""Parallel multi-agent envs whose agents leave: each agent's rows end where its part of the
episode ends, so that neither GAE nor a recurrent policy's sequences run from one episode (or
one stay of the agent) into the next."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo import ParallelEnv

import cairn
from cairn.algorithms.ppo.recurrent import sequence_starts
from tests.helpers import assert_trees_equal

LSTM = {"use_lstm": True, "lstm_cell_size": 4, "max_seq_len": 20}


class Vanishing(ParallelEnv):  # type: ignore[misc]
    """Two agents; every episode lasts 3 steps and ends by emptying ``agents``, with no
    terminated or truncated flag (PettingZoo asks for one; not every env gives it).
    Observation: [step, agent index]."""

    metadata = {"name": "vanishing_v0", "render_modes": []}
    possible_agents = ["a0", "a1"]

    def __init__(self) -> None:
        self.agents: list[str] = []
        self.t = 0

    def observation_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Box(-10.0, 10.0, (2,), np.float32)

    def action_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Discrete(2)

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.t, self.possible_agents.index(agent)], np.float32)

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.t += 1
        obs = {a: self._obs(a) for a in actions}
        if self.t >= 3:
            self.agents = []
        flags = dict.fromkeys(actions, False)
        return obs, dict.fromkeys(actions, 1.0), flags, dict(flags), {a: {} for a in actions}


def _config(env: Any, model: dict[str, Any]) -> cairn.PPOConfig:
    return (cairn.PPOConfig().environment(lambda _cfg: env())
            .training(train_batch_size=40, minibatch_size=20, num_epochs=1, model=model)
            .multi_agent(policies={"p"}, policy_mapping_fn=lambda agent_id, **kwargs: "p")
            .debugging(seed=0))


@pytest.mark.parametrize("model", [{"hidden": [8]}, LSTM], ids=["mlp", "lstm"])
def test_an_episode_that_ends_by_emptying_agents_ends_each_agents_rows(model):
    algo = _config(Vanishing, model).build()
    try:
        batch = algo.env_runner_group.local.sample(10)["p"]
        step = batch["obs"][:, 0]
        last = step == 2  # each episode's last step (observed at t = 2, acted, then the env ended)
        assert last.sum() == 2 * 3  # 3 whole episodes of 3 steps for each of the 2 agents
        # Left without a flag: truncated (bootstrapped from the final observation), and the end
        # of the agent's piece, so GAE does not run on into the next episode's first row.
        assert batch["truncateds"][last].all() and batch["ends"][last].all()
        assert not batch["terminateds"].any()
        firsts = np.flatnonzero(batch["firsts"])
        assert (step[firsts] == 0).all() and all(batch["ends"][r - 1] for r in firsts if r > 0)
        if "use_lstm" in model:
            # Each episode's first row starts a learner sequence, from the initial state the
            # runner acted it with; no sequence runs across an episode's end.
            starts, _ = sequence_starts(batch["ends"], LSTM["max_seq_len"])
            assert set(firsts) <= set(starts)
            assert not batch["state_in_0"][firsts].any() and not batch["state_in_1"][firsts].any()
        algo.train()
    finally:
        algo.stop()


class Respawning(Vanishing):
    """``a1`` dies at step 2 (terminated) and comes back at step 4 in the same episode, which
    ends at step 8 (both terminated)."""

    metadata = {"name": "respawning_v0", "render_modes": []}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.t += 1
        obs = {a: self._obs(a) for a in actions}
        done = dict.fromkeys(actions, self.t >= 8)
        if self.t == 2:
            done["a1"] = True
        self.agents = [a for a in self.agents if not done[a]]
        if self.t == 4:
            self.agents, obs["a1"] = ["a0", "a1"], self._obs("a1")
        return obs, dict.fromkeys(actions, 1.0), done, dict.fromkeys(actions, False), {a: {} for a in actions}

    def get_state(self) -> dict[str, Any]:
        return {"t": self.t, "agents": list(self.agents)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.t, self.agents = int(state["t"]), list(state["agents"])


def test_an_agent_that_comes_back_after_its_end_starts_from_the_initial_state():
    """Its termination ended its trajectory (the learner cuts its returns and sequences there):
    its next stay starts from the policy's initial state, as a new episode would, instead of
    the memory of the stay that ended."""
    algo = _config(Respawning, LSTM).build()
    try:
        batch = algo.env_runner_group.local.sample(8)["p"]
        a1 = batch["obs"][:, 1] == 1
        steps = batch["obs"][a1, 0].tolist()
        assert steps == [0, 1, 4, 5, 6, 7]  # away at steps 2 and 3
        back = np.flatnonzero(a1)[2]
        assert batch["ends"][back - 1] and batch["terminateds"][back - 1]
        assert not batch["state_in_0"][back].any() and not batch["state_in_1"][back].any()
        assert batch["state_in_0"][back + 1].any()  # and goes on from there
        # a0 never left: its state goes on through the whole episode (all zeros after its first
        # step only: its first observation is zeros, and so are the LSTM's initial biases)
        a0 = np.flatnonzero(~a1)
        assert batch["state_in_0"][a0[2:]].any(axis=1).all()
    finally:
        algo.stop()


def _a1_back(batch: Any) -> int:
    """The row of ``a1``'s first action after it came back (observed at step 4)."""
    [back] = np.flatnonzero((batch["obs"][:, 1] == 1) & (batch["obs"][:, 0] == 4))
    return int(back)


@pytest.mark.parametrize("model", [{"hidden": [8]}, LSTM], ids=["mlp", "lstm"])
def test_an_agent_that_comes_back_after_its_end_starts_a_new_trajectory(model):
    """Its first row back is a first (``firsts``), as its state restarts: a recurrent learner's
    sequence starts there from the initial state, and a reward normaliser's running return and
    n-step replay do not run on from the stay that ended with terminated=True."""
    algo = _config(Respawning, model).build()
    try:
        batch = algo.env_runner_group.local.sample(8)["p"]
        back = _a1_back(batch)
        assert batch["terminateds"][back - 1] and batch["ends"][back - 1]
        assert batch["firsts"][back]
        # Only the episode's opening rows and the row back are firsts.
        step, firsts = batch["obs"][:, 0], batch["firsts"]
        assert set(np.flatnonzero(firsts)) == set(np.flatnonzero(step == 0)) | {back}
        if "use_lstm" in model:
            starts, _ = sequence_starts(batch["ends"], LSTM["max_seq_len"])
            assert back in set(starts)
            assert not batch["state_in_0"][back].any() and not batch["state_in_1"][back].any()
    finally:
        algo.stop()


@pytest.mark.parametrize("model", [{"hidden": [8]}, LSTM], ids=["mlp", "lstm"])
@pytest.mark.parametrize("before", [2, 3], ids=["just-ended", "away"])
def test_a_runner_restored_while_the_agent_is_away_marks_its_return_alike(model, before):
    """A checkpoint taken after ``a1``'s termination (steps 2 and 3: it is away) and before it
    comes back: the restored runner marks the same row first as the run without a stop (what
    decides it, the env's live agents before and after the step, is in the restored state)."""
    algo = _config(Respawning, model).build()
    try:
        runner = algo.env_runner_group.local
        first = runner.sample(before)["p"]
        assert not (first["obs"][:, 1] == 1)[first["obs"][:, 0] >= 2].any()  # a1 has not acted since
        state = runner.get_state()
        assert "a1" not in state["current_obs"][0]["agents"]
        restored = cairn.Algorithm.from_state(
            algo.get_state(), config_overrides={"env": lambda _cfg: Respawning()},
            policy_mapping_fn=lambda agent_id, **kwargs: "p")
        try:
            other = restored.env_runner_group.local
            assert_trees_equal(other.get_state(), state)
            a = runner.sample(8 - before)["p"]
            b = other.sample(8 - before)["p"]
            assert_trees_equal(dict(a), dict(b))
            assert b["firsts"][_a1_back(b)]
        finally:
            restored.stop()
    finally:
        algo.stop()


class InstantRespawning(Respawning):
    """``a1`` is terminated at step 2 and observes on at once (the env keeps it in ``agents``:
    respawned in the same step); the episode ends at step 8."""

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.t += 1
        obs = {a: self._obs(a) for a in actions}
        done = dict.fromkeys(actions, self.t >= 8)
        if self.t == 2:
            done["a1"] = True
        self.agents = [] if self.t >= 8 else ["a0", "a1"]
        return obs, dict.fromkeys(actions, 1.0), done, dict.fromkeys(actions, False), {a: {} for a in actions}


@pytest.mark.parametrize("model", [{"hidden": [8]}, LSTM], ids=["mlp", "lstm"])
def test_an_agent_respawned_in_the_step_that_ended_it_starts_a_new_trajectory(model):
    algo = _config(InstantRespawning, model).build()
    try:
        batch = algo.env_runner_group.local.sample(8)["p"]
        a1 = np.flatnonzero(batch["obs"][:, 1] == 1)
        assert batch["obs"][a1, 0].tolist() == list(range(8))
        back = a1[2]  # its row at step 2, after the row of step 1 was terminated
        assert batch["terminateds"][back - 1] and batch["firsts"][back]
        assert set(np.flatnonzero(batch["firsts"])) == set(np.flatnonzero(batch["obs"][:, 0] == 0)) | {back}
        if "use_lstm" in model:
            assert not batch["state_in_0"][back].any() and not batch["state_in_1"][back].any()
    finally:
        algo.stop()
