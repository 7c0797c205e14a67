"""Acting on distribution inputs that define no distribution (NaN, +inf, a (sub-)action whose
logits are all -inf) raises PolicyOutputError naming the rows, in every acting path, instead of
acting: a draw or argmax over NaN logits was action 0 and a Gaussian's a NaN outside the Box,
with no error (weights that diverged in training went on acting, and training went on)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.errors import PolicyOutputError
from cairn.models import ActorCriticModel, QModel, SACActorModel
from cairn.policy.acting import check_action_inputs
from cairn.policy.distributions import distribution_for

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTION_SPACES = {
    "discrete": gym.spaces.Discrete(4, start=-2),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 2]),
    "box": gym.spaces.Box(0.0, 10.0, (2,), np.float32),
}
ROWS = np.random.default_rng(0).uniform(-1, 1, (4, 3)).astype(np.float32)
NAN, INF = float("nan"), float("inf")


def _nan_row(row: int) -> np.ndarray:
    obs = ROWS.copy()
    obs[row, 1] = NAN  # the network's outputs for this row only are NaN
    return obs


@pytest.mark.parametrize("kind", list(ACTION_SPACES))
@pytest.mark.parametrize("explore", [True, False])
def test_nan_outputs_are_refused_naming_rows_and_leave_the_policy_usable(kind: str, explore: bool) -> None:
    policy = cairn.Policy(OBS, ACTION_SPACES[kind], seed=3)
    twin = cairn.Policy(OBS, ACTION_SPACES[kind], seed=3)
    with pytest.raises(PolicyOutputError, match="NaN or infinite") as info:
        policy.compute_actions(_nan_row(2), explore=explore)
    assert info.value.rows == (2,)
    processed = policy.process_observations(_nan_row(1), update=False)
    with pytest.raises(PolicyOutputError) as info:
        policy.compute_raw_actions_and_logp(processed, explore=explore)
    assert info.value.rows == (1,)
    with pytest.raises(PolicyOutputError):
        policy.compute_single_action(_nan_row(0)[0], explore=explore)
    # Nothing was drawn: the next call acts as a policy that never saw the bad rows.
    np.testing.assert_array_equal(policy.compute_actions(ROWS, explore=explore),
                                  twin.compute_actions(ROWS, explore=explore))


@pytest.mark.parametrize("kind", list(ACTION_SPACES))
def test_diverged_weights_are_refused(kind: str) -> None:
    policy = cairn.Policy(OBS, ACTION_SPACES[kind], seed=0)
    with torch.no_grad():
        for param in policy.model.parameters():
            param.fill_(NAN)
    for explore in (True, False):
        with pytest.raises(PolicyOutputError) as info:
            policy.compute_actions(ROWS, explore=explore)
        assert info.value.rows == (0, 1, 2, 3)


def test_recurrent_policy_refuses_nan_outputs() -> None:
    policy = cairn.Policy(OBS, gym.spaces.Discrete(3), {"model": {"use_lstm": True}}, seed=0)
    state = [np.repeat(s[None], len(ROWS), axis=0) for s in policy.get_initial_state()]
    with pytest.raises(PolicyOutputError) as info:
        policy.compute_actions(_nan_row(3), state=state, explore=False)
    assert info.value.rows == (3,)


def test_masked_policy_refuses_nan_in_a_legal_logit_only() -> None:
    space = gym.spaces.Dict({"observation": OBS, "action_mask": gym.spaces.MultiBinary(3)})
    policy = cairn.Policy(space, gym.spaces.Discrete(3), seed=0)
    obs = [{"observation": row, "action_mask": np.array([1, 0, 1], np.int8)} for row in _nan_row(1)]
    with pytest.raises(PolicyOutputError) as info:
        policy.compute_actions(obs)
    assert info.value.rows == (1,)


def test_dqn_refuses_nan_q_values() -> None:
    policy = DQNPolicy(OBS, gym.spaces.Discrete(3), seed=0)
    with pytest.raises(PolicyOutputError) as info:
        policy.compute_actions(_nan_row(0), explore=False)
    assert info.value.rows == (0,)


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_box_actor_policies_refuse_nan_outputs(algo: str) -> None:
    from cairn.algorithms.sac.sac_policy import SACPolicy
    from cairn.algorithms.td3.td3_policy import TD3Policy

    cls: Any = SACPolicy if algo == "sac" else TD3Policy
    policy = cls(OBS, gym.spaces.Box(-2.0, 1.0, (2,), np.float32), seed=0)
    with pytest.raises(PolicyOutputError) as info:
        policy.compute_actions(_nan_row(2), explore=False)
    assert info.value.rows == (2,)


def test_usable_rows_of_each_distribution() -> None:
    """-inf beside finite logits is an impossible action, usable; NaN, +inf, a (sub-)action
    whose logits are all -inf, and a Gaussian's infinite mean or log-std are not."""
    categorical = distribution_for(gym.spaces.Discrete(3))
    logits = np.array([[0.0, -INF, 1.0], [NAN, 0.0, 0.0], [INF, 0.0, 0.0], [-INF, -INF, -INF],
                       [-1e9, -1e9, 5.0]], np.float32)
    assert categorical.usable_rows(logits).tolist() == [True, False, False, False, True]
    multi = distribution_for(gym.spaces.MultiDiscrete([2, 3]))
    logits = np.array([[0.0, 1.0, -INF, 0.0, 2.0], [-INF, -INF, 0.0, 1.0, 2.0],
                       [0.0, 1.0, -INF, -INF, -INF], [0.0, 1.0, 0.0, NAN, 2.0]], np.float32)
    assert multi.usable_rows(logits).tolist() == [True, False, False, False]
    assert multi.usable_rows(np.zeros((0, 5), np.float32)).shape == (0,)
    gaussian = distribution_for(gym.spaces.Box(-1.0, 1.0, (2,)))
    inputs = np.array([[0.0, 1.0, -1.0, 0.0], [INF, 0.0, 0.0, 0.0], [0.0, 0.0, -INF, 0.0],
                       [0.0, NAN, 0.0, 0.0]], np.float32)
    assert gaussian.usable_rows(inputs).tolist() == [True, False, False, False]


