"""CNN policies in checkpoints: exact round trips, and specs whose conv layers would not fit
their weights refused before anything is built."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.errors import CheckpointFormatError
from tests.checkpoint.attacks import edit_json

SPACE = gym.spaces.Dict({"pixels": gym.spaces.Box(0, 255, (2, 16, 16), np.uint8),
                         "speed": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})
MODEL = {"hidden": [8], "conv_filters": [[4, 4, 2], [8, 3, 1]], "conv_dense": 16}


@pytest.mark.parametrize("policy_class", [cairn.Policy, DQNPolicy], ids=["ppo", "dqn"])
def test_cnn_policy_checkpoint_round_trip(policy_class, tmp_path: Path):
    policy = policy_class(SPACE, gym.spaces.Discrete(3), {"model": MODEL}, seed=0)
    policy.export_checkpoint(tmp_path / "ckpt")
    restored = cairn.Policy.from_checkpoint(tmp_path / "ckpt")
    assert (type(restored) is policy_class
            and restored.config["model"]["conv_filters"] == MODEL["conv_filters"])
    for name, array in policy.get_weights().items():
        np.testing.assert_array_equal(restored.get_weights()[name], array, err_msg=name)
    obs = [SPACE.sample() for _ in range(8)]
    np.testing.assert_array_equal(restored.compute_actions(obs, explore=False),
                                  policy.compute_actions(obs, explore=False))


@pytest.fixture(scope="module")
def cnn_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cnn") / "ckpt"
    cairn.Policy(SPACE, gym.spaces.Discrete(3), {"model": MODEL}, seed=0).export_checkpoint(path)
    return path


def _hostile(source: Path, dest: Path, key: str, value: object) -> Path:
    import shutil

    shutil.copytree(source, dest)

    def edit(state: dict) -> None:
        state["spec"]["config"]["model"][key] = value

    edit_json(dest, "policy_state.json", edit)  # re-hashed: the spec check, not the hash, refuses it
    return dest


@pytest.mark.parametrize(("key", "value", "match"), [
    ("conv_filters", [[1_000_000_000, 8, 4]], "cannot belong to the network"),
    ("conv_filters", [[64, 1, 1]] * 16, "cannot belong to the network"),
    ("conv_filters", [[4, 1, 1]], "cannot belong to the network"),  # 4x16x16 features -> dense 16
    ("conv_dense", 1 << 40, "cannot belong to the network"),
    ("conv_filters", [[4, 4, 2]] * 17, "model config is invalid.*conv_filters"),
    ("conv_filters", [["32", 8, 4]], "model config is invalid.*conv_filters"),
    ("conv_filters", [[4, 64, 1]], "model config is invalid.*leaves nothing"),
    ("conv_activation", "os.system", "model config is invalid.*conv_activation"),
], ids=["huge_channels", "many_layers", "huge_features", "huge_dense", "too_many_layers", "not_ints",
        "kernel_too_big", "activation"])
def test_hostile_conv_specs_are_refused_before_building(
    cnn_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key, value, match
):
    hostile = _hostile(cnn_checkpoint, tmp_path / "hostile", key, value)
    # Refused from the spec, nothing allocated: no layer is even constructed. (A time bound
    # said so before; the first restore in a process imports torch._dynamo, ~1.6 s on a quiet
    # machine, so a loaded one can cross it.)
    built: list[str] = []
    for layer in (torch.nn.Conv2d, torch.nn.Linear):
        real_init = layer.__init__

        def recording(self, *args, _real=real_init, _name=layer.__name__, **kwargs):
            built.append(_name)
            _real(self, *args, **kwargs)

        monkeypatch.setattr(layer, "__init__", recording)
    with pytest.raises(CheckpointFormatError, match=match):
        cairn.Policy.from_checkpoint(hostile)
    assert built == []
    cairn.Policy.from_checkpoint(cnn_checkpoint)
    assert "Conv2d" in built and "Linear" in built  # the recording sees what a restore builds
