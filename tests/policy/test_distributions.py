"""The action distributions' maths against torch.distributions, on the inputs where a shortcut
would part from it (logits of -inf, which a user's network may give an impossible action)."""

from __future__ import annotations

import gymnasium as gym
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
