"""A parallel (PettingZoo ParallelEnv) agent that acted and has not observed again when a fragment
ends: its row waits across the fragment's end (as a turn-based game's pending move does) and
the next fragment sends it with its true next observation and every reward and flag paid until
then. Before, it was sent at once with its own observation standing in for the next and the
reward of one step, and what was paid after the fragment's end reached no row."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo import ParallelEnv

import cairn
from cairn.errors import CheckpointFormatError, EnvError
from tests.helpers import assert_trains_identically, assert_trees_equal

COLUMNS = ("obs", "actions", "rewards", "terminateds", "truncateds", "firsts", "next_obs")


class Skipper(ParallelEnv):  # type: ignore[misc]
    """a0 observes at every step; a1 only at even t, so it acts at t = 0, 2, 4 and waits one step
    for its next observation. At t = 6 a1 is terminated with reward 10 (it acted at t = 4 and did
    not observe at t = 5); the episode ends at t = 7. Each agent alive is paid 1 per step
    otherwise. Observation ``[t, agent index]``. ``fail_at``: the env's ``fail_at``-th step over
    all episodes raises. Its state (``get_state``) lets a checkpoint resume it exactly."""

    metadata = {"name": "skipper_v0", "render_modes": []}
    possible_agents = ["a0", "a1"]

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.agents: list[str] = []
        self.t = 0
        self.steps = 0
        self.fail_at = int((config or {}).get("fail_at", 0))

    def observation_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Box(-100.0, 100.0, (2,), np.float32)

    def action_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Discrete(2)

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.t, self.possible_agents.index(agent)], np.float32)

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.steps += 1
        if self.steps == self.fail_at:
            raise RuntimeError("the env broke")
        self.t += 1
        rewards = {a: 1.0 for a in self.agents}
        terminated = {a: False for a in self.agents}
        if self.t == 6 and "a1" in self.agents:
            rewards["a1"], terminated["a1"] = 10.0, True
        if self.t >= 7:
            terminated = {a: True for a in self.agents}
        self.agents = [a for a in self.agents if not terminated[a]]
        obs = {a: self._obs(a) for a in self.agents if a == "a0" or self.t % 2 == 0}
        return obs, rewards, terminated, {a: False for a in terminated}, {a: {} for a in obs}

    def get_state(self) -> dict[str, Any]:
        return {"t": self.t, "agents": list(self.agents), "steps": self.steps}

    def set_state(self, state: dict[str, Any]) -> None:
        self.t, self.agents, self.steps = int(state["t"]), list(state["agents"]), int(state["steps"])


def make_skipper(config: dict[str, Any]) -> Skipper:
    return Skipper(config)


def map_to_p(agent_id: str, **kwargs: Any) -> str:
    return "p"


def _config(model: dict[str, Any] | None = None, **env_config: Any) -> cairn.AlgorithmConfig:
    return (cairn.PPOConfig().environment(make_skipper, env_config=env_config)
            .training(train_batch_size=28, minibatch_size=14, num_epochs=1,
                      model=model or {"hidden": [8]})
            .env_runners(rollout_fragment_length=7)
            .multi_agent(policies={"p"}, policy_mapping_fn=map_to_p)
            .debugging(seed=0))


def _a1_rows(batches: dict[str, Any]) -> dict[str, np.ndarray]:
    batch = batches.get("p")
    if batch is None:
        return {c: np.zeros(0) for c in COLUMNS}
    a1 = batch["obs"][:, 1] == 1
    return {c: np.asarray(batch[c])[a1] for c in COLUMNS}


def _fragments(lengths: list[int], **env_config: Any) -> list[dict[str, np.ndarray]]:
    algo = _config(**env_config).build()
    try:
        runner = algo.env_runner_group.local
        return [_a1_rows(runner.sample(n)) for n in lengths]
    finally:
        algo.stop()


def _joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {c: np.concatenate([p[c] for p in parts]) for c in COLUMNS}


def test_a_row_waiting_at_a_fragments_end_gets_its_true_next_observation():
    first, second, third = _fragments([1, 1, 1])
    # a1 acted at t = 0 and did not observe at t = 1: nothing of it is sent yet.
    assert len(first["obs"]) == 0
    # It observes at t = 2: its row, with the rewards of both steps.
    assert second["obs"][:, 0].tolist() == [0]
    assert second["next_obs"][:, 0].tolist() == [2]
    assert second["rewards"].tolist() == [2]
    assert second["firsts"].tolist() == [True]
    assert not second["terminateds"].any() and not second["truncateds"].any()
    assert len(third["obs"]) == 0  # acted at t = 2, waits again


@pytest.mark.parametrize("lengths", [[5, 2], [1, 1, 1, 1, 1, 1, 1], [2, 3, 2], [6, 1]])
def test_fragments_send_the_rows_one_fragment_sends(lengths):
    """The slow path: the whole episode in one fragment. Cut anywhere, the rows are the same (in
    [5, 2] a1 acts at t = 4, waits, and is terminated with its +10 in the next fragment)."""
    whole = _fragments([7])[0]
    assert whole["obs"][:, 0].tolist() == [0, 2, 4]
    assert whole["next_obs"][:, 0].tolist() == [2, 4, 4]
    assert whole["rewards"].tolist() == [2, 2, 11]
    assert whole["terminateds"].tolist() == [False, False, True]
    cut = _joined(_fragments(lengths))
    for column in COLUMNS:
        np.testing.assert_array_equal(cut[column], whole[column], err_msg=column)


@pytest.mark.parametrize("lengths", [[5, 2], [1, 1, 1, 1, 1, 1, 1]])
def test_n_step_transitions_are_those_of_one_fragment(lengths):
    """DQN's and SAC's n-step windows join a stream's rows across fragments (same ``streams`` id,
    not a first step, the observation where they stopped): cut anywhere, a1's 3-step transitions
    are those of the whole episode in one fragment (its +10 and termination included)."""
    from cairn.algorithms.replay_buffers import NStepTransitions

    def transitions(fragment_lengths: list[int]) -> dict[str, np.ndarray]:
        algo = _config().build()
        try:
            runner, n_step = algo.env_runner_group.local, NStepTransitions(gamma=0.5, n_step=3)
            parts = [n_step.add(runner.sample(n)["p"]) for n in fragment_lengths]
        finally:
            algo.stop()
        joined = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        a1 = np.flatnonzero(joined["obs"][:, 1] == 1)
        a1 = a1[np.argsort(joined["obs"][a1, 0], kind="stable")]
        return {k: v[a1] for k, v in joined.items()}

    whole, cut = transitions([7]), transitions(lengths)
    assert whole["obs"][:, 0].tolist() == [0, 2, 4]
    assert whole["rewards"].tolist() == [2 + 0.5 * 2 + 0.25 * 11, 2 + 0.5 * 11, 11]
    assert whole["terminateds"].tolist() == [True, True, True]
    for key in whole:
        np.testing.assert_array_equal(cut[key], whole[key], err_msg=key)


def test_an_env_error_in_the_next_fragment_drops_the_waiting_row():
    # The 6th env step raises: a1's row of t = 4 waits from fragment one into fragment two.
    algo = _config(fail_at=6).build()
    try:
        runner = algo.env_runner_group.local
        assert _a1_rows(runner.sample(5))["obs"][:, 0].tolist() == [0, 2]
        assert [list(rows) for rows in runner._agents.pending] == [["a1"]]
        with pytest.raises(RuntimeError, match="the env broke"):
            runner.sample(2)
        # Dropped with the failed fragment; every env starts a new episode.
        assert runner._agents.pending == [{}]
        assert runner.num_env_steps_sampled == 5
        rows = _a1_rows(runner.sample(7))
        assert runner.num_env_steps_sampled == 12
        # The new episode's rows only: no stale row of the episode cut short.
        assert rows["obs"][:, 0].tolist() == [0, 2, 4]
        assert rows["rewards"].tolist() == [2, 2, 11]
        assert rows["firsts"].tolist() == [True, False, False]
    finally:
        algo.stop()


def test_an_env_that_observes_no_agent_in_the_next_fragment_leaves_nothing_pending():
    """EnvError (a step observing no live agent) after a fragment that left a row waiting."""

    class _Blank(Skipper):
        def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
            obs, *rest = super().step(actions)
            return ({} if self.steps == 6 else obs, *rest)

    algo = (_config().environment(lambda _config: _Blank()).build())
    try:
        runner = algo.env_runner_group.local
        runner.sample(5)
        assert [list(rows) for rows in runner._agents.pending] == [["a1"]]
        with pytest.raises(EnvError, match="no observation"):
            runner.sample(2)
        assert runner._agents.pending == [{}]
        rows = _a1_rows(runner.sample(7))
        assert rows["obs"][:, 0].tolist() == [0, 2, 4] and rows["firsts"][0]
    finally:
        algo.stop()


def test_run_episodes_after_a_sample_with_a_waiting_row():
    algo = _config().build()
    try:
        runner = algo.env_runner_group.local
        runner.sample(5)
        assert runner._agents.pending != [{}]
        [episode] = runner.run_episodes(1)
        assert episode["length"] == 7 and episode["return"] == 7 + 15
        assert runner._agents.pending == [{}]
        rows = _a1_rows(runner.sample(7))  # a fresh episode after run_episodes
        assert rows["obs"][:, 0].tolist() == [0, 2, 4] and rows["rewards"].tolist() == [2, 2, 11]
    finally:
        algo.stop()


@pytest.mark.parametrize("model", [{"hidden": [8]},
                                   {"hidden": [8], "use_lstm": True, "lstm_cell_size": 4, "max_seq_len": 3}],
                         ids=["mlp", "lstm"])
def test_resume_with_a_waiting_row_is_exact(tmp_path, model):
    algo = _config(model).build()
    try:
        algo.env_runner_group.local.sample(5)  # a1's row of t = 4 waits
        state = algo.env_runner_group.local.get_state()
        [entry] = state["current_obs"][0]["pending"]
        assert entry["agent"] == "a1" and entry["obs"].tolist() == [4, 1]
        assert (entry["state_in"] is not None) == ("use_lstm" in model)
        assert np.isfinite(entry["action_logp"])
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
        try:
            assert_trees_equal(restored.env_runner_group.local.get_state(), state)
            a = algo.env_runner_group.local.sample(9)
            b = restored.env_runner_group.local.sample(9)
            assert set(a) == set(b) == {"p"}
            assert_trees_equal(dict(a["p"]), dict(b["p"]))
            # The carried row is in it, completed: a1's t = 4 row, terminated with its +10.
            rows = _a1_rows(b)
            assert rows["obs"][0, 0] == 4 and rows["rewards"][0] == 11 and rows["terminateds"][0]
            assert_trains_identically(algo, restored, iterations=2)
        finally:
            restored.stop()
    finally:
        algo.stop()


def test_without_the_saved_rows_the_resumed_run_would_differ():
    """The test above can fail: a state whose waiting rows are dropped sends other rows."""
    algo = _config().build()
    try:
        algo.env_runner_group.local.sample(5)
        state = algo.get_state()
        state["env_runners"][0]["current_obs"][0]["pending"] = []
        other = cairn.Algorithm.from_state(state)
        try:
            a = _a1_rows(algo.env_runner_group.local.sample(2))
            b = _a1_rows(other.env_runner_group.local.sample(2))
        finally:
            other.stop()
        assert a["rewards"].tolist() == [11] and len(b["rewards"]) == 0
    finally:
        algo.stop()


TAMPERED = {
    "an agent the env lacks": ("agent", "a7"),
    "an agent with an observation to act on": ("agent", "a0"),
    "an observation of another shape": ("obs", np.zeros(3, np.float32)),
    "an observation with NaN": ("obs", np.array([np.nan, 1.0], np.float32)),
    "an action of another shape": ("action", np.zeros(2, np.int64)),
    "a fractional action": ("action", np.array(1.5)),
    "a reward that is not finite": ("reward", float("inf")),
    "a flag that is not a bool": ("terminated", 1),
    "no log-probability for a policy that wants one": ("action_logp", None),
    "a NaN log-probability": ("action_logp", float("nan")),
    "a recurrent state for a feed-forward policy": ("state_in", [np.zeros(4, np.float32)]),
    "a missing key": ("first", KeyError),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_tampered_waiting_rows_are_refused_and_nothing_changes(case):
    key, value = TAMPERED[case]
    algo = _config().build()
    try:
        runner = algo.env_runner_group.local
        runner.sample(5)
        state = runner.get_state()
        bad = copy.deepcopy(state)
        entry = bad["current_obs"][0]["pending"][0]
        if value is KeyError:
            del entry[key]
        else:
            entry[key] = value
        other = cairn.Algorithm.from_state(algo.get_state())
        try:
            target = other.env_runner_group.local
            target.sample(3)
            before = [dict(rows) for rows in target._agents.pending]
            assert [list(rows) for rows in before] == [["a1"]]  # its own row of t = 2 waits
            with pytest.raises(CheckpointFormatError, match=r"current_obs\[0\]\['pending'\]\[0\]"):
                target.set_state(bad)
            after = target._agents.pending
            assert [list(rows) for rows in after] == [list(rows) for rows in before]
            assert all(after[0][a] is row for a, row in before[0].items())  # the same rows, untouched
            target.set_state(state)  # the unedited state restores
            assert list(target._agents.pending[0]) == ["a1"]
        finally:
            other.stop()
    finally:
        algo.stop()


def test_a_state_without_the_waiting_rows_key_is_refused():
    """Format 4 states have ``pending`` (older ones get it from the migration): its absence is
    an edited state, refused with a clear error, not a bare KeyError."""
    algo = _config().build()
    try:
        runner = algo.env_runner_group.local
        runner.sample(5)
        state = runner.get_state()
        del state["current_obs"][0]["pending"]
        with pytest.raises(CheckpointFormatError, match=r"current_obs\[0\]\['pending'\] is NoneType"):
            runner.set_state(state)
    finally:
        algo.stop()


def test_two_rows_for_one_agent_are_refused():
    algo = _config().build()
    try:
        runner = algo.env_runner_group.local
        runner.sample(5)
        state = runner.get_state()
        entries = state["current_obs"][0]["pending"]
        entries.append(copy.deepcopy(entries[0]))
        with pytest.raises(CheckpointFormatError, match=r"\['pending'\]\[1\]\['agent'\]"):
            runner.set_state(state)
    finally:
        algo.stop()


class GridSkipper(Skipper):
    """Skipper whose observations are not flat vectors: each becomes a processed row of another
    shape than the observation's (``[t, index]`` as a ``(1, 2)`` Box, or inside a Dict with an
    action mask, whose row is ``[t, index | mask]``)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(config)
        self.masked = bool((config or {}).get("masked"))

    def observation_space(self, agent: str) -> gym.Space[Any]:
        if self.masked:
            return gym.spaces.Dict({"observation": gym.spaces.Box(-100.0, 100.0, (2,), np.float32),
                                    "action_mask": gym.spaces.MultiBinary(2)})
        return gym.spaces.Box(-100.0, 100.0, (1, 2), np.float32)

    def _obs(self, agent: str) -> Any:
        flat = super()._obs(agent)
        if self.masked:
            return {"observation": flat, "action_mask": np.ones(2, np.int8)}
        return flat.reshape(1, 2)


def make_grid_skipper(config: dict[str, Any]) -> GridSkipper:
    return GridSkipper(config)


@pytest.mark.parametrize("masked", [False, True], ids=["box-1x2", "dict-with-action-mask"])
def test_a_waiting_row_of_a_non_flat_observation_resumes_exactly(tmp_path, masked):
    """A waiting row holds the processed row (flattened, with a masked policy's mask), not an
    observation of the space's shape: its checkpoint restores, and the run goes on as before."""
    algo = _config().environment(make_grid_skipper, env_config={"masked": masked}).build()
    try:
        algo.env_runner_group.local.sample(5)  # a1's row of t = 4 waits
        state = algo.env_runner_group.local.get_state()
        [entry] = state["current_obs"][0]["pending"]
        assert entry["obs"].tolist() == ([4, 1, 1, 1] if masked else [4, 1])
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
        try:
            assert_trees_equal(restored.env_runner_group.local.get_state(), state)
            a = algo.env_runner_group.local.sample(9)
            b = restored.env_runner_group.local.sample(9)
            assert_trees_equal(dict(a["p"]), dict(b["p"]))
        finally:
            restored.stop()
    finally:
        algo.stop()
