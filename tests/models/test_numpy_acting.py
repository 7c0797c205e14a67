"""Users' models act through a numpy program when cairn can translate them (cairn.numpy_program):
same outputs as torch, live parameters (training is seen at once), a deep copy of its own (DQN's
target network), and torch for anything it cannot translate."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.models import ActorCriticModel
from cairn.numpy_program import numpy_program
from tests.models.nets import DictParts, SmallActor, SmallQ, TwoHeads

BOX = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
OBS = np.random.default_rng(0).standard_normal((7, 4)).astype(np.float32)


class Branchy(ActorCriticModel):
    """Python branching on a tensor value: fx cannot trace it, so it acts in torch."""

    def __init__(self, observation_space: Any, action_space: Any, num_outputs: int,
                 model_config: Any) -> None:
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.pi, self.vf = nn.Linear(self.obs_size, num_outputs), nn.Linear(self.obs_size, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.pi(obs) if obs.sum() > 0 else -self.pi(obs)
        return logits, self.vf(obs).squeeze(-1)


class Normed(TwoHeads):
    """A module the translator does not know (LayerNorm): acts in torch."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.norm = nn.LayerNorm(self.obs_size)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return super().forward(self.norm(obs))


def _torch(fn: Any, obs: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return fn(torch.from_numpy(obs)).numpy()  # type: ignore[no-any-return]


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))])
def test_a_translatable_model_acts_in_numpy_with_torchs_outputs(action_space: Any) -> None:
    policy = cairn.Policy(BOX, action_space, {"model": {"custom_model": TwoHeads}}, seed=0)
    got = policy.compute_action_inputs(OBS)
    assert policy.model._numpy_programs["action_inputs"][1] is not None
    np.testing.assert_allclose(got, _torch(policy.model.action_inputs, OBS), rtol=1e-5, atol=1e-6)


def test_training_is_seen_at_once() -> None:
    policy = cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": TwoHeads}}, seed=0)
    before = policy.compute_action_inputs(OBS)
    logits, _ = policy.model(torch.from_numpy(OBS))
    logits.sum().backward()
    policy.optimizer.step()  # in place, as PPO's learner does
    after = policy.compute_action_inputs(OBS)
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, _torch(policy.model.action_inputs, OBS), rtol=1e-5, atol=1e-6)


def test_a_deep_copy_builds_its_own_program() -> None:
    policy = DQNPolicy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": SmallQ}}, seed=0)
    policy.model.numpy_q_values(OBS)  # the online network's program exists before the copy
    target = copy.deepcopy(policy.model)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.5)
    np.testing.assert_allclose(target.numpy_q_values(OBS), _torch(target, OBS), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(policy.model.numpy_q_values(OBS), _torch(policy.model, OBS),
                               rtol=1e-5, atol=1e-6)
    assert not np.allclose(target.numpy_q_values(OBS), policy.model.numpy_q_values(OBS))


@pytest.mark.parametrize("model_class", [Branchy, Normed])
def test_what_cannot_be_translated_acts_in_torch(model_class: type) -> None:
    policy = cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": model_class}}, seed=0)
    got = policy.compute_action_inputs(OBS)
    assert policy.model._numpy_programs["action_inputs"][1] is None
    np.testing.assert_array_equal(got, _torch(policy.model.action_inputs, OBS))


def test_sac_actors_and_dict_readers_translate_too() -> None:
    actor = SmallActor(BOX, gym.spaces.Box(-1, 1, (2,)), 2, {})
    np.testing.assert_allclose(actor.numpy_forward(OBS), _torch(lambda o: torch.cat(actor(o), -1), OBS),
                               rtol=1e-5, atol=1e-6)
    assert actor._numpy_programs["forward"][1] is not None
    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                             "mode": gym.spaces.Discrete(3)})
    model = DictParts(space, gym.spaces.Discrete(2), 2, {})
    rows = np.random.default_rng(1).standard_normal((5, 5)).astype(np.float32)
    np.testing.assert_allclose(model.numpy_action_inputs(rows), _torch(model.action_inputs, rows),
                               rtol=1e-5, atol=1e-6)


def test_opting_out_and_the_translator_alone() -> None:
    class Torchy(TwoHeads):
        numpy_acting = False

    model = Torchy(BOX, gym.spaces.Discrete(3), 3, {})
    model.numpy_action_inputs(OBS)
    assert model._numpy_programs["action_inputs"][1] is None
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    program = numpy_program(net, net.forward, input_size=4)
    assert program is not None
    np.testing.assert_allclose(program(OBS), _torch(net, OBS), rtol=1e-5, atol=1e-6)
    assert numpy_program(nn.LayerNorm(4), nn.LayerNorm(4).forward, input_size=4) is None
