"""Users' own networks (cairn.models) export with parity, and untraceable ones fail clearly."""

from __future__ import annotations

import json
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
from cairn.errors import ExportError
from cairn.export import export_model, model_inputs
from cairn.numpy_acting import in_torch
from tests.models.nets import NoisyHeads, NoisyQ, SmallActor, SmallCritic, SmallQ, SmallTD3Actor, TwoHeads

BOX = gym.spaces.Box(-2.0, 2.0, (4,))


class Branchy(TwoHeads):
    """Python control flow on a tensor's value: torch.export cannot trace it."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(obs)
        if h.sum() > 0:
            h = h * 2
        return self.pi(h), self.vf(h).squeeze(-1)


class ReadsItem(TwoHeads):
    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(obs) * float(obs[0, 0].item())
        return self.pi(h), self.vf(h).squeeze(-1)


class CallsNumpy(TwoHeads):
    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(torch.from_numpy(np.tanh(obs.numpy())))
        return self.pi(h), self.vf(h).squeeze(-1)


class BranchyQ(SmallQ):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        q = self.net(obs)
        return q if q.sum() > 0 else -q


class BranchyActor(SmallActor):
    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = super().forward(obs)
        if mean.sum() > 0:
            mean = mean + 1
        return mean, log_std


class BranchyTD3Actor(SmallTD3Actor):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        u = super().forward(obs)
        return u + 1 if u.sum() > 0 else u


class ScalesItsInput(TwoHeads):
    """Writes into its input (``obs *= 2``: legal torch; the policy calls it on copies)."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        obs.mul_(2.0)
        h = self.trunk(obs)
        return self.pi(h), self.vf(h).squeeze(-1)


def custom_ppo(action_space: gym.Space[Any], model: type = TwoHeads, obs_space: gym.Space[Any] = BOX,
               **config: Any) -> cairn.Policy:
    return cairn.Policy(obs_space, action_space, {"model": {"custom_model": model}, **config}, seed=0)


def custom_dqn(model: type = SmallQ) -> DQNPolicy:
    return DQNPolicy(BOX, gym.spaces.Discrete(3, start=-1), {"model": {"custom_model": model}}, seed=0)


def custom_sac(actor: type = SmallActor) -> SACPolicy:
    return SACPolicy(BOX, gym.spaces.Box(-1.0, 3.0, (2,)),
                     {"model": {"custom_model": actor, "custom_q_model": SmallCritic}}, seed=0)


def custom_td3(actor: type = SmallTD3Actor) -> TD3Policy:
    return TD3Policy(BOX, gym.spaces.Box(-1.0, 3.0, (2,)),
                     {"model": {"custom_model": actor, "custom_q_model": SmallCritic},
                      "observation_filter": "MeanStdFilter"}, seed=0)


POLICIES = {
    "ppo-discrete": lambda: custom_ppo(gym.spaces.Discrete(3)),
    "ppo-box-filtered": lambda: custom_ppo(gym.spaces.Box(-1.0, 1.0, (2,)),
                                           observation_filter="MeanStdFilter"),
    "ppo-dict-obs": lambda: custom_ppo(gym.spaces.MultiDiscrete([2, 3]), obs_space=gym.spaces.Dict(
        {"x": BOX, "k": gym.spaces.Discrete(4)})),
    "dqn": custom_dqn,
    "sac": custom_sac,
    "td3-filtered": custom_td3,
}


def outputs_of(model_dir: Path, obs: np.ndarray) -> list[np.ndarray]:
    files = json.loads((model_dir / "signature.json").read_text())["files"]
    if "onnx" in files:
        import onnxruntime

        session = onnxruntime.InferenceSession(str(model_dir / files["onnx"]),
                                               providers=["CPUExecutionProvider"])
        return list(session.run(None, {"obs": obs}))
    program = torch.export.load(str(model_dir / files["torch"])).module()
    with torch.inference_mode():
        return [t.numpy() for t in program(torch.from_numpy(obs))]


