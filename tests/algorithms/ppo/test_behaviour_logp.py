"""Behaviour log-probabilities (the ``action_logp`` column): recorded by the env runners as each
row is acted, and PPO's ratio denominator.

The stored logp is compared with ``dist.logp`` recomputed in torch from the same weights within
float tolerance, not bit for bit: acting runs the numpy forward pass (:mod:`cairn.numpy_acting`)
and a numpy log-softmax, whose summation order differs from torch's.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
import cairn.algorithms.ppo.learn as ppo_learn_module
import cairn.algorithms.ppo.ppo as ppo_module
from cairn.algorithms.ppo.learn import ppo_learn
from cairn.env_runner.sample_batch import SampleBatch, stream_ids
from cairn.errors import CheckpointFormatError, ConfigError
from cairn.learners import GradientSync
from cairn.policy.action_masking import MASKED_SCORE
from cairn.policy.distributions import distribution_for
from tests.env_runner.test_turn_based import make_tictactoe, shared_policy

ATOL = 2e-5  # float32 rounding of two forward passes and two log-softmaxes

ACTION_SPACES = {
    "discrete": gym.spaces.Discrete(3),
    "masked": gym.spaces.Discrete(4),
    "box": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 2]),
}


class RandomObsEnv(gym.Env):  # type: ignore[misc]
    """Random observations (with a random, never empty action mask for ``kind="masked"``),
    episodes of 7 steps: enough to exercise every action space's behaviour logp."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.action_space = ACTION_SPACES[kind]
        box = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.observation_space = box if kind != "masked" else gym.spaces.Dict(
            {"observation": box, "action_mask": gym.spaces.MultiBinary(4)})
        self.t = 0

    def _obs(self) -> Any:
        x = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        if self.kind != "masked":
            return x
        mask = (self.np_random.random(4) < 0.5).astype(np.int8)
        mask[self.np_random.integers(4)] = 1
        return {"observation": x, "action_mask": mask}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self._obs(), float(np.sum(action)), False, self.t >= 7, {}


def make_random_obs_env(env_config: dict[str, Any]) -> RandomObsEnv:
    return RandomObsEnv(env_config["kind"])


def _recomputed_logp(policy: cairn.Policy, batch: SampleBatch) -> np.ndarray:
    """``dist.logp`` in torch, as PPO's learner computed it before the column existed."""
    obs, actions = torch.from_numpy(batch["obs"]), torch.from_numpy(batch["actions"])
    with torch.no_grad():
        if policy.recurrent is None:
            inputs = policy.model(obs)[0]
        else:  # each row one step from the state it acted from
            states = [torch.from_numpy(batch[f"state_in_{k}"]) for k in range(2)]
            inputs = policy.model(obs.unsqueeze(1), states)[0][:, 0]
        return policy.dist.logp(inputs, actions).numpy()  # type: ignore[no-any-return]


# ----------------------------------------------------------------- stored equals recomputed
@pytest.mark.parametrize("kind", ["discrete", "masked", "box", "multidiscrete", "lstm"])
def test_stored_logp_equals_recomputed_logp_with_unchanged_weights(kind: str) -> None:
    model = {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4} if kind == "lstm" else {}
    algo = (cairn.PPOConfig().environment(make_random_obs_env,
                                          env_config={"kind": "discrete" if kind == "lstm" else kind})
            .training(train_batch_size=64, minibatch_size=32, model=model)
            .env_runners(num_envs_per_env_runner=2).debugging(seed=0).build())
    try:
        policy = algo.get_policy()
        batch = algo.env_runner_group.local.sample(20)["default_policy"]
        assert batch["action_logp"].dtype == np.float32 and batch["action_logp"].shape == (len(batch),)
        np.testing.assert_allclose(batch["action_logp"], _recomputed_logp(policy, batch), rtol=0, atol=ATOL)
        if kind == "masked":  # drawn from the masked distribution: a legal action, finite logp
            legal = batch["obs"][np.arange(len(batch)), policy.preprocessor.size + batch["actions"]]
            assert (legal == 1).all() and np.isfinite(batch["action_logp"]).all()
    finally:
        algo.stop()


