"""Where a parallel (PettingZoo ParallelEnv) agent's trajectory ends: the row of its last action
carries the env's terminated/truncated flag, and an agent that leaves the game without either
flag ends there as truncated (as in turn-based games), so that no return runs on into the next
episode of the same agent within one fragment."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cairn.algorithms.ppo.learn import next_values
from cairn.algorithms.ppo.loss import compute_gae
from cairn.env_runner import EnvRunner
from tests.env_runner.two_agent_parallel import TwoAgentParallel, two_policy_ppo


class _Leaving(TwoAgentParallel):
    """agent_0 leaves after 2 steps, agent_1 after 4 (the episode's end); observations are
    ``[t, agent index]``. With ``flags``, agent_0 leaves terminated and agent_1 truncated; without,
    the env drops them from ``agents`` and flags nothing."""

    metadata = {"name": "leaving_v0", "render_modes": []}

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.flags = bool(config["flags"])

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.t += 1
        leaving = {a for a in self.agents if self.t >= (2 if a == "agent_0" else 4)}
        obs = {a: self._obs(a) for a in self.agents}
        rewards = {a: 1.0 for a in self.agents}
        terminated = {a: self.flags and a in leaving and a == "agent_0" for a in self.agents}
        truncated = {a: self.flags and a in leaving and a == "agent_1" for a in self.agents}
        self.agents = [a for a in self.agents if a not in leaving]
        return obs, rewards, terminated, truncated, {a: {} for a in obs}


def _make_leaving(config: dict[str, Any]) -> _Leaving:
    return _Leaving(config)


def _batches(flags: bool, steps: int = 10) -> dict[str, Any]:
    algo = two_policy_ppo(_make_leaving, {"flags": flags}).build()
    try:
        return EnvRunner(algo.config, algo.policies).sample(steps)
    finally:
        algo.stop()


def _episode_ends(batch: Any) -> list[int]:
    return np.flatnonzero(batch["terminateds"] | batch["truncateds"]).tolist()


def test_flags_are_on_the_row_of_the_agents_last_action():
    batches = _batches(flags=True)
    p0, p1 = batches["p0"], batches["p1"]
    # Episodes of 4 steps: 10 steps begin 3 of them; agent_0 acts at t = 0, 1 of each.
    assert p0["obs"][:, 0].tolist() == [0, 1, 0, 1, 0, 1]
    assert np.flatnonzero(p0["terminateds"]).tolist() == [1, 3, 5]
    assert not p0["truncateds"].any()
    assert p1["obs"][:, 0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert np.flatnonzero(p1["truncateds"]).tolist() == [3, 7]
    assert not p1["terminateds"].any()
    # The final observation (t = 2, t = 4) is each last row's next observation.
    assert p0["next_obs"][[1, 3, 5], 0].tolist() == [2, 2, 2]
    assert p1["next_obs"][[3, 7], 0].tolist() == [4, 4]


def test_an_agent_that_leaves_without_a_flag_ends_its_trajectory_as_truncated():
    p0, p1 = (batch for _, batch in sorted(_batches(flags=False).items()))
    assert _episode_ends(p0) == [1, 3, 5]
    assert _episode_ends(p1) == [3, 7]
    assert not p0["terminateds"].any() and not p1["terminateds"].any()
    for batch in (p0, p1):
        ends = batch["ends"]
        assert (ends >= (batch["terminateds"] | batch["truncateds"])).all()
    # GAE with V(s) = 0 and gamma = lambda = 1 gives the reward-to-go of each episode piece:
    # it must not run on into the agent's next episode.
    zeros = np.zeros(len(p1), np.float32)  # V(s) and V(next_obs): only the cuts matter
    advantages = compute_gae(p1["rewards"], zeros, zeros, p1["terminateds"], p1["ends"],
                             gamma=1.0, lambda_=1.0)
    assert advantages.tolist() == [4, 3, 2, 1, 4, 3, 2, 1, 2, 1]


@pytest.mark.parametrize("flags", [True, False])
def test_ppo_bootstraps_a_truncated_agent_from_its_final_observation(flags: bool):
    p1 = _batches(flags=flags)["p1"]

    class _ObsValue:  # V(s) = 10 * t, enough of a model for next_values
        def parameters(self) -> Any:
            import torch

            return iter([torch.zeros(1)])

        def value(self, obs: Any) -> Any:
            return obs[:, 0] * 10

    values = p1["obs"][:, 0] * 10
    nv = next_values(_ObsValue(), p1, values)  # type: ignore[arg-type]
    # The truncated rows (t = 3) bootstrap from V(t = 4) = 40; the fragment's last row (t = 1)
    # from V(t = 2) = 20; inside a piece, from the next row.
    assert nv.tolist() == [10, 20, 30, 40, 10, 20, 30, 40, 10, 20]


class _Silent(TwoAgentParallel):
    """agent_1 observes, and so acts, only at even t (PettingZoo warns of a live agent without
    an observation, and allows it); both agents are paid 1 at every step. Episodes end at
    t = ``end`` (5 unless configured), both agents truncated, with their final observations."""

    metadata = {"name": "silent_v0", "render_modes": []}

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.end = int(config.get("end", 5))

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.t += 1
        end = self.t >= self.end
        obs = {a: self._obs(a) for a in self.agents if a == "agent_0" or self.t % 2 == 0 or end}
        rewards = {a: 1.0 for a in self.agents}
        terminated = {a: False for a in self.agents}
        truncated = {a: end for a in self.agents}
        if end:
            self.agents = []
        return obs, rewards, terminated, truncated, {a: {} for a in obs}


def _make_silent(config: dict[str, Any]) -> _Silent:
    return _Silent(config)


def _silent_p1(steps: int, then: int, **env_config: Any) -> tuple[Any, Any, dict[str, Any]]:
    """agent_1's rows (policy p1) of a fragment of ``steps`` steps of one :class:`_Silent` and of
    the fragment of ``then`` steps after it, and the one episode the runner reports after the
    first fragment."""
    algo = two_policy_ppo(_make_silent, env_config).build()
    try:
        runner = EnvRunner(algo.config, algo.policies)
        p1 = runner.sample(steps)["p1"]
        [episode] = runner.get_metrics()
        later = runner.sample(then)["p1"]
    finally:
        algo.stop()
    return p1, later, episode


def test_an_agent_that_does_not_act_at_a_step_keeps_its_reward_on_its_last_action():
    p1, later, episode = _silent_p1(8, then=2)
    # agent_1 acts at t = 0, 2, 4 of each episode; each action earns the rewards paid until its
    # next observation (two steps), the last one the step that ends the episode.
    assert p1["obs"][:, 0].tolist() == [0, 2, 4, 0]
    assert p1["rewards"].tolist() == [2, 2, 1, 2]
    assert p1["next_obs"][:, 0].tolist() == [2, 4, 5, 2]
    assert np.flatnonzero(p1["truncateds"]).tolist() == [2]
    assert episode == {"return": 10.0, "length": 5, "policy_returns": {"p0": [5.0], "p1": [5.0]}}
    # Its action at t = 2 of the second episode (the fragment's last step) waits for its next
    # observation across the fragment's end: the next fragment sends it, with both rewards.
    assert later["obs"][:, 0].tolist() == [2, 4]
    assert later["rewards"].tolist() == [2, 1]
    assert later["next_obs"][:, 0].tolist() == [4, 5]
    assert later["truncateds"].tolist() == [False, True]


def test_an_agent_that_does_not_act_at_the_last_step_ends_with_the_episode():
    # Episodes of 4 steps: agent_1 acts at t = 0 and 2 only; the episode ends at a step where it
    # did not act, and that step's reward, flag and final observation are its last row's.
    p1, later, episode = _silent_p1(6, then=3, end=4)
    assert p1["obs"][:, 0].tolist() == [0, 2, 0]
    assert p1["rewards"].tolist() == [2, 2, 2]
    assert p1["next_obs"][:, 0].tolist() == [2, 4, 2]
    assert p1["truncateds"].tolist() == [False, True, False]
    assert p1["ends"].tolist() == [False, True, True]
    assert episode == {"return": 8.0, "length": 4, "policy_returns": {"p0": [4.0], "p1": [4.0]}}
    # Then it acts at t = 2 and the second episode ends at t = 4; its action at t = 0 of the third
    # (the fragment's last step) waits for its next observation: not sent with its own standing in.
    assert later["obs"][:, 0].tolist() == [2]
    assert later["next_obs"][:, 0].tolist() == [4]
    assert later["truncateds"].tolist() == [True]


class _ObservationBuffers(TwoAgentParallel):
    """Each agent's observation is the env's own buffer, written in place by the next step or
    reset (``[-1, -1]`` at the reset, ``[t, t]`` after step t); both truncated after 3 steps."""

    metadata = {"name": "observation_buffers_v0", "render_modes": []}

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.buffers = {a: np.zeros(2, np.float32) for a in self.possible_agents}

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        self.agents, self.t = list(self.possible_agents), 0
        for buffer in self.buffers.values():
            buffer[:] = -1.0
        return dict(self.buffers), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.t += 1
        for buffer in self.buffers.values():
            buffer[:] = self.t
        over = self.t >= 3
        agents = list(self.agents)
        self.agents = [] if over else agents
        return (dict(self.buffers), dict.fromkeys(agents, 1.0), dict.fromkeys(agents, False),
                dict.fromkeys(agents, over), {a: {} for a in agents})


def test_a_truncated_agent_keeps_its_final_observation_when_the_reset_overwrites_it():
    # The final observations were processed after the env's reset: an env returning its own
    # buffers had them overwritten by the reset's, so next_obs, the value PPO bootstraps
    # from, was the next episode's first observation.
    algo = two_policy_ppo(_ObservationBuffers).build()
    try:
        batches = EnvRunner(algo.config, algo.policies).sample(8)
    finally:
        algo.stop()
    for batch in batches.values():
        np.testing.assert_array_equal(batch["truncateds"], [False, False, True] * 2 + [False, False])
        np.testing.assert_array_equal(batch["next_obs"][:, 0], [1, 2, 3, 1, 2, 3, 1, 2])
        np.testing.assert_array_equal(batch["obs"][:, 0], [-1, 1, 2, -1, 1, 2, -1, 1])
