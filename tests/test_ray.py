"""Remote env runners as Ray actors (the ``ray`` extra)."""

import time

import numpy as np
import pytest

import cairn
from cairn.checkpoint.reader import load_algorithm_state
from cairn.env_runner import group
from cairn.errors import CairnError
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


@pytest.mark.slow
def test_a_dead_runner_neither_blocks_save_nor_hangs_a_restore(ray_cluster, tmp_path, monkeypatch):
    algo = small_ma_ppo(2, train_batch_size=128).env_runners(num_env_runners=2).build()
    algo.train()
    earlier = algo.save(tmp_path / "earlier")
    algo.train()
    ray.kill(algo.env_runner_group.remote[0])

    # The driver holds policies, optimizers, counters and filters: the save goes through,
    # leaving out only the dead runner's state, and says so.
    with pytest.warns(RuntimeWarning, match=r"worker_index=1 gave no state: its actor died"):
        path = algo.save(tmp_path / "after_death")
    saved = load_algorithm_state(path)
    assert saved["iteration"] == 2
    assert [s["worker_index"] for s in saved["env_runners"]] == [2]
    with pytest.raises(CairnError, match=r"sample\(\) needs every remote env runner.*worker_index 1"):
        algo.train()

    # The live runner of `algo` still holds one of the cluster's two CPUs, so a second pair of
    # runners cannot start: a clear error within the startup timeout, not a hang.
    monkeypatch.setattr(group, "STARTUP_TIMEOUT_S", 3.0)
    start = time.monotonic()
    with pytest.raises(CairnError, match=r"Not enough free CPUs.*algo\.stop\(\)"):
        cairn.Algorithm.from_checkpoint(earlier)
    assert time.monotonic() - start < 60
    monkeypatch.undo()

    algo.stop()
    restored = cairn.Algorithm.from_checkpoint(path)
    assert restored.iteration == 2
    runner_1, runner_2 = restored.env_runner_group.get_state()
    assert runner_2["counters"] == saved["env_runners"][0]["counters"]  # its own state, by index
    assert runner_1["counters"]["num_env_steps_sampled"] == 0  # started fresh
    assert restored.train()["training_iteration"] == 3
    restored.stop()


def test_remote_runners_follow_an_added_policy_and_a_dead_one_is_named(ray_cluster):
    algo = small_ma_ppo(2, train_batch_size=128).env_runners(num_env_runners=2).build()
    try:
        algo.train()
        algo.add_policy("p2", algo.get_policy("p0").spec,
                        policy_mapping_fn={"agent_0": "p2", "agent_1": "p1"})
        before = algo.get_policy("p2").get_weights()
        result = algo.train()
        assert set(result["learners"]) == {"p1", "p2"}
        after = algo.get_policy("p2").get_weights()
        assert any(not np.array_equal(before[k], after[k]) for k in before)
        ray.kill(algo.env_runner_group.remote[1])
        with pytest.raises(CairnError, match=r"worker_index 2"):
            algo.remove_policy("p0", policy_mapping_fn={"agent_0": "p2", "agent_1": "p1"})
    finally:
        algo.stop()
