"""Exported recurrent policies: the torch program and ONNX take obs + state_in_* and return the
action + state_out_*; stepped through whole episodes they act as the policy does."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.envs import CueRecall, StatelessCartPole
from cairn.errors import ExportError
from tests.recurrent.nets import TinyGRU

LSTM = {"use_lstm": True, "lstm_cell_size": 8}


class ThreeStates(TinyGRU):
    """A state of three components, which exported models do not take."""

    def get_initial_state(self):
        return [torch.zeros(self.width)] * 3

    def forward(self, obs, state):
        logits, value, (h,) = super().forward(obs, state[:1])
        return logits, value, [h, state[1], state[2]]  # the other two carried unchanged


def run_episodes(policy, step_model, env, episodes=3):
    """Step ``policy`` and the exported model side by side through whole episodes of ``env``,
    each from its own state; the model's action drives the env; returns the steps compared."""
    steps = 0
    for episode in range(episodes):
        obs, _ = env.reset(seed=episode)
        state = policy.get_initial_state()
        feeds_state = [s[None] for s in state]
        done = False
        while not done:
            action, state = policy.compute_single_action(obs, state=state, explore=False)
            model_action, feeds_state = step_model(np.asarray(obs, np.float32)[None], feeds_state)
            np.testing.assert_array_equal(np.asarray(model_action[0]), np.asarray(action))
            for got, want in zip(feeds_state, state, strict=True):
                np.testing.assert_allclose(got[0], want, atol=1e-5, rtol=1e-5)
            obs, _, terminated, truncated, _ = env.step(model_action[0])
            done = terminated or truncated
            steps += 1
    return steps


def trained_policy(env_creator, model, steps=2):
    algo = (cairn.PPOConfig().environment(env_creator).env_runners(num_envs_per_env_runner=2)
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1, model=model).debugging(seed=0)
            .build())
    for _ in range(steps):
        algo.train()
    return algo.get_policy()


def test_onnx_and_torch_program_step_through_episodes_like_the_policy(tmp_path):
    pytest.importorskip("onnxruntime")
    import onnxruntime

    policy = trained_policy(lambda _cfg: StatelessCartPole(), {**LSTM, "hidden": [16]})
    policy.export_model(tmp_path / "pt")
    policy.export_model(tmp_path / "onnx", onnx=18)
    signature = json.loads((tmp_path / "onnx" / "signature.json").read_text())
    assert [s["name"] for s in signature["inputs"]] == ["obs", "state_in_h", "state_in_c"]
    assert [s["name"] for s in signature["outputs"]] == ["action", "logits", "state_out_h", "state_out_c"]
    assert signature["recurrent"]["state_shapes"] == [[16], [16]]  # the actor's and the critic's LSTM
    assert signature["recurrent"]["initial_state"] == [[0.0] * 16, [0.0] * 16]

    session = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "model.onnx"),
                                           providers=["CPUExecutionProvider"])

    def onnx_step(obs, state):
        feeds = {"obs": obs, "state_in_h": state[0], "state_in_c": state[1]}
        action, _logits, h, c = session.run(None, feeds)
        return action, [h, c]

    program = torch.export.load(str(tmp_path / "pt" / "model.pt2")).module()

    def torch_step(obs, state):
        with torch.inference_mode():
            action, _logits, h, c = program(torch.from_numpy(obs), *(torch.from_numpy(s) for s in state))
        return action.numpy(), [h.numpy(), c.numpy()]

    assert run_episodes(policy, onnx_step, StatelessCartPole()) > 20
    assert run_episodes(policy, torch_step, StatelessCartPole()) > 20


