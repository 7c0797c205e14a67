"""Each remote env runner's process seeds numpy's and torch's global generators of its own."""

import numpy as np
import pytest

from tests.helpers import small_ppo
from tests.ray.envs import global_random_creator

pytestmark = pytest.mark.ray


def _first_fragments(seed: int) -> np.ndarray:
    """The observations of two remote runners' first fragments of 8 steps (runner 1's, then
    runner 2's), from an env drawing them from the process's global generators."""
    algo = (small_ppo(train_batch_size=16, minibatch_size=8).environment(global_random_creator)
            .debugging(seed=seed).env_runners(num_env_runners=2, rollout_fragment_length=8).build())
    try:
        batches, _, steps = algo.env_runner_group.sample()
    finally:
        algo.stop()
    assert steps == 16
    return batches["default_policy"]["obs"]


def test_remote_runners_draw_apart_from_torchs_and_numpys_global_generators(ray_cluster):
    """A runner's actor is a new process: torch's global generator starts from one fixed seed in
    every process, so an env drawing from it (torch.rand(): much user code does) gave every
    remote runner the very same observations. Each runner's process now seeds numpy's and
    torch's global generators from config.seed's stream, keyed by its worker index."""
    obs = _first_fragments(0)
    first, second = obs[:8], obs[8:]
    for column in range(4):  # numpy's two draws, then torch's
        assert not np.array_equal(first[:, column], second[:, column]), column
    np.testing.assert_array_equal(_first_fragments(0), obs)  # seeded: reproducible
    assert not np.array_equal(_first_fragments(1), obs)