@pytest.mark.parametrize("space", list(ACTION_SPACES.values()), ids=list(ACTION_SPACES))
def test_numpy_logp_equals_torch_logp(space: gym.Space[Any]) -> None:
    dist = distribution_for(space)
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(50, dist.num_inputs)).astype(np.float32) * 3
    if isinstance(space, gym.spaces.Discrete):
        inputs[rng.random(inputs.shape) < 0.4] = MASKED_SCORE  # masked scores, as a masked model gives
        inputs[np.arange(50), rng.integers(space.n, size=50)] = rng.normal(size=50)
    actions = dist.sample_numpy(inputs, np.random.default_rng(1))
    expected = dist.logp(torch.from_numpy(inputs), torch.from_numpy(actions)).numpy()
    got = dist.logp_numpy(inputs, actions)
    assert got.dtype == np.float32 and got.shape == (50,)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-5)
    # Sampling with the logp draws the same actions from the same generator (bit for bit: the
    # same operations), and its logp is the same up to rounding.
    fused_actions, fused = dist.sample_numpy_and_logp(inputs, np.random.default_rng(1))
    np.testing.assert_array_equal(fused_actions, actions)
    assert fused.dtype == np.float32 and fused.shape == (50,)
    np.testing.assert_allclose(fused, expected, rtol=1e-6, atol=1e-5)


def test_parallel_multi_agent_rows_carry_their_logp() -> None:
    from tests.helpers import small_ma_ppo

    algo = small_ma_ppo(2).build()
    try:
        batches = algo.env_runner_group.local.sample(16)
        for pid, batch in batches.items():
            np.testing.assert_allclose(batch["action_logp"], _recomputed_logp(algo.get_policy(pid), batch),
                                       rtol=0, atol=ATOL)
    finally:
        algo.stop()


# ------------------------------------------------------------------ only who wants it pays
def test_off_policy_batches_have_no_logp_column() -> None:
    algo = (cairn.DQNConfig().environment("CartPole-v1").training(num_steps_sampled_before_learning_starts=0)
            .debugging(seed=0).build())
    try:
        assert "action_logp" not in algo.env_runner_group.local.sample(8)["default_policy"]
    finally:
        algo.stop()


def test_ppo_refuses_a_batch_without_behaviour_logps() -> None:
    algo = (cairn.PPOConfig().environment("CartPole-v1")
            .training(train_batch_size=64, minibatch_size=32).build())
    try:
        batch = algo.env_runner_group.local.sample(8)["default_policy"]
        del batch["action_logp"]
        with pytest.raises(ConfigError, match="action_logp"):
            ppo_learn(algo.config, algo.get_policy(), GradientSync(), batch=batch, rewards=batch["rewards"],
                      permutations=[np.arange(len(batch))])
    finally:
        algo.stop()


def test_a_policy_that_draws_its_own_actions_must_say_their_logp() -> None:
    with pytest.raises(ConfigError, match="compute_raw_actions_and_logp"):
        class OwnActions(cairn.Policy):
            def compute_raw_actions(self, processed_obs: np.ndarray, *, explore: bool) -> np.ndarray:
                return np.zeros(len(processed_obs), np.int64)

    class OwnOffPolicyActions(cairn.Policy):  # its learner never reads action_logp: allowed
        wants_action_logp = False

        def compute_raw_actions(self, processed_obs: np.ndarray, *, explore: bool) -> np.ndarray:
            return np.zeros(len(processed_obs), np.int64)


# ------------------------------------------------------------- turn-based carried-over moves
def _tictactoe(**training: Any) -> cairn.PPOConfig:
    return (cairn.PPOConfig().environment(make_tictactoe)
            .training(train_batch_size=96, minibatch_size=48, num_epochs=2, lr=0.01, **training)
            .env_runners(num_envs_per_env_runner=3)
            .multi_agent(policies={"shared"}, policy_mapping_fn=shared_policy).debugging(seed=0))


def _carried_rows(batch: SampleBatch, pending_state: list[dict[str, Any]]) -> tuple[np.ndarray, list[Any]]:
    """The rows of ``batch`` that complete the moves pending in ``pending_state`` (a turn-based
    runner's ``current_obs``): each one the first row of its (env, agent) stream; and their
    pending (obs, action)."""
    rows, moves = [], []
    for i, env_state in enumerate(pending_state):
        for k, agent in enumerate(env_state["pending_agents"]):
            row = int(np.flatnonzero(batch["streams"] == stream_ids(0, [(i, agent)])[0])[0])
            np.testing.assert_array_equal(batch["obs"][row], env_state["pending_obs"][k])
            np.testing.assert_array_equal(batch["actions"][row], env_state["pending_actions"][k])
            rows.append(row)
            moves.append((env_state["pending_obs"][k], env_state["pending_actions"][k]))
    assert rows, "the fragment ended with no move in flight: nothing is carried over"
    return np.array(rows), moves