def test_check_passes_usable_rows_whose_sum_is_not_finite() -> None:
    """The check's shortcut (a finite sum of all inputs) falls back to the exact check when the
    sum is not finite: a logit of -inf or logits whose sum overflows float32 still act."""
    categorical = distribution_for(gym.spaces.Discrete(3))
    for logits in (np.array([[0.0, -INF, 1.0], [2.0, 1.0, -INF]], np.float32),
                   np.array([[3e38, 3e38, 0.0], [3e38, -1.0, 3e38]], np.float32)):
        check_action_inputs(categorical, logits)
    with pytest.raises(PolicyOutputError) as info:
        check_action_inputs(categorical, np.array([[0.0, -INF, 1.0], [-INF, -INF, -INF]], np.float32))
    assert info.value.rows == (1,)
    check_action_inputs(categorical, np.zeros((0, 3), np.float32))  # an empty batch


class LegalToMinusInf(ActorCriticModel):
    """A user's network that masks its own logits the wrong way round (``-inf`` where the mask
    allows) in the rows whose first observation is positive: every legal logit ``-inf`` there."""

    receives_action_mask = True

    def __init__(self, observation_space, action_space, num_outputs, model_config):  # type: ignore[no-untyped-def]
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.pi, self.vf = torch.nn.Linear(self.obs_size, num_outputs), torch.nn.Linear(self.obs_size, 1)

    def forward(self, obs, action_mask):  # type: ignore[no-untyped-def]
        bad = (obs[:, :1] > 0) & (action_mask > 0.5)
        return self.pi(obs).masked_fill(bad, -INF), self.vf(obs).squeeze(-1)


class LegalQToMinusInf(QModel):
    receives_action_mask = True

    def __init__(self, observation_space, action_space, num_outputs, model_config):  # type: ignore[no-untyped-def]
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.q = torch.nn.Linear(self.obs_size, num_outputs)

    def forward(self, obs, action_mask):  # type: ignore[no-untyped-def]
        return self.q(obs).masked_fill((obs[:, :1] > 0) & (action_mask > 0.5), -INF)


def _masked_rows(mask: list[int]) -> list[dict[str, np.ndarray]]:
    rows = np.abs(ROWS)
    rows[2, 0] = 0.5  # only row 2's first entry is positive
    rows[[0, 1, 3], 0] = -0.5
    return [{"observation": row, "action_mask": np.array(mask, np.int8)} for row in rows]


@pytest.mark.parametrize("action_space,mask", [(gym.spaces.Discrete(3), [0, 1, 1]),
                                               (gym.spaces.MultiDiscrete([2, 3]), [0, 1, 0, 1, 1])])
