"""Remote env runners as Ray actors (the ``ray`` extra)."""

import numpy as np
import pytest

import cairn
from tests.helpers import small_ma_ppo

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_remote_runners_train_and_restore_locally(ray_cluster, tmp_path):
    config = small_ma_ppo(2, train_batch_size=128).env_runners(
        num_env_runners=2, observation_filter="MeanStdFilter")
    algo = config.build()
    result = algo.train()
    assert result["num_env_steps_sampled_lifetime"] == 128
    assert set(result["learners"]) == {"p0", "p1"}
    # Filter statistics gathered by the remote copies reach the learner's policies.
    assert algo.get_policy("p0").observation_filter.count > 0
    path = algo.save(tmp_path / "c")
    algo.stop()
    local = cairn.Algorithm.from_checkpoint(path, config_overrides={"num_env_runners": 0})
    assert local.env_runner_group.local is not None
    w_saved = cairn.Policy.from_checkpoint(path)["p0"].get_weights()
    w_local = local.get_policy("p0").get_weights()
    assert all(np.array_equal(w_saved[k], w_local[k]) for k in w_saved)
    assert local.train()["training_iteration"] == 2