def test_carried_over_moves_keep_the_logp_of_the_weights_that_acted_them(monkeypatch) -> None:
    """A move still waiting for its agent's next turn when iteration 1's fragment ends is acted by
    the weights before iteration 1's update and learned from in iteration 2: its ratio's
    denominator must be its logp under those older weights (on main it was recomputed under the
    newer ones, so its first-minibatch ratio was 1)."""
    algo = _tictactoe().build()
    try:
        policy = algo.get_policy("shared")
        acting = cairn.Policy.from_state(policy.get_state())  # the weights that act iteration 1
        algo.train()
        learning = cairn.Policy.from_state(policy.get_state())  # the weights that learn in iteration 2
        pending = algo.env_runner_group.local.get_state()["current_obs"]
        seen: dict[str, Any] = {}

        def spy_learn(*args: Any, **kwargs: Any) -> Any:
            seen.setdefault("batch", kwargs["batch"])
            seen.setdefault("permutation", kwargs["permutations"][0])
            return ppo_learn(*args, **kwargs)

        def spy_loss(logp: torch.Tensor, old_logp: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            seen.setdefault("logp", logp.detach().clone())  # the first minibatch, before any step
            seen.setdefault("old_logp", old_logp.clone())
            return real_loss(logp, old_logp, *args, **kwargs)

        real_loss = ppo_learn_module.ppo_loss
        monkeypatch.setattr(ppo_module, "ppo_learn", spy_learn)
        monkeypatch.setattr(ppo_learn_module, "ppo_loss", spy_loss)
        algo.train()
        batch = seen["batch"]
        carried, _ = _carried_rows(batch, pending)
        # Independent: each row's logp under the weights that acted it, in torch.
        expected = _recomputed_logp(learning, batch)
        expected[carried] = _recomputed_logp(acting, batch)[carried]
        first = seen["permutation"][: len(seen["old_logp"])]
        np.testing.assert_allclose(seen["old_logp"].numpy(), expected[first], rtol=0, atol=ATOL)
        # The weights changed visibly for the carried moves, so their first ratio is not 1 ...
        stale = np.abs(_recomputed_logp(acting, batch) - _recomputed_logp(learning, batch))[carried]
        assert stale.max() > 1e-3
        ratio = torch.exp(seen["logp"] - seen["old_logp"]).numpy()
        in_first = np.isin(first, carried)
        assert in_first.any() and np.abs(ratio[in_first] - 1).max() > 1e-3
        # ... while every row acted by the learning weights starts at ratio 1.
        np.testing.assert_allclose(ratio[~in_first], 1.0, rtol=0, atol=1e-4)
    finally:
        algo.stop()


def test_carried_moves_logps_are_saved_and_an_old_state_without_them_still_loads(tmp_path) -> None:
    algo = _tictactoe().build()
    try:
        algo.train()
        runner = algo.env_runner_group.local
        state = runner.get_state()
        saved = [s for s in state["current_obs"] if s["pending_agents"]]
        assert saved and all(np.isfinite(s["pending_action_logp"]).all() for s in saved)
        policy = algo.get_policy("shared")
        pending_before = runner.get_state()["current_obs"]
        # A state written before pending_action_logp existed: the logps come from the restored
        # weights (those that learn from the moves next: on-policy, as such a checkpoint meant).
        old = {**state, "current_obs": [{k: v for k, v in s.items() if k != "pending_action_logp"}
                                        for s in state["current_obs"]]}
        runner.set_state(old)
        for env_state in runner.get_state()["current_obs"]:
            if env_state["pending_agents"]:
                rows = SampleBatch(obs=env_state["pending_obs"], actions=env_state["pending_actions"])
                np.testing.assert_allclose(env_state["pending_action_logp"], _recomputed_logp(policy, rows),
                                           rtol=0, atol=ATOL)
        # A NaN where a learning policy's logp belongs is refused, and nothing changes.
        bad = {**state, "current_obs": [dict(s) for s in state["current_obs"]]}
        target = next(s for s in bad["current_obs"] if s["pending_agents"])
        target["pending_action_logp"] = np.full(len(target["pending_agents"]), np.nan, np.float32)
        runner.set_state(state)
        with pytest.raises(CheckpointFormatError, match="pending_action_logp"):
            runner.set_state(bad)
        after = runner.get_state()["current_obs"]
        for a, b in zip(after, pending_before):
            if a["pending_agents"]:
                np.testing.assert_array_equal(a["pending_action_logp"], b["pending_action_logp"])
    finally:
        algo.stop()
