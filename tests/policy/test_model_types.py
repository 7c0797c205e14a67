"""Issue 38: ``Policy.model`` has a declared type, and each policy class's declaration is true of
every network it builds (built-in, masked, recurrent, Keras, a user's), new or restored; so the
types mypy checks the learners against are the ones that run."""

from __future__ import annotations

import typing
from typing import Any

import gymnasium as gym
import pytest
import torch

from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.algorithms.sac.custom_model import TwinCritic
from cairn.algorithms.sac.keras_model import KerasTwinQ
from cairn.algorithms.sac.sac_policy import SACPolicy
from cairn.algorithms.td3.model import TD3ModelBase
from cairn.algorithms.td3.td3_policy import TD3Policy
from cairn.policy.policy import Policy

BOX = gym.spaces.Box(-1, 1, (3,))
MASKED = gym.spaces.Dict({"observation": BOX, "action_mask": gym.spaces.MultiBinary(2)})
SMALL = {"hidden": [8]}
KERAS = {**SMALL, "framework": "keras"}
ACTOR_CRITIC_CASES: list[tuple[gym.Space[Any], gym.Space[Any], dict[str, Any]]] = [
    (BOX, gym.spaces.Discrete(2), SMALL),
    (MASKED, gym.spaces.Discrete(2), SMALL),
    (BOX, gym.spaces.Box(-1, 1, (2,)), {**SMALL, "use_lstm": True, "lstm_cell_size": 4}),
    (BOX, gym.spaces.Discrete(2), KERAS),
    (BOX, gym.spaces.Discrete(2), {"custom_model": "tests.models.nets:TwoHeads",
                                   "custom_model_config": {"width": 4}}),
]
Q_CASES = [(BOX, SMALL), (MASKED, SMALL), (BOX, KERAS), (BOX, {"custom_model": "tests.models.nets:SmallQ"})]
BOX_ACTOR_MODELS = [SMALL, KERAS, {"custom_model": "tests.models.nets:SmallTD3Actor",
                                   "custom_q_model": "tests.models.nets:SmallCritic"}]
SAC_MODELS = [SMALL, KERAS, {"custom_model": "tests.models.nets:SmallActor",
                             "custom_q_model": "tests.models.nets:SmallCritic"}]


def declared(cls: type, name: str, **localns: Any) -> Any:
    """The type ``cls`` declares for its attribute ``name`` (a union stays a union)."""
    return typing.get_type_hints(cls, localns=localns)[name]


def new_and_restored(policy: Policy) -> list[Policy]:
    return [policy, Policy.from_state(policy.get_state())]


def test_a_policy_declares_its_model_a_torch_module():
    assert declared(Policy, "model") is torch.nn.Module


@pytest.mark.parametrize(("obs_space", "action_space", "model"), ACTOR_CRITIC_CASES)
def test_every_actor_critic_network_is_the_declared_module(obs_space, action_space, model):
    for policy in new_and_restored(Policy(obs_space, action_space, {"model": model}, seed=0)):
        assert isinstance(policy.model, declared(Policy, "model"))


@pytest.mark.parametrize(("obs_space", "model"), Q_CASES)
def test_every_dqn_network_and_its_target_are_of_the_declared_types(obs_space, model):
    policy = DQNPolicy(obs_space, gym.spaces.Discrete(2), {"model": model}, seed=0)
    for each in new_and_restored(policy):
        assert isinstance(each.model, declared(DQNPolicy, "model"))
        assert isinstance(each.target_model, declared(DQNPolicy, "target_model"))


@pytest.mark.parametrize("model", SAC_MODELS)
def test_every_sac_model_is_of_the_declared_type(model):
    policy = SACPolicy(BOX, gym.spaces.Box(-1, 1, (2,)), {"model": model}, seed=0)
    for each in new_and_restored(policy):
        assert isinstance(each.model, declared(SACPolicy, "model"))


@pytest.mark.parametrize("model", BOX_ACTOR_MODELS)
def test_every_td3_model_and_its_critics_are_of_the_declared_types(model):
    policy = TD3Policy(BOX, gym.spaces.Box(-1, 1, (2,)), {"model": model}, seed=0)
    critics = {"TwinCritic": TwinCritic, "KerasTwinQ": KerasTwinQ}  # named under TYPE_CHECKING only
    for each in new_and_restored(policy):
        assert isinstance(each.model, declared(TD3Policy, "model"))
        assert isinstance(each.model, TD3ModelBase)
        assert isinstance(each.model.critic, declared(TD3ModelBase, "critic", **critics))
        assert isinstance(each.model.target_critic, declared(TD3ModelBase, "target_critic", **critics))