@pytest.mark.parametrize("onnx", [None, 18])
@pytest.mark.parametrize("name", list(POLICIES))
def test_custom_models_export_with_parity(name: str, onnx: int | None, tmp_path: Path) -> None:
    if onnx is not None:
        pytest.importorskip("onnxruntime")
    policy = POLICIES[name]()
    if policy.observation_filter.name == "MeanStdFilter":
        space = policy.observation_space
        policy.process_observations([space.sample() for _ in range(200)], update=True)
    signature = export_model(policy, tmp_path, onnx=onnx)  # checked against the policy inside
    assert [spec["name"] for spec in signature["inputs"]] == ["obs"]

    space = policy.observation_space
    space.seed(7)
    observations = [space.sample() for _ in range(300)]
    outputs = outputs_of(tmp_path, model_inputs(space, observations))
    expected = policy.compute_actions(observations, explore=False)
    assert outputs[0].dtype == expected.dtype and outputs[0].shape == expected.shape
    if isinstance(policy.action_space, gym.spaces.Box):
        np.testing.assert_allclose(outputs[0], expected, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(outputs[0], expected)
    processed = policy.process_observations(observations, update=False)
    if isinstance(policy, DQNPolicy):
        np.testing.assert_allclose(outputs[1], policy.compute_q_values(observations), rtol=1e-5, atol=1e-5)
    elif isinstance(policy, TD3Policy):
        assert len(outputs) == 1  # the deterministic action alone
    else:
        inputs = policy.compute_action_inputs(processed)
        np.testing.assert_allclose(np.concatenate(outputs[1:], axis=1), inputs, rtol=1e-5, atol=1e-5)


UNTRACEABLE = {
    "Branchy": lambda: custom_ppo(gym.spaces.Discrete(3), Branchy),
    "ReadsItem": lambda: custom_ppo(gym.spaces.Discrete(3), ReadsItem),
    "CallsNumpy": lambda: custom_ppo(gym.spaces.Discrete(3), CallsNumpy),
    "BranchyQ": lambda: custom_dqn(BranchyQ),
    "BranchyActor": lambda: custom_sac(BranchyActor),
    "BranchyTD3Actor": lambda: custom_td3(BranchyTD3Actor),
    # A masked policy wraps the user's network: the error still names the user's class.
    "Branchy-masked": lambda: custom_ppo(gym.spaces.Discrete(3), Branchy, obs_space=gym.spaces.Dict(
        {"observation": BOX, "action_mask": gym.spaces.MultiBinary(3)})),
}


@pytest.mark.parametrize("onnx", [None, 18])
@pytest.mark.parametrize("name", list(UNTRACEABLE))
def test_an_untraceable_model_fails_naming_its_class_the_reason_and_the_fix(
    name: str, onnx: int | None, tmp_path: Path, capfd: pytest.CaptureFixture[str],
) -> None:
    if onnx is not None:
        pytest.importorskip("onnxruntime")
    policy = UNTRACEABLE[name]()
    network = name.split("-")[0]
    with pytest.raises(ExportError) as info:
        export_model(policy, tmp_path / "out", onnx=onnx)
    message = str(info.value)
    assert message.startswith(f"torch.export could not trace the model {network}: ")
    reason = message.split(": ", 1)[1]
    assert reason.split(":")[0] in {"GuardOnDataDependentSymNode", "RuntimeError", "UserError"}
    assert f"Make {network}'s forward traceable" in message
    assert "override the policy's export_graph()" in message
    assert "\n" not in message
    assert not (tmp_path / "out").exists()
    assert "def forward" not in capfd.readouterr().err  # torch's partial graph is kept off stderr


def test_a_model_with_dropout_and_batchnorm_exports_as_it_acts(tmp_path: Path) -> None:
    """The parity check's reference runs the model in eval mode, as acting and the export do:
    in training mode a Dropout made the export fail as "not faithful"."""
    policy = cairn.Policy(gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(3),
                          {"model": {"custom_model": NoisyHeads}}, seed=0)
    policy.model.train()  # a model the user put in training mode (it rests in eval mode)
    policy.export_model(tmp_path / "pt", extra_outputs=["value"])
    program = torch.export.load(str(tmp_path / "pt" / "model.pt2")).module()
    obs = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    with torch.inference_mode():
        action = program(torch.from_numpy(obs))[0].numpy()
    np.testing.assert_array_equal(action, policy.compute_actions(obs, explore=False))
    assert policy.model.training  # handed back in the mode it had


def test_a_q_model_with_dropout_gives_its_q_values_and_exports_as_it_acts(tmp_path: Path) -> None:
    """DQN's compute_q_values (the export check's reference for ``q_values``) runs the model in
    eval mode, as its greedy actions and the export do: in training mode a Dropout made it
    return other Q-values at each call and the export fail as "not faithful"."""
    policy = DQNPolicy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": NoisyQ}}, seed=0)
    obs = np.random.default_rng(0).uniform(-2.0, 2.0, (6, 4)).astype(np.float32)
    resting = policy.compute_q_values(obs)
    policy.model.train()  # a model the user put in training mode (it rests in eval mode)
    np.testing.assert_array_equal(policy.compute_q_values(obs), resting)
    np.testing.assert_array_equal(policy.compute_q_values(obs), resting)
    policy.export_model(tmp_path / "pt")
    program = torch.export.load(str(tmp_path / "pt" / "model.pt2")).module()
    with torch.inference_mode():
        action, q_values = (t.numpy() for t in program(torch.from_numpy(obs)))
    np.testing.assert_array_equal(action, policy.compute_actions(obs, explore=False))
    np.testing.assert_allclose(q_values, resting, rtol=1e-5, atol=1e-5)
    assert policy.model.training  # handed back in the mode it had


def test_the_exported_value_of_a_model_that_writes_into_its_input_is_its_value(tmp_path: Path) -> None:
    """The exported graph (and the check's reference) ran ``value`` on the tensor
    ``action_inputs`` had just written into: a model doubling its input gave the value of
    ``4 * obs`` as V(obs), and the check, sharing the mistake, passed it. Each now gets the
    processed observations as the policy's calls do (their own copy)."""
    policy = custom_ppo(gym.spaces.Discrete(3), model=ScalesItsInput)
    obs = np.random.default_rng(0).uniform(-2.0, 2.0, (6, 4)).astype(np.float32)
    processed = policy.process_observations(obs, update=False)
    expected_value = in_torch(policy.model.value, processed, policy.model)
    expected_logits = policy.compute_action_inputs(processed)
    policy.export_model(tmp_path / "pt", extra_outputs=["value"])
    program = torch.export.load(str(tmp_path / "pt" / "model.pt2")).module()
    with torch.inference_mode():
        action, logits, value = (t.numpy() for t in program(torch.from_numpy(obs.copy())))
    np.testing.assert_array_equal(action, policy.compute_actions(obs, explore=False))
    np.testing.assert_allclose(logits, expected_logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value, expected_value, rtol=1e-5, atol=1e-5)


class DoubleHeads(TwoHeads):
    """Computes its heads in float64 (a user's choice of precision; acting takes it as it is)."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, value = super().forward(obs)
        return logits.double(), value.double()


class DoubleQ(SmallQ):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return super().forward(obs).double()


class DoubleActor(SmallActor):
    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = super().forward(obs)
        return mean.double(), log_std.double()


FLOAT64_POLICIES = {
    "ppo-discrete": lambda: custom_ppo(gym.spaces.Discrete(3), DoubleHeads),
    "ppo-box": lambda: custom_ppo(gym.spaces.Box(-1.0, 1.0, (2,)), DoubleHeads),
    "dqn": lambda: custom_dqn(DoubleQ),
    "sac": lambda: custom_sac(DoubleActor),
}


@pytest.mark.parametrize("onnx", [None, 18])
@pytest.mark.parametrize("name", list(FLOAT64_POLICIES))
def test_a_float64_model_exports_the_dtypes_its_signature_declares(name: str, onnx: int | None,
                                                                   tmp_path: Path) -> None:
    """A network computing in float64 exported ``tensor(double)`` (and a torch program of
    float64) outputs while signature.json declared float32: a consumer allocating by the
    signature read garbage or failed. The export casts them to the declared dtypes, and its check
    against the policy (inside export_model) still passes, on the policy's values cast alike."""
    if onnx is not None:
        pytest.importorskip("onnxruntime")
    policy = FLOAT64_POLICIES[name]()
    extra = ["value"] if type(policy) is cairn.Policy else []  # PPO's optional output
    signature = export_model(policy, tmp_path, onnx=onnx, extra_outputs=extra)
    space = policy.observation_space
    space.seed(3)
    observations = [space.sample() for _ in range(50)]
    outputs = outputs_of(tmp_path, model_inputs(space, observations))
    declared = [np.dtype(spec["dtype"]) for spec in signature["outputs"]]
    assert [out.dtype for out in outputs] == declared
    assert np.dtype(np.float64) not in declared and len(outputs) == len(declared) > 1
    processed = policy.process_observations(observations, update=False)
    if isinstance(policy, DQNPolicy):
        scores = policy.compute_q_values(observations)
    else:
        scores = policy.compute_action_inputs(processed)
    assert scores.dtype == np.float64  # acting keeps the model's float64: the export casts
    width = scores.shape[1]
    got = np.concatenate([out.reshape(len(out), -1) for out in outputs[1:]], axis=1)
    np.testing.assert_allclose(got[:, :width], scores, rtol=1e-5, atol=1e-5)
