"""gym_env_vectorize_mode="async" in a remote env runner: the actor owns its env children."""

import pytest

from tests.helpers import small_ppo, weights_digest

pytestmark = pytest.mark.ray


def test_remote_runner_with_async_envs_trains_as_with_sync_envs(ray_cluster):
    digests = {}
    for mode in ("sync", "async"):
        algo = small_ppo(train_batch_size=64).env_runners(
            num_env_runners=1, num_envs_per_env_runner=2, gym_env_vectorize_mode=mode).build()
        try:
            for _ in range(2):
                algo.train()
            digests[mode] = weights_digest(algo)
        finally:
            algo.stop()
    assert digests["async"] == digests["sync"]
