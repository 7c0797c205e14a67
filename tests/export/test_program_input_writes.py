"""An exported torch program never writes into the tensors it is given.

torch.export keeps a model's in-place writes to its inputs (``obs.mul_(2)``, legal torch): run
through the loaded program, a user's model that writes into its input changed the caller's
array (``torch.from_numpy(obs)``), while the policy itself always acts on a copy. The exported
module now copies the inputs of users' networks; cairn's own networks are proven (below, by the
traced program's own record of input mutations, read from the functionalized program: the
traced graph keeps ``mul_`` as it is and records nothing) never to write into theirs, and get no
copy. A module of a policy's own ``export_graph()`` that writes into its input is traced again on
copies."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.algorithms.sac.sac_policy import SACPolicy
from cairn.algorithms.td3.td3_policy import TD3Policy
from cairn.export.model_export import trace_policy
from cairn.policy.observation_path import may_write_into_inputs
from tests.models.nets import (
    ActorScalesInPlace,
    GRUScalesInPlace,
    PenaltyMask,
    QScalesInPlace,
    ScalesInPlace,
    SmallCritic,
    TD3ActorScalesInPlace,
)

BOX = gym.spaces.Box(-2.0, 2.0, (4,))
GRID = gym.spaces.Box(-2.0, 2.0, (2, 2))  # flattened by a view: still the caller's memory


def ppo(obs_space: gym.Space[Any] = BOX, **model: Any) -> cairn.Policy:
    return cairn.Policy(obs_space, gym.spaces.Discrete(3), {"model": model}, seed=0)


def dqn(**model: Any) -> DQNPolicy:
    return DQNPolicy(BOX, gym.spaces.Discrete(3), {"model": model}, seed=0)


def sac(**model: Any) -> SACPolicy:
    return SACPolicy(BOX, gym.spaces.Box(-1.0, 3.0, (2,)), {"model": model}, seed=0)


def td3(**model: Any) -> TD3Policy:
    return TD3Policy(BOX, gym.spaces.Box(-1.0, 3.0, (2,)), {"model": model}, seed=0)


USERS_MODELS = {
    "ppo": lambda: ppo(custom_model=ScalesInPlace),
    "ppo-2d-box": lambda: ppo(GRID, custom_model=ScalesInPlace),
    "dqn": lambda: dqn(custom_model=QScalesInPlace),
    "sac": lambda: sac(custom_model=ActorScalesInPlace, custom_q_model=SmallCritic),
    "td3": lambda: td3(custom_model=TD3ActorScalesInPlace, custom_q_model=SmallCritic),
}


def written_inputs(program: torch.export.ExportedProgram) -> dict[str, str]:
    """The inputs ``program`` writes into. The traced graph keeps an in-place op as it is, with
    an empty ``user_inputs_to_mutate``; the functionalized graph records every write."""
    return dict(program.run_decompositions({}).graph_signature.user_inputs_to_mutate)


@pytest.mark.parametrize("name", sorted(USERS_MODELS))
def test_a_program_of_a_model_writing_into_its_input_leaves_the_callers_array_alone(
        tmp_path: Path, name: str) -> None:
    policy = USERS_MODELS[name]()
    shape = policy.observation_space.shape
    obs = np.random.default_rng(0).uniform(-2.0, 2.0, (5, *shape)).astype(np.float32)
    before = obs.copy()
    policy.export_model(tmp_path / "pt")
    program = torch.export.load(str(tmp_path / "pt" / "model.pt2")).module()
    with torch.inference_mode():
        action = program(torch.from_numpy(obs))[0].numpy()
    np.testing.assert_array_equal(obs, before)
    np.testing.assert_array_equal(action, policy.compute_actions(before, explore=False))
    # A second call on the same array acts as the first (it read what the first left behind).
    with torch.inference_mode():
        again = program(torch.from_numpy(obs))[0].numpy()
    np.testing.assert_array_equal(again, action)


def test_a_recurrent_program_leaves_the_callers_observation_and_state_alone(tmp_path: Path) -> None:
    policy = cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": GRUScalesInPlace}}, seed=0)
    rng = np.random.default_rng(1)
    obs = rng.uniform(-2.0, 2.0, (3, 4)).astype(np.float32)
    h = rng.standard_normal((3, 8)).astype(np.float32)
    obs_before, h_before = obs.copy(), h.copy()
    policy.export_model(tmp_path / "pt")
    program = torch.export.load(str(tmp_path / "pt" / "model.pt2")).module()
    with torch.inference_mode():
        action, _logits, h_out = (t.numpy() for t in program(torch.from_numpy(obs), torch.from_numpy(h)))
    np.testing.assert_array_equal(obs, obs_before)
    np.testing.assert_array_equal(h, h_before)
    expected_action, (expected_h,) = policy.compute_actions(obs_before, state=[h_before], explore=False)
    np.testing.assert_array_equal(action, expected_action)
    np.testing.assert_allclose(h_out, expected_h, rtol=1e-5, atol=1e-5)


BUILT_IN = {
    "ppo": lambda: ppo(),
    "ppo-2d-box": lambda: ppo(GRID),
    "ppo-lstm": lambda: ppo(use_lstm=True),
    "dqn": lambda: dqn(),
    "sac": lambda: sac(),
    "td3": lambda: td3(),
}


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_built_in_networks_never_write_into_their_inputs_and_get_no_copy(name: str) -> None:
    """The proof behind giving cairn's own networks no copy: torch.export records every write
    into an input (``user_inputs_to_mutate``), and there is none (the graphs' ONNX nodes are
    those of before the copy existed)."""
    traced = trace_policy(BUILT_IN[name]())
    assert not traced.graph.module.observations.copy_input
    assert not written_inputs(traced.program)


def test_a_users_network_inside_a_cairn_class_still_gets_copies() -> None:
    """The decision reads every module inside the network: a cairn wrapper (the masked
    policies' MaskedActorCritic) around a user's network is not a built-in network."""
    built_in, users = ppo().model, ppo(custom_model=ScalesInPlace).model
    assert not may_write_into_inputs(built_in)
    assert may_write_into_inputs(users)
    assert may_write_into_inputs(torch.nn.Sequential(torch.nn.ReLU(inplace=True)))  # not cairn's
    assert may_write_into_inputs(None)
    built_in.add_module("extra", users)  # a cairn class holding a user's module
    assert may_write_into_inputs(built_in)


class PenaltyMaskScalesObs(PenaltyMask):
    """Writes into both of its inputs: the observations and the action mask."""

    def forward(self, obs, action_mask):
        obs.mul_(2.0)
        return super().forward(obs, action_mask)


def test_a_masked_program_leaves_the_callers_observation_and_mask_alone(tmp_path: Path) -> None:
    masked = gym.spaces.Dict({"observation": BOX, "action_mask": gym.spaces.MultiBinary(3)})
    policy = cairn.Policy(masked, gym.spaces.Discrete(3), {"model": {"custom_model": PenaltyMaskScalesObs}},
                          seed=0)
    rng = np.random.default_rng(2)
    obs = rng.uniform(-2.0, 2.0, (4, 4)).astype(np.float32)
    mask = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 1], [0, 0, 1]], np.float32)
    obs_before, mask_before = obs.copy(), mask.copy()
    policy.export_model(tmp_path / "pt")
    program = torch.export.load(str(tmp_path / "pt" / "model.pt2")).module()
    with torch.inference_mode():
        action = program(torch.from_numpy(obs), torch.from_numpy(mask))[0].numpy()
    np.testing.assert_array_equal(obs, obs_before)
    np.testing.assert_array_equal(mask, mask_before)
    expected = policy.compute_actions([{"observation": o, "action_mask": m.astype(np.int8)}
                                       for o, m in zip(obs_before, mask_before)], explore=False)
    np.testing.assert_array_equal(action, expected)


class HalvesAfterDoubling(torch.nn.Module):
    """A user's own export module (built without ObservationPath): doubles ``obs`` in place,
    then acts on half of it, which is what the policy computes, on its first call."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, obs: torch.Tensor) -> Any:
        obs.mul_(2)
        return self.inner(obs * 0.5)


class OwnExportModulePolicy(cairn.Policy):
    """A policy whose export_graph() hands the exporter a module of its own."""

    def export_graph(self) -> Any:
        graph = super().export_graph()
        return dataclasses.replace(graph, module=HalvesAfterDoubling(graph.module))


def test_a_users_own_export_module_writing_into_its_input_gets_a_copy(tmp_path: Path) -> None:
    """torch.export keeps the module's ``obs.mul_(2)`` as a write into the caller's tensor
    (``graph_signature.user_inputs_to_mutate``); the exporter's copy of the inputs was only
    ObservationPath's, which a user's own module does not use, so the program doubled the
    caller's array and acted on the doubled one at its next call. The exporter now gives such a
    module copies of the inputs it writes into: the program computes what the policy does."""
    policy = OwnExportModulePolicy(BOX, gym.spaces.Discrete(3), seed=0)
    assert not written_inputs(trace_policy(policy).program)
    obs = np.random.default_rng(0).uniform(-2.0, 2.0, (64, 4)).astype(np.float32)
    before = obs.copy()
    policy.export_model(tmp_path / "m")
    policy.export_model(tmp_path / "o", onnx=18)  # converted from the program with the copy
    program = torch.export.load(str(tmp_path / "m" / "model.pt2")).module()
    for _ in range(2):  # the second call reads what the first left in the array
        with torch.inference_mode():
            action = program(torch.from_numpy(obs))[0].numpy()
        np.testing.assert_array_equal(obs, before)
        np.testing.assert_array_equal(action, policy.compute_actions(before, explore=False))