def test_box_actions_value_output_and_a_one_component_custom_model(tmp_path):
    pytest.importorskip("onnxruntime")
    import onnxruntime

    box = cairn.Policy(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (2,), np.float32),
                       {"model": LSTM}, seed=0)
    box.export_model(tmp_path / "box", onnx=18, extra_outputs=["value"])
    session = onnxruntime.InferenceSession(str(tmp_path / "box" / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == [
        "action", "mean", "log_std", "state_out_h", "state_out_c", "value"]

    gru = trained_policy(lambda _cfg: CueRecall(2),
                         {"custom_model": TinyGRU, "custom_model_config": {"width": 5}})
    gru.export_model(tmp_path / "gru", onnx=18)
    session = onnxruntime.InferenceSession(str(tmp_path / "gru" / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs", "state_in_h"]

    def onnx_step(obs, state):
        action, _logits, h = session.run(None, {"obs": obs, "state_in_h": state[0]})
        return action, [h]

    assert run_episodes(gru, onnx_step, CueRecall(2)) == 9



def test_a_recurrent_model_with_dropout_exports_and_acts_as_the_policy(tmp_path):
    """The export's parity check compares the exported model (eval mode) with the policy's
    outputs, which were taken with the model in training mode: a Dropout made the export fail as
    "not faithful". Both now run in eval mode, as the policy acts."""
    from tests.recurrent.nets import NoisyGRU

    policy = cairn.Policy(CueRecall(2).observation_space, CueRecall(2).action_space,
                          {"model": {"custom_model": NoisyGRU, "custom_model_config": {"width": 5}}}, seed=0)
    policy.model.train()  # a model the user put in training mode (it rests in eval mode)
    policy.export_model(tmp_path / "pt", extra_outputs=["value"])
    program = torch.export.load(str(tmp_path / "pt" / "model.pt2")).module()

    def torch_step(obs, state):
        with torch.inference_mode():
            action, _logits, h, _value = program(torch.from_numpy(obs), torch.from_numpy(state[0]))
        return action.numpy(), [h.numpy()]

    assert run_episodes(policy, torch_step, CueRecall(2)) == 9
    assert policy.model.training  # handed back in the mode it had

class DecaysItsState(TinyGRU):
    """Writes into its state input (legal torch; the policy acts on copies of the state)."""

    def forward(self, obs, state):
        h = state[0]
        h.mul_(0.5)
        out, h = self.gru(obs, h.unsqueeze(0))
        return self.pi(out), self.vf(out).squeeze(-1), [h.squeeze(0)]


def test_a_recurrent_model_that_writes_into_its_state_exports_and_acts_as_the_policy(tmp_path):
    """The export check's reference ran the model on the very state arrays the exported model was
    then fed: a model writing into its state halved them first, and the faithful export was
    refused as "chose different actions than the policy". The reference now runs on copies, as
    the policy acts."""
    policy = cairn.Policy(CueRecall(2).observation_space, CueRecall(2).action_space,
                          {"model": {"custom_model": DecaysItsState, "custom_model_config": {"width": 5}}},
                          seed=0)
    policy.export_model(tmp_path / "pt", extra_outputs=["value"])
    program = torch.export.load(str(tmp_path / "pt" / "model.pt2")).module()

    def torch_step(obs, state):
        with torch.inference_mode():
            action, _logits, h, _value = program(torch.from_numpy(obs), torch.from_numpy(state[0].copy()))
        return action.numpy(), [h.numpy()]

    assert run_episodes(policy, torch_step, CueRecall(2)) == 9


def test_native_model_files_in_checkpoints_and_a_state_of_three_components(tmp_path):
    policy = cairn.Policy(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2), {"model": LSTM},
                          seed=0)
    policy.export_checkpoint(tmp_path / "ckpt", export_native_model_files=True)
    assert (tmp_path / "ckpt" / "model" / "model.pt2").exists()
    restored = cairn.Policy.from_checkpoint(tmp_path / "ckpt")
    obs = np.zeros((1, 3), np.float32)
    state = [np.ones((1, 16), np.float32)] * 2
    a, sa = policy.compute_actions(obs, state=state, explore=False)
    b, sb = restored.compute_actions(obs, state=state, explore=False)
    assert a.tolist() == b.tolist() and all(np.array_equal(x, y) for x, y in zip(sa, sb))

    three = cairn.Policy(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2),
                         {"model": {"custom_model": ThreeStates}}, seed=0)
    with pytest.raises(ExportError, match="3 state components"):
        three.export_model(tmp_path / "three")
    from cairn.export.keras_saved_model import export_saved_model

    with pytest.raises(ExportError, match="recurrent policy .* has no Keras or SavedModel export"):
        export_saved_model(policy, tmp_path / "saved_model")