@pytest.mark.parametrize("explore", [True, False])
def test_a_masked_policy_whose_legal_logits_are_all_minus_inf_is_refused(action_space, mask, explore) -> None:
    # Acted, the illegal actions' finite masked score took all the probability, the legal
    # argmax over -inf picked index 0, illegal here, with a log-probability of -inf: no error.
    space = gym.spaces.Dict({"observation": OBS, "action_mask": gym.spaces.MultiBinary(len(mask))})
    policy = cairn.Policy(space, action_space, {"model": {"custom_model": LegalToMinusInf}}, seed=0)
    obs = _masked_rows(mask)
    with pytest.raises(PolicyOutputError, match="every legal action") as info:
        policy.compute_actions(obs, explore=explore)
    assert info.value.rows == (2,)
    with pytest.raises(PolicyOutputError, match="every legal action"):
        policy.compute_raw_actions_and_logp(policy.process_observations(obs, update=False), explore=explore)
    good = obs[:2] + obs[3:]
    raw, logp = policy.compute_raw_actions_and_logp(policy.process_observations(good, update=False),
                                                    explore=explore)
    assert np.isfinite(logp).all()
    legal = np.flatnonzero(np.array(mask[:action_space.nvec[0]] if hasattr(action_space, "nvec") else mask))
    assert set(np.asarray(raw).reshape(len(good), -1)[:, 0].tolist()) <= set(legal.tolist())


def test_a_legal_logit_of_minus_inf_beside_a_finite_one_still_acts() -> None:
    space = gym.spaces.Dict({"observation": OBS, "action_mask": gym.spaces.MultiBinary(3)})
    policy = cairn.Policy(space, gym.spaces.Discrete(3), seed=0)
    inputs = np.array([[-INF, 0.3, -1e9]], np.float32)  # action 0 legal but impossible, 1 legal
    from cairn.policy.action_masking import check_legal_scores

    check_legal_scores(inputs, np.array([[1.0, 1.0, 0.0]], np.float32), (3,))
    assert policy.compute_actions(_masked_rows([0, 1, 1])[:1], explore=False).tolist() in ([1], [2])


def test_a_masked_dqn_policy_whose_legal_q_values_are_all_minus_inf_is_refused() -> None:
    space = gym.spaces.Dict({"observation": OBS, "action_mask": gym.spaces.MultiBinary(3)})
    policy = DQNPolicy(space, gym.spaces.Discrete(3), {"model": {"custom_model": LegalQToMinusInf}}, seed=0)
    obs = _masked_rows([0, 1, 1])
    with pytest.raises(PolicyOutputError, match="every legal action") as info:
        policy.compute_actions(obs, explore=False)
    assert info.value.rows == (2,)
    assert set(policy.compute_actions(obs[:2], explore=False).tolist()) <= {1, 2}


