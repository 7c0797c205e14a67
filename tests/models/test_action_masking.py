"""Action masking: a Dict observation with "action_mask" for Discrete/MultiDiscrete actions.

The maths (masked logits give illegal actions probability 0; log-probabilities and entropies
run over legal actions; no gradient reaches illegal logits; DQN's targets maximise over legal
actions), the policy's acting paths (sampling, greedy, epsilon-random), the errors (an all-zero
mask, a mask that does not fit the actions) and training end to end (no illegal action in
training or evaluation, exact resume)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from pettingzoo.utils import BaseWrapper
from torch.nn import functional as F

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.algorithms.dqn.learn import dqn_targets
from cairn.errors import ActionMaskError, CairnError, ConfigError
from cairn.policy.action_masking import (
    LOWEST_PLAIN_LEGAL_SCORE,
    MASKED_SCORE,
    _mask_scores_numpy,
    mask_scores,
    random_legal_actions,
)
from tests.helpers import learning_seed
from tests.models.masked_env import make_pick_legal
from tests.models.nets import FarBelowMaskedScore, MaskAware, TwoHeads

N = 6
SPACE = gym.spaces.Dict({"observation": gym.spaces.Box(0.0, 1.0, (N,), np.float32),
                         "action_mask": gym.spaces.Box(0, 1, (N,), np.int8)})


def _observations(count: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        mask = np.zeros(N, dtype=np.int8)
        mask[rng.choice(N, size=int(rng.integers(1, N)), replace=False)] = 1
        out.append({"observation": rng.uniform(0, 1, N).astype(np.float32), "action_mask": mask})
    return out


def _legal(observations: list[dict[str, np.ndarray]], actions: np.ndarray) -> bool:
    return all(o["action_mask"][int(a)] == 1 for o, a in zip(observations, actions))


@pytest.mark.parametrize("policy_class", [cairn.Policy, DQNPolicy])
def test_every_acting_path_gives_legal_actions(policy_class: type[cairn.Policy]) -> None:
    policy = policy_class(SPACE, gym.spaces.Discrete(N), seed=0)
    observations = _observations(400)
    for explore in (True, False):
        assert _legal(observations, policy.compute_actions(observations, explore=explore))
    assert all(policy.compute_single_action(o)in np.flatnonzero(o["action_mask"]) for o in observations[:20])


@pytest.mark.parametrize("policy_class", [cairn.Policy, DQNPolicy])
def test_an_empty_batch_gives_no_actions_as_without_a_mask(policy_class: type[cairn.Policy]) -> None:
    policy = policy_class(SPACE, gym.spaces.Discrete(N), seed=0)
    plain = policy_class(SPACE["observation"], gym.spaces.Discrete(N), seed=0)
    for explore in (True, False):
        actions = policy.compute_actions([], explore=explore)
        assert actions.shape == (0,) and actions.dtype == plain.compute_actions(
            np.zeros((0, N), np.float32), explore=explore).dtype


def test_the_network_reads_the_observation_without_the_mask() -> None:
    policy = cairn.Policy(SPACE, gym.spaces.Discrete(N), seed=0)
    assert policy.network_observation_space == SPACE["observation"]
    assert policy.preprocessor.size == N and policy.action_mask_size == N
    assert policy.model.net.actor[0].in_features == N  # the built-in MLP's input: no mask columns
    custom = cairn.Policy(SPACE, gym.spaces.Discrete(N), {"model": {"custom_model": TwoHeads}}, seed=0)
    assert custom.model.net.observation_space == SPACE["observation"]
    both = gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,)), "b": gym.spaces.Discrete(3),
                            "action_mask": gym.spaces.MultiBinary(N)})
    policy = cairn.Policy(both, gym.spaces.Discrete(N), seed=0)
    assert policy.network_observation_space == gym.spaces.Dict({"a": both["a"], "b": both["b"]})
    assert policy.preprocessor.size == 5


def test_an_observation_part_that_is_a_dict_is_read_as_the_policy_reads_it_unmasked() -> None:
    """``{"observation": Dict(...), "action_mask": ...}``: the network reads the inner Dict, and
    each observation's ``"observation"`` entry is what it flattens (not its outer keys)."""
    from cairn.export import model_feeds

    inner = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "mode": gym.spaces.Discrete(3)})
    space = gym.spaces.Dict({"observation": inner, "action_mask": gym.spaces.MultiBinary(N)})
    masked = cairn.Policy(space, gym.spaces.Discrete(N), seed=0)
    plain = cairn.Policy(inner, gym.spaces.Discrete(N), seed=0)
    assert masked.network_observation_space == inner
    parts = [{"pos": np.array([0.5, -0.25], np.float32), "mode": m} for m in (2, 0)]
    masks = [np.eye(N, dtype=np.int8)[m] for m in (4, 1)]
    observations = [{"observation": o, "action_mask": m} for o, m in zip(parts, masks)]
    rows = masked.process_observations(observations, update=False)
    np.testing.assert_array_equal(rows[:, :masked.preprocessor.size],
                                  plain.process_observations(parts, update=False))
    np.testing.assert_array_equal(rows[:, masked.preprocessor.size:], np.stack(masks))
    assert masked.compute_actions(observations, explore=False).tolist() == [4, 1]  # the legal ones
    feeds = model_feeds(space, gym.spaces.Discrete(N), observations)
    np.testing.assert_array_equal(feeds["obs"], plain.process_observations(parts, update=False))


