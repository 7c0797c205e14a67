"""cairn/policy/target_network.py, the one mechanism of every algorithm's target networks: a model's
target parts stay in eval mode, start as copies and follow by Polyak steps (buffers copied); a
policy's target network keeps its numbers, with their types, through a state round trip."""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.algorithms.impala.appo_policy import APPOPolicy
from cairn.algorithms.sac.model import SACModel
from cairn.algorithms.td3.model import TD3Model
from cairn.policy.target_network import TargetParts, frozen


class TwoParts(TargetParts):
    """A model with a user's BatchNorm and Dropout in the part its target copies."""

    target_sources: ClassVar[dict[str, str]] = {"target_net": "net"}

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))
        self.target_net = frozen(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.5)))


def _tensors(module: nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for t in [*module.parameters(), *module.buffers()]]


def test_targets_stay_in_eval_mode_and_have_no_gradients_whatever_mode_the_model_is_put_in():
    model = TwoParts()
    for mode in (True, False, True):
        model.train(mode)
        assert model.net.training is mode and all(m.training is mode for m in model.net.modules())
        assert not any(m.training for m in model.target_net.modules())
    assert not any(p.requires_grad for p in model.target_net.parameters())
    assert all(p.requires_grad for p in model.net.parameters())


def test_copy_targets_makes_each_target_its_sources_copy_and_polyak_moves_it_by_tau():
    model = TwoParts().train(True)
    model.net(torch.randn(8, 3))  # moves the BatchNorm's running statistics of the source only
    model.copy_targets()
    for kept, source in zip(_tensors(model.target_net), _tensors(model.net), strict=True):
        assert torch.equal(kept, source)
    before = _tensors(model.target_net)
    with torch.no_grad():
        for p in model.net.parameters():
            p.add_(1.0)
    model.net(torch.randn(8, 3))
    model.update_targets(0.25)
    params = len(list(model.net.parameters()))
    after, source = _tensors(model.target_net), _tensors(model.net)
    for old, new, moved in zip(before[:params], after[:params], source[:params], strict=True):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * moved)
        assert not torch.equal(new, old)
    for new, moved in zip(after[params:], source[params:], strict=True):  # buffers: copied
        assert torch.equal(new, moved)


@pytest.mark.parametrize(("model", "pairs"), [
    (SACModel(3, 1, hidden=[8], activation="relu", initial_alpha=1.0), {"target_critic": "critic"}),
    (TD3Model(3, 1, hidden=[8], activation="relu"), {"target_actor": "actor", "target_critic": "critic"}),
])
def test_sac_and_td3_models_name_their_targets_and_copy_them_when_initialised(model, pairs):
    assert model.target_sources == pairs
    model.reset_parameters(torch.Generator().manual_seed(0))
    model.train(True)
    for target, source in pairs.items():
        kept, copied = getattr(model, target), getattr(model, source)
        assert not kept.training
        assert not any(p.requires_grad for p in kept.parameters())
        for a, b in zip(kept.state_dict().values(), copied.state_dict().values(), strict=True):
            assert torch.equal(a, b)


OBS, ACT = gym.spaces.Box(-1.0, 1.0, (3,), np.float32), gym.spaces.Discrete(2)


@pytest.mark.parametrize(("cls", "numbers"), [
    (DQNPolicy, {"last_update_timestep": ("last_target_update", np.int64(7), int)}),
    (APPOPolicy, {"kl_coeff": ("kl_coeff", 2, float), "num_train_batches": ("num_train_batches", 9.0, int)}),
])
def test_a_policys_target_numbers_round_trip_with_their_types(cls, numbers):
    policy = cls(OBS, ACT, {"model": {"hidden": [8]}}, seed=0)
    state = policy.get_state()
    assert list(state["target"]) == ["weights", *numbers]  # the checkpoint's keys, in this order
    for key, (_, value, _) in numbers.items():
        state["target"][key] = value
    policy.set_state(state)
    for key, (name, value, kind) in numbers.items():
        assert type(getattr(policy, name)) is kind and getattr(policy, name) == value
        assert policy.get_state()["target"][key] == value
    with pytest.raises(ValueError, match="must be a number"):
        policy.check_state({**state, "target": {**state["target"], next(iter(numbers)): True}})