class HugeLogStdActor(SACActorModel):
    """A user's SAC actor with an unbounded log-std that diverged to 89 in the rows whose first
    observation is positive: ``exp(89)`` overflows float32."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):  # type: ignore[no-untyped-def]
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.mean = torch.nn.Linear(self.obs_size, num_outputs)

    def forward(self, obs):  # type: ignore[no-untyped-def]
        log_std = torch.where(obs[:, :1] > 0, 89.0, 0.0).expand(-1, self.mean.out_features)
        return self.mean(obs), log_std


def _huge_log_std_policy(algo: str) -> tuple[cairn.Policy, np.ndarray]:
    from cairn.algorithms.sac.sac_policy import SACPolicy

    box = gym.spaces.Box(-2.0, 1.0, (2,), np.float32)
    obs = ROWS.copy()
    obs[:, 0] = [-0.5, -0.5, 0.5, -0.5]  # row 2 only
    if algo == "ppo":
        policy = cairn.Policy(OBS, box, seed=0)
        with torch.no_grad():
            policy.model.log_std.copy_(torch.tensor([0.0, 89.0]))  # an entropy bonus's drift
        return policy, obs
    policy = SACPolicy(OBS, box, {"model": {"custom_model": HugeLogStdActor}, "initial_random_steps": 0},
                       seed=0)
    return policy, obs


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_a_log_std_whose_std_overflows_is_refused_when_sampling(algo: str) -> None:
    # exp(89) is inf in float32: the draw was +-inf, clipped (squashed) to a bound of the Box,
    # with a log-probability of -inf, and no error.
    policy, obs = _huge_log_std_policy(algo)
    twin, _ = _huge_log_std_policy(algo)
    rows = (0, 1, 2, 3) if algo == "ppo" else (2,)  # PPO's built-in log-std is one for every row
    with pytest.raises(PolicyOutputError, match="overflows float32") as info:
        policy.compute_actions(obs, explore=True)
    assert info.value.rows == rows
    processed = policy.process_observations(obs, update=False)
    if algo == "ppo":
        with pytest.raises(PolicyOutputError, match="overflows float32"):
            policy.compute_raw_actions_and_logp(processed, explore=True)
        raw, logp = policy.compute_raw_actions_and_logp(processed, explore=False)  # the mean: finite
        assert np.isfinite(raw).all() and np.isfinite(logp).all()
    assert np.isfinite(policy.compute_actions(obs, explore=False)).all()
    if algo == "sac":  # the other rows act; nothing was drawn by the refused call
        good = obs[[0, 1, 3]]
        np.testing.assert_array_equal(policy.compute_actions(good), twin.compute_actions(good))


def test_a_large_but_finite_std_still_samples() -> None:
    policy = cairn.Policy(OBS, gym.spaces.Box(-2.0, 1.0, (2,), np.float32), seed=0)
    with torch.no_grad():
        policy.model.log_std.copy_(torch.tensor([0.0, 80.0]))  # std 5.5e34: finite
    raw, logp = policy.compute_raw_actions_and_logp(policy.process_observations(ROWS, update=False),
                                                    explore=True)
    assert np.isfinite(raw).all() and np.isfinite(logp).all()


@pytest.mark.parametrize("explore", [True, False])
def test_a_log_std_whose_inverse_overflows_is_refused_where_the_logp_is_recorded(explore: bool) -> None:
    # exp(90) is inf in float32: (a - mean) * exp(-log_std) was 0 * inf, a NaN log-probability
    # recorded with the action, and every PPO loss over the row NaN, blamed on the environment.
    policy = cairn.Policy(OBS, gym.spaces.Box(-2.0, 1.0, (2,), np.float32), seed=0)
    with torch.no_grad():
        policy.model.log_std.copy_(torch.tensor([0.0, -90.0]))  # a collapsed std
    processed = policy.process_observations(ROWS, update=False)
    with pytest.raises(PolicyOutputError, match="log-probability") as info:
        policy.compute_raw_actions_and_logp(processed, explore=explore)
    assert info.value.rows == (0, 1, 2, 3)
    assert np.isfinite(policy.compute_actions(ROWS, explore=explore)).all()  # acting alone reads the mean


def test_the_logp_check_names_the_rows_and_passes_finite_ones_whose_sum_overflows() -> None:
    from cairn.policy.acting import check_action_logp

    with pytest.raises(PolicyOutputError, match="-inf") as info:
        check_action_logp(np.array([-0.5, -INF, NAN], np.float32), np.zeros((3, 2), np.float32))
    assert info.value.rows == (1, 2)
    check_action_logp(np.full(3, -3e38, np.float32), np.zeros((3, 2), np.float32))  # finite; the sum is not
    check_action_logp(np.zeros(0, np.float32), np.zeros((0, 2), np.float32))



class InfiniteOutputActor(SACActorModel):
    """A user's SAC actor whose mean or log-std (``model_config["bad"]``) is infinite in the
    rows whose first observation is positive: weights that diverged there."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):  # type: ignore[no-untyped-def]
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.mean = torch.nn.Linear(self.obs_size, num_outputs)
        self.bad = model_config["bad"]

    def forward(self, obs):  # type: ignore[no-untyped-def]
        inf = torch.where(obs[:, :1] > 0, INF, 0.0).expand(-1, self.mean.out_features)
        mean, log_std = self.mean(obs), torch.zeros_like(inf)
        return (mean + inf, log_std) if self.bad == "mean" else (mean, log_std + inf)


@pytest.mark.parametrize("explore", [True, False])
@pytest.mark.parametrize("bad", ["mean", "log_std"])
def test_sac_refuses_an_infinite_mean_or_log_std(explore: bool, bad: str) -> None:
    """SAC's squashed Gaussian, as PPO's Gaussian: an infinite pre-squash mean (weights that
    diverged) acted the bound of the Box, ``tanh(inf) = 1``, and a user's actor's infinite
    log-std acted greedily from the mean, with no error; both are refused now."""
    from cairn.algorithms.sac.distribution import SquashedGaussian
    from cairn.algorithms.sac.sac_policy import SACPolicy

    box = gym.spaces.Box(-2.0, 1.0, (2,), np.float32)
    inputs = np.zeros((3, 4), np.float32)
    inputs[1, 0 if bad == "mean" else 3] = INF
    inputs[2, 1 if bad == "mean" else 2] = -INF
    assert SquashedGaussian(box).usable_rows(inputs).tolist() == [True, False, False]

    def policy() -> SACPolicy:
        model = {"custom_model": InfiniteOutputActor, "custom_model_config": {"bad": bad}}
        return SACPolicy(OBS, box, {"model": model, "initial_random_steps": 0}, seed=0)

    refusing, twin = policy(), policy()
    obs = ROWS.copy()
    obs[:, 0] = [-0.5, -0.5, 0.5, -0.5]  # row 2 only
    with pytest.raises(PolicyOutputError, match="NaN or infinite") as info:
        refusing.compute_actions(obs, explore=explore)
    assert info.value.rows == (2,)
    good = obs[[0, 1, 3]]  # the other rows act; nothing was drawn by the refused call
    np.testing.assert_array_equal(refusing.compute_actions(good, explore=explore),
                                  twin.compute_actions(good, explore=explore))