def test_masked_logits_give_the_distribution_of_the_legal_actions() -> None:
    policy = cairn.Policy(SPACE, gym.spaces.Discrete(N), seed=0)
    observations = _observations(32)
    rows = torch.from_numpy(policy.process_observations(observations, update=False))
    logits, _ = policy.model(rows)
    raw_logits = policy.model.net.action_inputs(rows[:, :N])
    mask = rows[:, N:] > 0.5
    assert torch.equal(logits[~mask], torch.full_like(logits[~mask], MASKED_SCORE))
    assert torch.equal(logits[mask], raw_logits[mask])
    for i in range(32):
        legal = torch.nonzero(mask[i]).squeeze(-1)
        expected = F.log_softmax(raw_logits[i, legal], dim=-1)
        actions = legal.unsqueeze(0).expand(1, -1)[0]
        logp = policy.dist.logp(logits[i : i + 1].expand(len(legal), -1), actions)
        torch.testing.assert_close(logp, expected)
        entropy = policy.dist.entropy(logits[i : i + 1])
        torch.testing.assert_close(entropy, -(expected.exp() * expected).sum().unsqueeze(0))
    assert torch.isfinite(policy.dist.entropy(logits)).all()


def test_legal_logits_far_below_the_masked_score_keep_the_distribution_of_the_legal_actions() -> None:
    """Legal logits of -5e9 (all equal: uniform over the legal actions) lie below the masked
    score -1e9. Given -1e9, the illegal actions took all the probability: sampling drew them and
    fell back to the greedy legal action every time, the recorded and the learner's log-probability
    was -4e9 (not -log k) and the entropy that of the illegal actions (main: log(6 - k), not log k)."""
    policy = cairn.Policy(SPACE, gym.spaces.Discrete(N), {"model": {"custom_model": FarBelowMaskedScore}},
                          seed=0)
    observations = _observations(400)
    rows = policy.process_observations(observations, update=False)
    legal = rows[:, N:] > 0.5
    expected_logp = -np.log(legal.sum(axis=1)).astype(np.float32)
    actions, logp = policy.compute_raw_actions_and_logp(rows, explore=True)
    assert _legal(observations, actions)
    np.testing.assert_allclose(logp, expected_logp, rtol=1e-6)
    # Drawn among the legal actions, not the greedy one (the first legal action) each time.
    first_legal = legal.argmax(axis=1)
    several = legal.sum(axis=1) > 1
    assert 0.2 < np.mean(actions[several] != first_legal[several]) < 0.9
    with torch.no_grad():
        logits, _ = policy.model(torch.from_numpy(rows))
        learner_logp = policy.dist.logp(logits, torch.from_numpy(actions)).numpy()
        entropy = policy.dist.entropy(logits).numpy()
    np.testing.assert_allclose(learner_logp, expected_logp, rtol=1e-6)
    np.testing.assert_allclose(entropy, -expected_logp, rtol=1e-6)
    assert (logits.numpy()[~legal] < -5e9).all()  # below every legal logit
    greedy = policy.compute_actions(observations, explore=False)
    np.testing.assert_array_equal(greedy, first_legal)  # ties: the first legal action, as before


