"""The recorded log-probability of an acted action is finite, or the call is refused before the draw.

Categoricals skip the check of the recorded logp (``ActionDistribution.finite_logp``): these tests
try to fool that skip with float32's extremes, on the real acting path, and check that what the
inputs alone decide (a Gaussian's log-std too low) is refused before anything is drawn, leaving the
generator as it was; masked legal logits far below the masked score still act legally, finitely.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.errors import PolicyOutputError
from cairn.models import ActorCriticModel
from cairn.policy.acting import raw_actions_and_logp
from cairn.policy.distributions import ActionDistribution, Categorical, DiagGaussian, MultiCategorical

MAX = float(np.finfo(np.float32).max)
INF = float("inf")
OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


class FixedOutputs(ActorCriticModel):
    """Gives every row the distribution inputs the test sets in ``OUTPUTS``."""

    OUTPUTS: ClassVar[list[float]] = []

    def __init__(self, observation_space, action_space, num_outputs, model_config):  # type: ignore[no-untyped-def]
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.vf = torch.nn.Linear(self.obs_size, 1)
        self.register_buffer("outputs", torch.tensor(self.OUTPUTS, dtype=torch.float32))

    def forward(self, obs):  # type: ignore[no-untyped-def]
        return self.outputs.expand(obs.shape[0], -1).clone(), self.vf(obs).squeeze(-1)


def _policy(action_space: gym.Space[Any], outputs: list[float], mask: list[int] | None = None,
            rows: int = 64) -> tuple[cairn.Policy, np.ndarray]:
    FixedOutputs.OUTPUTS = outputs
    if mask is None:
        space: gym.Space[Any] = OBS
        obs: Any = np.zeros((rows, 3), np.float32)
    else:
        space = gym.spaces.Dict({"observation": OBS, "action_mask": gym.spaces.MultiBinary(len(mask))})
        obs = [{"observation": np.zeros(3, np.float32), "action_mask": np.array(mask, np.int8)}] * rows
    policy = cairn.Policy(space, action_space, {"model": {"custom_model": FixedOutputs}}, seed=3)
    return policy, policy.process_observations(obs, update=False)


def _refused_earlier_or_finite(policy: cairn.Policy, processed: np.ndarray, explore: bool) -> None:
    try:
        with np.errstate(all="ignore"):  # max - (-max) is -inf (an impossible action), max + max inf
            raw, logp = policy.compute_raw_actions_and_logp(processed, explore=explore)
    except PolicyOutputError as error:
        assert "log-probability of the action a policy chose" not in str(error)  # the skipped check's
        return
    assert logp.dtype == np.float32 and np.isfinite(logp).all(), logp
    torch_logp = policy.dist.logp(torch.from_numpy(policy.compute_action_inputs(processed)),
                                  torch.from_numpy(np.asarray(raw)))
    assert np.isfinite(torch_logp.numpy()).all()  # what the learner recomputes


ADVERSARIAL = [
    [0.0, -3e38], [3e38, -3e38], [-3e38, 3e38], [MAX, -MAX], [-MAX, MAX], [-MAX, -MAX], [MAX, MAX],
    [1e30, -1e30], [0.0, -INF], [-INF, -MAX], [-INF, MAX], [MAX, -INF],
]


def test_the_categoricals_skip_the_logp_check_and_gaussians_keep_it() -> None:
    assert Categorical(gym.spaces.Discrete(2)).finite_logp
    assert MultiCategorical(gym.spaces.MultiDiscrete([2, 3])).finite_logp
    assert not DiagGaussian(gym.spaces.Box(-1.0, 1.0, (2,))).finite_logp
    assert not ActionDistribution.finite_logp  # users' distributions keep the check


@pytest.mark.parametrize("logits", ADVERSARIAL)
@pytest.mark.parametrize("explore", [True, False])
def test_a_discrete_policy_gives_huge_spread_logits_a_finite_logp(logits: list[float], explore: bool) -> None:
    policy, processed = _policy(gym.spaces.Discrete(2), logits)
    _refused_earlier_or_finite(policy, processed, explore)


@pytest.mark.parametrize("explore", [True, False])
def test_a_multidiscrete_policy_gives_huge_spread_logits_a_finite_logp(explore: bool) -> None:
    # Every pair of adversarial rows as two sub-actions, and one sub-action of each per call: the
    # sum of the parts, -inf where one part alone could be as low as -3.4e38, is what is at stake.
    policy, processed = _policy(gym.spaces.MultiDiscrete([2, 2, 2]), [0.0] * 6, rows=8)
    for first in ADVERSARIAL:
        for second in ADVERSARIAL:
            with torch.no_grad():
                policy.model.outputs.copy_(torch.tensor([*first, *second, *first]))
            _refused_earlier_or_finite(policy, processed, explore)


@pytest.mark.parametrize("explore", [True, False])
def test_random_float32_extremes_never_give_a_categorical_a_non_finite_logp(explore: bool) -> None:
    # Rows mixing +-max, -inf, huge and ordinary logits, through the acting function itself: each
    # row is refused (check_action_inputs) or its logp is finite.
    rng = np.random.default_rng(7)
    values = np.array([MAX, -MAX, -INF, 3e38, -3e38, 1e30, -1e30, -1e9, 0.0, 1.0, -104.0, -87.0], np.float32)
    for dist in (Categorical(gym.spaces.Discrete(5)), MultiCategorical(gym.spaces.MultiDiscrete([3, 2, 4]))):
        inputs = values[rng.integers(0, len(values), (4000, dist.num_inputs))]
        usable = dist.usable_rows(inputs)
        assert usable.sum() > 1000  # most rows are acted on
        with np.errstate(over="ignore", invalid="ignore"):
            _, logp = raw_actions_and_logp(dist, inputs[usable], np.random.default_rng(0), explore=explore)
        assert np.isfinite(logp).all(), inputs[usable][~np.isfinite(logp)][:3]


@pytest.mark.parametrize("legal", [[-3e38, -MAX], [-MAX, -1e30], [-1e10, -MAX]])
@pytest.mark.parametrize("explore", [True, False])
def test_masked_discrete_legal_logits_far_below_the_masked_score_give_a_finite_logp(
        legal: list[float], explore: bool) -> None:
    # The illegal action gets -inf in such a row (mask_scores): the legal argmax is acted, with a
    # finite logp.
    policy, processed = _policy(gym.spaces.Discrete(3), [*legal, 5.0], mask=[1, 1, 0])
    raw, logp = policy.compute_raw_actions_and_logp(processed, explore=explore)
    assert set(np.asarray(raw).tolist()) == {int(np.argmax(legal))}
    assert np.isfinite(logp).all()


@pytest.mark.parametrize("explore", [True, False])
def test_masked_multidiscrete_legal_logits_far_below_the_masked_score_act_legally_with_a_finite_logp(
        explore: bool) -> None:
    # Legal logits of -2e38 lie far below MASKED_SCORE (-1e9): the illegal actions get -inf there
    # (mask_scores), not -1e9, so they take no probability and each sub-action's logp is that of
    # its legal actions alone. With -1e9 they took it all, the legal action acted had a logp of
    # about -2e38 per sub-action, and the sum over three was -inf.
    space = gym.spaces.MultiDiscrete([2, 2, 2])
    mask = [1, 0, 1, 0, 1, 1]
    policy, processed = _policy(space, [-2e38, 0.0, -2e38, 0.0, 0.0, 0.0], mask=mask, rows=64)
    raw, logp = policy.compute_raw_actions_and_logp(processed, explore=explore)
    assert set(np.asarray(raw)[:, :2].ravel().tolist()) == {0}  # legal, as ever
    np.testing.assert_array_equal(logp, np.float32(-np.log(2.0)))  # one certain part twice, then 1/2


def test_masked_multidiscrete_with_legal_logits_near_the_float32_limit_still_acts() -> None:
    policy, processed = _policy(gym.spaces.MultiDiscrete([2, 2]), [-1.7e38, 0.0, -MAX, 0.0],
                                mask=[1, 0, 1, 0])
    for explore in (True, False):
        raw, logp = policy.compute_raw_actions_and_logp(processed, explore=explore)
        assert (np.asarray(raw) == 0).all()
        np.testing.assert_array_equal(logp, np.float32(0.0))  # the only legal action of each part
        raw, logp = policy.compute_raw_actions_and_logp(processed[:0], explore=explore)  # no rows
        assert raw.shape == (0, 2) and logp.shape == (0,)


@pytest.mark.parametrize("explore", [True, False])
def test_a_gaussian_log_std_too_low_for_a_logp_is_refused_before_the_draw(explore: bool) -> None:
    # exp(-log_std) overflows from about -88.7: every action's logp is NaN or -inf, whatever the
    # draw. It was refused after the draw, so the refused call still moved the generator.
    box = gym.spaces.Box(-2.0, 1.0, (2,), np.float32)
    policy, processed = _policy(box, [0.5, 0.5, 0.0, -90.0], rows=4)
    fresh, _ = _policy(box, [0.5, 0.5, 0.0, -90.0], rows=4)
    with pytest.raises(PolicyOutputError, match=r"log-probability.*-88\.7|-88\.7.*log-probability") as info:
        policy.compute_raw_actions_and_logp(processed, explore=explore)
    assert info.value.rows == (0, 1, 2, 3)
    assert policy.np_random.bit_generator.state == fresh.np_random.bit_generator.state
    for acting in (policy, fresh):
        with torch.no_grad():
            acting.model.outputs.copy_(torch.tensor([0.5, 0.5, 0.0, -1.0]))
    raw, logp = policy.compute_raw_actions_and_logp(processed, explore=True)
    fresh_raw, fresh_logp = fresh.compute_raw_actions_and_logp(processed, explore=True)
    np.testing.assert_array_equal(raw, fresh_raw)
    np.testing.assert_array_equal(logp, fresh_logp)


def test_a_gaussian_log_std_just_above_the_bound_still_records_a_finite_logp() -> None:
    policy, processed = _policy(gym.spaces.Box(-2.0, 1.0, (2,), np.float32), [0.5, 0.5, 0.0, -87.5])
    for explore in (True, False):
        _, logp = policy.compute_raw_actions_and_logp(processed, explore=explore)
        assert np.isfinite(logp).all()


def test_a_gaussian_sample_that_overflows_is_still_refused_after_the_draw() -> None:
    # A finite std (exp(88) = 1.7e38) beside a mean of 3e38: the sample overflows for some draws,
    # which the inputs alone cannot tell; the check after the draw keeps its -inf out of the batch.
    policy, processed = _policy(gym.spaces.Box(-2.0, 1.0, (1,), np.float32), [3e38, 88.0], rows=64)
    with pytest.raises(PolicyOutputError, match="not finite"), np.errstate(over="ignore", invalid="ignore"):
        policy.compute_raw_actions_and_logp(processed, explore=True)
