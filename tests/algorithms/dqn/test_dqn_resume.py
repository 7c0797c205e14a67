"""Exact resume: k iterations, save, a new process restores and trains k more, and the weights
equal those of 2k uninterrupted iterations, bit for bit (uniform and prioritized replay, with
either update backend)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cairn import DQNConfig
from cairn.algorithms.dqn import DQN, DQNPolicy

K = 3

RESUME_SCRIPT = """
import sys
import numpy as np
from cairn import Algorithm

algo = Algorithm.from_checkpoint(sys.argv[1])
for _ in range(int(sys.argv[3])):
    result = algo.train()
policy = algo.get_policy()
arrays = {"backend": np.array(result["learners"]["default_policy"]["update_backend"])}
arrays.update({"w/" + k: v for k, v in policy.get_weights().items()})
arrays.update({"t/" + k: v.numpy() for k, v in policy.target_model.state_dict().items()})
buffer = algo.replay_buffers["default_policy"]
arrays.update({"b/" + k: v[: len(buffer)] for k, v in buffer.columns.items()})
np.savez(sys.argv[2], **arrays)
"""


def make_algo(buffer_type: str, backend: str) -> DQN:
    config = (
        DQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, rollout_fragment_length=16)
        .training(train_batch_size=64, minibatch_size=16, num_steps_sampled_before_learning_starts=32,
                  training_intensity=4, target_network_update_freq=50, n_step=2,
                  model={"hidden": [16, 16]}, epsilon=[[0, 1.0], [300, 0.1]],
                  replay_buffer_config={"type": buffer_type, "capacity": 150}, update_backend=backend)
        .checkpointing(store_replay_buffer=True)
        .debugging(seed=7)
    )
    algo = config.build()
    assert isinstance(algo, DQN)
    return algo


def snapshot(algo: DQN, result: dict[str, Any]) -> dict[str, np.ndarray]:
    policy = algo.get_policy()
    assert isinstance(policy, DQNPolicy)
    arrays = {"backend": np.array(result["learners"]["default_policy"]["update_backend"])}
    arrays.update({"w/" + k: v for k, v in policy.get_weights().items()})
    arrays.update({"t/" + k: v.numpy() for k, v in policy.target_model.state_dict().items()})
    buffer = algo.replay_buffers["default_policy"]
    arrays.update({"b/" + k: v[: len(buffer)] for k, v in buffer.columns.items()})
    return arrays


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("buffer_type", ["uniform", "prioritized"])
def test_resume_in_a_new_process_is_bit_identical(buffer_type: str, backend: str, tmp_path: Path) -> None:
    straight = make_algo(buffer_type, backend)
    try:
        for _ in range(2 * K):
            result = straight.train()
        expected = snapshot(straight, result)
    finally:
        straight.stop()
    assert len(straight.replay_buffers["default_policy"]) == 150  # the ring has wrapped

    assert str(expected["backend"]) == backend
    first = make_algo(buffer_type, backend)
    try:
        for _ in range(K):
            result = first.train()
        halfway = snapshot(first, result)
        checkpoint = first.save(tmp_path / "ckpt")
    finally:
        first.stop()
    out = tmp_path / "resumed.npz"
    subprocess.run([sys.executable, "-c", RESUME_SCRIPT, checkpoint, str(out), str(K)],
                   check=True, timeout=120)
    with np.load(out) as resumed:
        assert sorted(resumed.files) == sorted(expected)
        for name, value in expected.items():
            np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    # The second half must have learned something, or the comparison would prove little.
    assert any(not np.array_equal(expected[k], v) for k, v in halfway.items() if k.startswith("w/"))