def test_numpy_masking_equals_torch_masking() -> None:
    """The numpy acting path masks with one check over the whole batch first (the usual path);
    it must give what :func:`mask_scores` gives row by row, bit for bit: on rows built to fool
    the check (a legal score exactly at the limit or one float above it, an illegal score far
    below it beside ordinary legal ones, NaN, -inf, no legal action), alone and in one batch."""
    limit = np.float32(LOWEST_PLAIN_LEGAL_SCORE)
    above = np.nextafter(limit, np.float32(0.0))
    scores = np.array([[0.5, -2.0, 3.0],
                       [limit, 0.0, 1.0],
                       [above, 0.0, 1.0],
                       [-1e12, 0.0, 1.0],  # the illegal entry is far below, the legal ones are not
                       [-5e9, -5e9, 7.0],
                       [np.nan, 0.0, 1.0],
                       [0.0, np.nan, 1.0],
                       [-np.inf, 0.0, 1.0],
                       [-5e9, 2.0, 1.0],
                       [3e38, -3e38, 0.0],
                       [-5e9, 1.0, 2.0],  # mask entries of NaN and exactly 0.5 are illegal
                       [1.0, -5e9, 2.0]], np.float32)
    masks = np.array([[1, 0, 1], [1, 1, 0], [1, 1, 0], [0, 1, 1], [1, 1, 0], [1, 0, 1], [1, 0, 1],
                      [1, 1, 0], [0, 0, 0], [1, 1, 0], [np.nan, 1, 1], [1, 0.5, 1]], np.float32)
    expected = mask_scores(torch.from_numpy(scores), torch.from_numpy(masks)).numpy()
    assert expected[0, 1] == expected[3, 0] == np.float32(MASKED_SCORE)  # ordinary legal scores
    assert expected[2, 2] == np.float32(MASKED_SCORE) and expected[1, 2] == -np.inf
    assert expected[4, 2] == -np.inf and expected[8].tolist() == [MASKED_SCORE] * 3
    assert expected[10, 0] == expected[11, 1] == np.float32(MASKED_SCORE)
    np.testing.assert_array_equal(_mask_scores_numpy(scores, masks), expected)
    for i in range(len(scores)):
        one = _mask_scores_numpy(scores[i : i + 1], masks[i : i + 1])
        np.testing.assert_array_equal(one, expected[i : i + 1])
    assert _mask_scores_numpy(scores[:0], masks[:0]).shape == (0, 3)
    for dtype in (np.float64, np.float32):  # a user's numpy method may answer in float64
        assert _mask_scores_numpy(scores.astype(dtype), masks).dtype == np.float32


def test_illegal_logits_receive_no_gradient() -> None:
    policy = cairn.Policy(SPACE, gym.spaces.Discrete(N), {"model": {"custom_model": TwoHeads}}, seed=0)
    observations = _observations(16)
    rows = torch.from_numpy(policy.process_observations(observations, update=False))
    actions = torch.from_numpy(policy.compute_actions(observations))
    logits, _ = policy.model(rows)
    (-policy.dist.logp(logits, actions).mean() - policy.dist.entropy(logits).mean()).backward()
    grad = policy.model.net.pi.weight.grad
    assert grad is not None and torch.isfinite(grad).all()
    # Rows where only action k is legal leave the head's row k as the only one with gradient.
    policy.model.zero_grad()
    only = [{**o, "action_mask": np.eye(N, dtype=np.int8)[2]} for o in observations]
    rows = torch.from_numpy(policy.process_observations(only, update=False))
    logits, _ = policy.model(rows)
    policy.dist.entropy(logits).sum().backward()
    assert torch.count_nonzero(policy.model.net.pi.weight.grad) == 0  # one legal action: constant entropy


def test_dqn_greedy_actions_and_targets_maximise_over_legal_actions() -> None:
    policy = DQNPolicy(SPACE, gym.spaces.Discrete(N), seed=0)
    observations = _observations(64)
    rows = policy.process_observations(observations, update=False)
    raw_q = policy.target_model.net.numpy_q_values(np.ascontiguousarray(rows[:, :N]))
    masked = policy.target_model.numpy_q_values(rows)
    legal = rows[:, N:] > 0.5
    assert np.array_equal(masked[legal], raw_q[legal]) and (masked[~legal] == MASKED_SCORE).all()
    assert np.array_equal(masked.max(axis=1), np.where(legal, raw_q, -np.inf).max(axis=1))
    assert _legal(observations, policy.compute_actions(observations, explore=False))


