"""Exact resume, checked in one process so that nothing but the checkpoint connects the runs:
train, save, restore; the two objects' states must be equal, and so must everything they
compute afterwards. Covers every observation filter, PPO and DQN, single- and multi-agent.

A restored object can hold equal values and still compute differently (issue 10: weights on
misaligned memory made MKL's matrix-vector product round differently on AVX-512), so the
restored arrays' memory alignment is checked as well: that check fails on any machine.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

import cairn
from cairn.alignment import ALIGNMENT, is_aligned
from cairn.checkpoint.safetensors_io import new_hasher, parse_safetensors, write_safetensors
from cairn.policy.filters import FILTER_NAMES
from tests.helpers import (
    assert_trains_identically,
    assert_trees_equal,
    make_ma_cartpole,
    map_by_index,
)

SMALL = {"train_batch_size": 128, "minibatch_size": 64}


def ppo(filter_name: str, multi_agent: bool) -> cairn.AlgorithmConfig:
    config = cairn.PPOConfig().training(**SMALL, num_epochs=2)
    return _common(config, filter_name, multi_agent)


def dqn(filter_name: str, multi_agent: bool) -> cairn.AlgorithmConfig:
    config = (
        cairn.DQNConfig()
        .training(**SMALL, num_steps_sampled_before_learning_starts=64, training_intensity=2,
                  target_network_update_freq=100, replay_buffer_config={"capacity": 2000})
        .checkpointing(store_replay_buffer=True)
    )
    return _common(config, filter_name, multi_agent)


def _common(config: cairn.AlgorithmConfig, filter_name: str, multi_agent: bool) -> cairn.AlgorithmConfig:
    config = config.env_runners(num_envs_per_env_runner=3, observation_filter=filter_name).debugging(seed=3)
    if multi_agent:
        return config.environment(make_ma_cartpole, env_config={"num_agents": 2}).multi_agent(
            policies={"p0", "p1"}, policy_mapping_fn=map_by_index)
    return config.environment("CartPole-v1")


CASES = [(make, f, ma) for make in (ppo, dqn) for f in FILTER_NAMES for ma in (False, True)]


@pytest.mark.parametrize(("make", "filter_name", "multi_agent"), CASES,
                         ids=[f"{m.__name__}-{f}-{'ma' if ma else 'sa'}" for m, f, ma in CASES])
def test_restored_object_has_equal_state_and_trains_identically(tmp_path, make, filter_name, multi_agent):
    algo = make(filter_name, multi_agent).build()
    for _ in range(2):
        algo.train()
    restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    assert_trees_equal(algo.get_state(), restored.get_state())
    for policy_id in algo.policies:
        check_storage_alignment(restored.get_policy(policy_id))
    assert_trains_identically(algo, restored)


def check_storage_alignment(policy: cairn.Policy) -> None:
    """Every parameter, buffer and optimizer-state tensor starts on a 64-byte boundary, as
    torch's allocator places the original's."""
    tensors = dict(policy.model.state_dict())
    names = {id(p): n for n, p in policy.model.named_parameters()}
    for param, slots in policy.optimizer.state.items():
        tensors.update({f"optimizer/{names[id(param)]}/{k}": v for k, v in slots.items()
                        if isinstance(v, torch.Tensor)})
    misaligned = [name for name, t in tensors.items() if t.numel() and t.data_ptr() % ALIGNMENT]
    assert not misaligned, f"restored tensors off a {ALIGNMENT}-byte boundary: {misaligned}"


def test_safetensors_reader_returns_aligned_arrays_even_from_unaligned_files():
    # Sizes chosen so that, packed back to back, most arrays would sit off any boundary.
    arrays = {"a": np.arange(3, dtype=np.float32), "b": np.ones((5, 7), np.float32),
              "c": np.arange(64, dtype=np.float64), "step": np.array(4.0, np.float32)}
    buffer = io.BytesIO()
    write_safetensors(buffer, arrays, new_hasher())
    written = buffer.getvalue()
    (header_len,) = np.frombuffer(written[:8], dtype="<u8")
    assert (8 + int(header_len)) % ALIGNMENT == 0, "data section should start on a boundary"
    # A file as another writer (or cairn 0.1.0) lays it out: 8-byte header padding only.
    header = written[8 : 8 + int(header_len)].rstrip(b" ")
    header += b" " * (-len(header) % 8)
    packed = len(header).to_bytes(8, "little") + header + written[8 + int(header_len):]
    for raw in (written, packed):
        storage = np.empty(len(raw) + 3, np.uint8)[3:]  # deliberately odd base address
        storage[:] = np.frombuffer(raw, np.uint8)
        parsed = parse_safetensors(storage.data)
        assert set(parsed) == set(arrays)
        for name, value in arrays.items():
            assert is_aligned(parsed[name]), name
            assert parsed[name].dtype == value.dtype and parsed[name].shape == value.shape
            np.testing.assert_array_equal(parsed[name], value)
