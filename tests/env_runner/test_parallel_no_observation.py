"""A parallel (PettingZoo ParallelEnv) env whose live agents all go without an observation: no
agent can act, so the env could never be stepped again. The runner refuses it with an EnvError
naming the env copy and the fix, and counts nothing of the fragment (before, it skipped that env
for good while counting its steps, and ``run_episodes`` waited forever for its episode's end)."""

from __future__ import annotations

from typing import Any

import pytest

from cairn.env_runner import EnvRunner
from cairn.errors import EnvError
from tests.env_runner.two_agent_parallel import TwoAgentParallel, two_policy_ppo


class _Blank(TwoAgentParallel):
    """Two agents paid 1 per step; episodes end at t = 4 by emptying ``agents`` (both truncated).
    At t = ``blank`` of the first ``blank_episodes`` episodes the step returns no observation
    (``mode`` "alive": both agents stay live, unflagged; "terminated": both flagged terminated,
    yet left in ``agents``). With ``empty_reset``, ``reset()`` observes no agent."""

    metadata = {"name": "blank_v0", "render_modes": []}

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.episodes = 0
        self.blank = int(config.get("blank", 2))
        self.blank_episodes = int(config.get("blank_episodes", 10**9))
        self.mode = str(config.get("mode", "alive"))
        self.empty_reset = bool(config.get("empty_reset", False))
        self.steps = 0  # env steps over all episodes

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        observed = super().reset(seed, options)
        self.episodes += 1
        return ({}, {}) if self.empty_reset else observed

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        assert actions, "stepped without actions"
        self.t += 1
        self.steps += 1
        blank = self.t == self.blank and self.episodes <= self.blank_episodes
        end = self.t >= 4
        obs = {} if blank else {a: self._obs(a) for a in self.agents}
        rewards = {a: 1.0 for a in self.agents}
        terminated = {a: blank and self.mode == "terminated" for a in self.agents}
        truncated = {a: end for a in self.agents}
        if end:
            self.agents = []
        return obs, rewards, terminated, truncated, {a: {} for a in obs}


def _make_blank(config: dict[str, Any]) -> _Blank:
    return _Blank(config)


def _runner(num_envs: int = 1, **env_config: Any) -> tuple[Any, EnvRunner]:
    algo = two_policy_ppo(_make_blank, env_config).env_runners(num_envs_per_env_runner=num_envs).build()
    return algo, EnvRunner(algo.config, algo.policies)


@pytest.mark.parametrize("mode", ["alive", "terminated"])
def test_a_step_that_observes_no_live_agent_is_an_env_error(mode: str):
    algo, runner = _runner(mode=mode)
    try:
        with pytest.raises(EnvError, match=r"Env 0 \(_Blank\).*no observation.*agent_0.*env\.agents"):
            runner.sample(10)
        # Nothing of the failed fragment is counted, no episode is reported.
        assert runner.num_env_steps_sampled == 0
        assert runner.get_metrics() == []
    finally:
        algo.stop()


def test_the_error_names_the_env_copy_and_the_next_sample_counts_right():
    # Env copy 1 blanks at t = 2 of its first episode only; copy 0 never does (blank = 99).
    algo, runner = _runner(2, blank_episodes=1)
    try:
        runner.envs[0].blank = 99
        with pytest.raises(EnvError, match=r"Env 1 \(_Blank\)"):
            runner.sample(8)
        assert runner.num_env_steps_sampled == 0
        # The runner reset every env after the error; copy 1 is in its second episode now.
        before = [env.steps for env in runner.envs]
        batches = runner.sample(8)
        assert [env.steps - b for env, b in zip(runner.envs, before)] == [8, 8]
        assert runner.num_env_steps_sampled == 16
        assert {pid: len(b) for pid, b in batches.items()} == {"p0": 16, "p1": 16}
        assert [m["length"] for m in runner.get_metrics()] == [4, 4, 4, 4]
    finally:
        algo.stop()


def test_a_reset_that_observes_no_live_agent_is_an_env_error():
    algo, runner = _runner(empty_reset=True)
    try:
        with pytest.raises(EnvError, match=r"Env 0 \(_Blank\): reset\(\) returned no observation"):
            runner.sample(4)
        assert runner.num_env_steps_sampled == 0
    finally:
        algo.stop()


def test_run_episodes_raises_rather_than_waiting_forever():
    # Unfixed, this waited forever: the env was skipped and its episode never ended.
    algo, runner = _runner()
    try:
        with pytest.raises(EnvError, match="no observation"):
            runner.run_episodes(1)
        assert runner.get_metrics() == []
    finally:
        algo.stop()


class _Skipping(TwoAgentParallel):
    """agent_1 observes only at even t (so it acts at even t and waits for its next observation
    at odd t); agent_0 at every t. Both paid 1 per step; episodes end at t = 6 (truncated)."""

    metadata = {"name": "skipping_v0", "render_modes": []}

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.t += 1
        end = self.t >= 6
        rewards = {a: 1.0 for a in self.agents}
        truncated = {a: end for a in self.agents}
        if end:
            self.agents = []
        obs = {a: self._obs(a) for a in self.agents if a == "agent_0" or self.t % 2 == 0}
        return obs, rewards, dict.fromkeys(truncated, False), truncated, {a: {} for a in obs}


def _make_skipping(config: dict[str, Any]) -> _Skipping:
    return _Skipping(config)


def test_removing_the_policy_of_an_agent_waiting_for_its_observation_starts_new_episodes():
    """An agent that acted and has no observation yet is in flight (its action waits for its
    outcome, and its episode keeps the policy it acted with). Unfixed, removing its policy left
    the episode going on, and its next observation went to the removed policy: a KeyError
    that discarded the next fragment."""
    algo = two_policy_ppo(_make_skipping).build()
    runner = EnvRunner(algo.config, algo.policies)
    try:
        runner.sample(1)  # agent_1 (p1) acted at t = 0 and got no observation at t = 1
        assert runner.get_state()["current_obs"][0]["agents"] == ["agent_0"]
        algo.remove_policy("p1", policy_mapping_fn=lambda agent_id, **kwargs: "p0")
        runner.update_policies(algo.config, algo.policies)
        assert runner.get_state()["needs_reset"]  # p1's episode does not go on without p1
        batches = runner.sample(6)
        # A new episode from the reset: both agents on p0, agent_1 acting at t = 0, 2, 4.
        assert sorted(batches) == ["p0"]
        b = batches["p0"]
        assert sorted(b["obs"][b["obs"][:, 1] == 1, 0].tolist()) == [0.0, 2.0, 4.0]
        assert runner.num_env_steps_sampled == 7
    finally:
        algo.stop()