@pytest.mark.parametrize("double_q", [True, False])
def test_dqn_targets_read_the_next_masks(double_q: bool) -> None:
    """A truncated transition into a state with no legal action bootstraps nothing (was
    ``r + gamma * -1e9``); otherwise the target's maximum (or double-Q's argmax) is the legal
    actions' one, as computed from the unmasked networks."""
    policy = DQNPolicy(SPACE, gym.spaces.Discrete(N), seed=0)
    with torch.no_grad():  # the target network prefers action 0, the online network action 1
        policy.model.net.advantage_head.bias[0] += 100.0
        policy.update_target()
        policy.model.net.advantage_head.bias[1] += 200.0
    observations = _observations(16, seed=1)
    observations[3]["action_mask"][:] = 0
    rows = policy.process_observations(observations, update=False)
    rewards = np.linspace(0.0, 1.0, 16, dtype=np.float32)
    sample = {"next_obs": rows, "rewards": rewards, "n_steps": np.full(16, 2),
              "terminateds": np.zeros(16, bool)}
    config = cairn.DQNConfig().training(double_q=double_q)
    targets = dqn_targets(config, policy, sample)
    legal = rows[:, N:] > 0.5
    net, target_net = policy.model.net, policy.target_model.net
    online_q = np.where(legal, net.numpy_q_values(np.ascontiguousarray(rows[:, :N])), -np.inf)
    target_q = np.where(legal, target_net.numpy_q_values(np.ascontiguousarray(rows[:, :N])), -np.inf)
    best = (online_q if double_q else target_q).argmax(axis=1)
    expected = rewards + config.gamma**2 * target_q[np.arange(16), best]
    expected[3] = rewards[3]
    np.testing.assert_allclose(targets, expected, rtol=1e-6)


def test_dqn_trains_on_finite_targets_when_a_truncated_episode_ends_without_legal_actions() -> None:
    """The issue's reproduction: every episode is truncated at an all-zero mask."""
    config = (cairn.DQNConfig().environment(make_pick_legal, env_config={"length": 4, "empty_mask_at": 4})
              .training(train_batch_size=64, minibatch_size=32, num_steps_sampled_before_learning_starts=32)
              .debugging(seed=0))
    stats = config.build().train()["learners"]["default_policy"]
    assert abs(stats["target_mean"]) < 10.0  # rewards are 0 or 1 (was about -1e8)


def test_epsilon_random_actions_are_uniform_over_legal_actions() -> None:
    mask = np.tile(np.array([0, 1, 0, 1, 1, 0], dtype=np.float32), (30_000, 1))
    actions = random_legal_actions(mask, np.random.default_rng(0))
    counts = np.bincount(actions, minlength=N)
    assert counts[[0, 2, 5]].sum() == 0
    assert np.allclose(counts[[1, 3, 4]] / 30_000, 1 / 3, atol=0.01)
    policy = DQNPolicy(SPACE, gym.spaces.Discrete(N), {"epsilon": [[0, 1.0]]}, seed=0)
    observations = _observations(300)
    assert _legal(observations, policy.compute_actions(observations, explore=True))


def test_multi_discrete_actions_take_one_mask_entry_per_choice() -> None:
    space = gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (3,), np.float32),
                             "action_mask": gym.spaces.MultiBinary(7)})
    policy = cairn.Policy(space, gym.spaces.MultiDiscrete([3, 4]), seed=0)
    mask = np.array([0, 1, 1, 1, 0, 0, 0], dtype=np.int8)  # first in {1, 2}, second 0
    actions = policy.compute_actions([{"x": np.zeros(3, np.float32), "action_mask": mask}] * 200)
    assert set(actions[:, 0]) <= {1, 2} and set(actions[:, 1]) == {0}
    with pytest.raises(ActionMaskError, match="mask.*sub-action"):
        policy.compute_single_action({"x": np.zeros(3, np.float32),
                                      "action_mask": np.array([1, 1, 1, 0, 0, 0, 0])})


def test_an_all_zero_mask_is_an_error_that_says_mask() -> None:
    policy = cairn.Policy(SPACE, gym.spaces.Discrete(N), seed=0)
    empty = {"observation": np.zeros(N, np.float32), "action_mask": np.zeros(N, np.int8)}
    for call in (lambda: policy.compute_single_action(empty),
                 lambda: policy.compute_actions([*_observations(3), empty], explore=False)):
        with pytest.raises(CairnError, match="mask"):
            call()
    config = (cairn.PPOConfig().environment(make_pick_legal, env_config={"empty_mask_at": 3})
              .training(train_batch_size=64, minibatch_size=32, num_epochs=1).debugging(seed=0))
    with pytest.raises(ActionMaskError, match="mask") as caught:
        config.build().train()
    assert "default_agent" in str(caught.value)


def test_a_mask_that_does_not_fit_the_actions_is_refused() -> None:
    with pytest.raises(ConfigError, match="'action_mask' part .* does not fit the action space"):
        cairn.Policy(SPACE, gym.spaces.Discrete(N + 1))
    with pytest.raises(ConfigError, match="holds only 'action_mask'"):
        cairn.Policy(gym.spaces.Dict({"action_mask": SPACE["action_mask"]}), gym.spaces.Discrete(N))
    # Continuous actions: the key is an ordinary part of the observation.
    policy = cairn.Policy(SPACE, gym.spaces.Box(-1, 1, (2,)), seed=0)
    assert policy.action_mask_size == 0 and policy.preprocessor.size == 2 * N


