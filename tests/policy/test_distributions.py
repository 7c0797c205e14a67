"""The action distributions' maths against torch.distributions, on the inputs where a shortcut
would part from it (logits of -inf, which a user's network may give an impossible action)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from cairn.policy.distributions import Categorical, MultiCategorical

NEG_INF = -float("inf")


def test_categorical_entropy_with_minus_inf_logits_is_finite_and_torchs() -> None:
    """An action of logit -inf has probability 0 and adds 0 to the entropy (0 log 0 = 0): the
    entropy, and its gradient (the loss's entropy bonus; IMPALA/APPO add it even at weight 0
    through ``coeff * entropy``), stay finite and equal torch.distributions.Categorical's."""
    logits = torch.tensor([[0.5, 1.0, NEG_INF, -2.0], [2.0, NEG_INF, NEG_INF, NEG_INF],
                           [0.0, 0.0, 0.0, 0.0]], requires_grad=True)
    entropy = Categorical(gym.spaces.Discrete(4)).entropy(logits)
    expected = torch.distributions.Categorical(logits=logits.detach()).entropy()
    torch.testing.assert_close(entropy.detach(), expected)
    assert entropy[1].item() == 0.0  # one possible action: no uncertainty
    entropy.sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    assert (logits.grad[logits.detach() == NEG_INF] == 0).all()  # no gradient to an impossible action


def test_multicategorical_entropy_with_minus_inf_logits_is_the_sum_of_torchs() -> None:
    logits = torch.tensor([[NEG_INF, 1.0, 0.0, 3.0, NEG_INF], [0.0, NEG_INF, NEG_INF, 1.0, 2.0]],
                          requires_grad=True)
    entropy = MultiCategorical(gym.spaces.MultiDiscrete([3, 2])).entropy(logits)
    expected = sum(torch.distributions.Categorical(logits=part).entropy()
                   for part in torch.split(logits.detach(), [3, 2], dim=-1))
    torch.testing.assert_close(entropy.detach(), expected)
    entropy.sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


def test_categorical_entropy_of_finite_logits_is_unchanged() -> None:
    """Finite logits (MASKED_SCORE included) give exactly what -(p log p).sum() gives."""
    logits = torch.tensor([[0.3, -1e9, 2.0], [1e3, -1e3, 0.0]])
    logp = torch.log_softmax(logits, dim=-1)
    assert torch.equal(Categorical(gym.spaces.Discrete(3)).entropy(logits), -(logp.exp() * logp).sum(dim=-1))


class _FixedUniform(np.random.Generator):
    """A generator whose uniforms are all ``value``: it forces a draw onto a CDF entry."""

    def __init__(self, value: float) -> None:
        super().__init__(np.random.PCG64(0))
        self.value = value

    def random(self, size=None, dtype=np.float64, out=None):  # type: ignore[no-untyped-def,override]
        return np.full(size, self.value, dtype=dtype)


def test_an_action_of_probability_zero_is_never_drawn() -> None:
    """Logits of -inf (an impossible action) give an empty CDF interval: no uniform draws it, not
    even u = 0 (2**-24 of float32 draws), which took action 0 whatever its probability; its logp
    was then -inf and PPO's ratio NaN. Nor does u on the CDF entry before an empty interval."""
    dist = Categorical(gym.spaces.Discrete(4))
    logits = np.array([[NEG_INF, 0.0, NEG_INF, 0.0]] * 2, np.float32)  # CDF [0, 1, 1, 2]
    for value, expected in ((0.0, 1), (0.5, 3), (float(np.nextafter(np.float32(1), np.float32(0))), 3)):
        for raw in (dist.sample_numpy(logits, _FixedUniform(value)),
                    dist.sample_numpy_and_logp(logits, _FixedUniform(value))[0]):
            assert raw.tolist() == [expected, expected]
        assert np.isfinite(dist.sample_numpy_and_logp(logits, _FixedUniform(value))[1]).all()
    multi = MultiCategorical(gym.spaces.MultiDiscrete([2, 3]))
    logits = np.array([[NEG_INF, 0.0, NEG_INF, NEG_INF, 1.0]], np.float32)
    raw = multi.sample_numpy(logits, _FixedUniform(0.0))
    assert raw.tolist() == [[1, 2]]


def test_torch_draws_never_take_an_action_of_probability_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch draw, with uniforms forced to 0 and to just below 1: never the first or the last
    action at -inf (the last one was taken where the draw passed the softmax's rounded sum)."""
    logits = torch.tensor([[NEG_INF, 0.3, -0.2, NEG_INF]] * 2)
    dist = Categorical(gym.spaces.Discrete(4))
    real_rand = torch.rand
    for value, expected in ((0.0, 1), (float(np.nextafter(np.float32(1), np.float32(0))), 2)):
        def fixed(*args: Any, value: float = value, **kwargs: Any) -> torch.Tensor:
            return torch.full_like(real_rand(*args, **kwargs), value)

        monkeypatch.setattr(torch, "rand", fixed)
        assert dist.sample(logits, torch.Generator().manual_seed(0)).tolist() == [expected, expected]
    monkeypatch.undo()
    drawn = dist.sample(logits[:1].expand(2048, -1).contiguous(), torch.Generator().manual_seed(0))
    assert set(drawn.tolist()) == {1, 2}