def test_the_observation_filter_normalises_the_observation_not_the_mask() -> None:
    policy = cairn.Policy(SPACE, gym.spaces.Discrete(N), {"observation_filter": "MeanStdFilter"}, seed=0)
    observations = _observations(50)
    rows = policy.process_observations(observations, update=True)
    assert policy.observation_filter.get_state()["mean"].shape == (N,)
    assert np.array_equal(rows[:, N:], np.stack([o["action_mask"] for o in observations]).astype(np.float32))


def test_a_model_may_ask_for_the_mask() -> None:
    policy = cairn.Policy(SPACE, gym.spaces.Discrete(N), {"model": {"custom_model": MaskAware}}, seed=0)
    observations = _observations(64)
    rows = torch.from_numpy(policy.process_observations(observations, update=False))
    all_legal = torch.ones_like(rows[:, N:])
    net = policy.model.net
    assert not torch.equal(net(rows[:, :N], rows[:, N:])[0], net(rows[:, :N], all_legal)[0])
    assert _legal(observations, policy.compute_actions(observations))


def _algo(kind: str) -> Any:
    if kind == "ppo":
        config = cairn.PPOConfig().training(train_batch_size=256, minibatch_size=64, num_epochs=2)
    else:
        config = (cairn.DQNConfig().training(train_batch_size=32, minibatch_size=32,
                                             num_steps_sampled_before_learning_starts=64)
                  .checkpointing(store_replay_buffer=True))
    return (config.environment(make_pick_legal).env_runners(num_envs_per_env_runner=2)
            .debugging(seed=0).build())


@pytest.mark.parametrize("kind", ["ppo", "dqn"])
def test_training_and_evaluation_never_take_an_illegal_action(kind: str, tmp_path: Path) -> None:
    algo = _algo(kind)
    for _ in range(3):
        algo.train()
    algo.evaluate(5)
    envs = algo.env_runner_group.local.envs
    assert sum(env.unwrapped.steps for env in envs) > 0
    assert sum(env.unwrapped.illegal for env in envs) == 0
    algo.save(tmp_path / "ckpt")
    restored = cairn.Algorithm.from_checkpoint(tmp_path / "ckpt")
    first, second = algo.train(), restored.train()
    a, b = algo.get_policy().get_weights(), restored.get_policy().get_weights()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert json.dumps(first["learners"], sort_keys=True) == json.dumps(second["learners"], sort_keys=True)
    assert sum(env.unwrapped.illegal for env in restored.env_runner_group.local.envs) == 0


@pytest.mark.slow
def test_masked_ppo_learns_to_pick_the_paying_action() -> None:
    config = (cairn.PPOConfig().environment(make_pick_legal)
              .training(train_batch_size=1024, minibatch_size=128, num_epochs=4, lr=3e-3)
              .env_runners(num_envs_per_env_runner=4).debugging(seed=learning_seed(0)))
    algo = config.build()
    for _ in range(15):
        result = algo.train()
    # A uniformly random legal pick pays about 1/3.5 of the steps (10-step episodes).
    assert result["episode_return_mean"] >= 8.0, result["episode_return_mean"]


class _CountIllegal(BaseWrapper):
    """Counts moves whose action the mask of the observation it was chosen on forbids."""

    illegal = 0
    moves = 0

    def step(self, action: Any) -> None:
        if action is not None:
            _CountIllegal.moves += 1
            _CountIllegal.illegal += int(not self.observe(self.agent_selection)["action_mask"][action])
        super().step(action)


def make_counted_connect_four(env_config: dict[str, Any]) -> Any:
    from pettingzoo.classic import connect_four_v3

    return _CountIllegal(connect_four_v3.env())


@pytest.mark.parametrize("kind", ["ppo", "dqn"])
def test_turn_based_self_play_never_moves_illegally(kind: str) -> None:
    _CountIllegal.illegal = _CountIllegal.moves = 0
    if kind == "ppo":
        config: Any = cairn.PPOConfig().training(train_batch_size=256, minibatch_size=64, num_epochs=1)
    else:
        config = cairn.DQNConfig().training(train_batch_size=32, minibatch_size=32,
                                            num_steps_sampled_before_learning_starts=64)
    algo = (config.environment(make_counted_connect_four).env_runners(num_envs_per_env_runner=2)
            .debugging(seed=0).build())
    for _ in range(2):
        algo.train()
    algo.evaluate(4)
    assert _CountIllegal.moves > 200 and _CountIllegal.illegal == 0
