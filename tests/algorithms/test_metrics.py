"""train()'s per-policy metrics name only the policies the algorithm has."""

from __future__ import annotations

import math

import numpy as np
import pytest

import cairn
from cairn.algorithms.metrics import episode_metrics
from tests.helpers import small_ma_dqn, small_ma_ppo, small_ma_sac, small_ma_td3


def _episode(ret: float, policy_returns: dict[str, list[float]]) -> dict:
    return {"return": ret, "length": 10, "policy_returns": policy_returns}


def test_episode_metrics_limits_per_policy_means_to_policy_ids():
    episodes = [_episode(3.0, {"p0": [1.0], "p1": [2.0]}), _episode(5.0, {"p0": [3.0], "p1": [2.0]})]
    everything = episode_metrics(episodes)
    assert everything["policy_episode_return_mean"] == {"p0": 2.0, "p1": 2.0}
    kept = episode_metrics(episodes, policy_ids={"p0"})
    assert kept["policy_episode_return_mean"] == {"p0": 2.0}
    assert kept["episode_return_mean"] == everything["episode_return_mean"] == 4.0
    assert math.isnan(episode_metrics([])["episode_return_mean"])
    assert (everything["episode_return_min"], everything["episode_return_max"]) == (3.0, 5.0)
    assert math.isnan(episode_metrics([])["episode_return_min"])
    assert math.isnan(episode_metrics([])["episode_return_max"])


def test_train_reports_rllibs_episode_return_min_and_max():
    """Issue 36: scripts expecting RLlib's keys got a KeyError (only the CLI's progress.csv had
    them); they span the same window of recent episodes as ``episode_return_mean``."""
    from tests.helpers import small_ppo

    algo = small_ppo().build()
    try:
        result = algo.train()
    finally:
        algo.stop()
    returns = [float(e["return"]) for e in algo.recent_episodes]
    assert result["num_episodes"] > 0
    assert (result["episode_return_min"], result["episode_return_max"]) == (min(returns), max(returns))


def _train_until_reported(algo: cairn.Algorithm, policy_id: str) -> None:
    for _ in range(20):
        if policy_id in algo.train()["policy_episode_return_mean"]:
            return
    raise AssertionError(f"no episode of {policy_id!r} finished in 20 iterations")


def test_subset_restore_reports_only_the_restored_policies(tmp_path):
    algo = small_ma_ppo(3).build()
    _train_until_reported(algo, "p1")
    _train_until_reported(algo, "p2")
    path = algo.save(tmp_path / "c")
    restored = cairn.Algorithm.from_checkpoint(
        path, policy_ids=["p0"], policy_mapping_fn=lambda aid, **kw: "p0")
    result = restored.train()
    assert set(result["policy_episode_return_mean"]) == {"p0"}
    assert result["num_episodes"] > 0  # the restored window still counts the episodes


def test_removed_policy_leaves_the_per_policy_metrics(ma_algo):
    _train_until_reported(ma_algo, "p2")
    ma_algo.remove_policy(
        "p2", policy_mapping_fn=lambda aid, **kw: "p0" if aid == "agent_2" else "p" + aid[-1])
    assert set(ma_algo.train()["policy_episode_return_mean"]) == {"p0", "p1"}


def test_train_reports_env_steps_per_s_as_the_cli_logs_it():
    """Issue 25, item 12: ``env_steps_per_s`` was in the CLI's results only."""
    from tests.helpers import small_ppo

    algo = small_ppo().build()
    try:
        result = algo.train()
    finally:
        algo.stop()
    steps = result["num_env_steps_sampled_lifetime"]
    assert result["env_steps_per_s"] == steps / result["time_this_iter_s"] > 0


def test_custom_metric_nan_of_one_episode_leaves_the_others_numbers():
    """A callback that has no value for an episode (``float("nan")``: no goal scored, no
    success to time) made the metric's mean, min and max nan over the whole window, for the
    next 100 episodes, which the CSV, TensorBoard and the loggers then leave out. As RLlib
    does, an episode's nan is no value: the others are aggregated; nan only when none has one."""
    episodes = [{**_episode(1.0, {}), "custom_metrics": {"t": value, "all_nan": math.nan}}
                for value in (math.nan, 2.0, 4.0, float("nan"))]
    metrics = episode_metrics(episodes)["custom_metrics"]
    assert (metrics["t_mean"], metrics["t_min"], metrics["t_max"]) == (3.0, 2.0, 4.0)
    assert all(math.isnan(metrics[f"all_nan_{stat}"]) for stat in ("mean", "min", "max"))


def test_a_bool_custom_metric_averages_to_a_rate():
    """``episode.custom_metrics["success"] = reached_goal`` (a bool, or numpy's) was dropped
    without a word; as in RLlib it counts 0 or 1, so its mean is the success rate."""
    flags = (True, np.bool_(False), False, np.bool_(True))
    episodes = [{**_episode(1.0, {}), "custom_metrics": {"success": flag}} for flag in flags]
    metrics = episode_metrics(episodes)["custom_metrics"]
    assert (metrics["success_mean"], metrics["success_min"], metrics["success_max"]) == (0.5, 0.0, 1.0)


def _ma_impala() -> cairn.IMPALAConfig:
    from tests.helpers import make_ma_cartpole, map_by_index

    return (cairn.IMPALAConfig().environment(make_ma_cartpole, env_config={"num_agents": 2})
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
            .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=map_by_index).debugging(seed=0))


@pytest.mark.parametrize("make", [lambda: small_ma_ppo(2), _ma_impala], ids=["ppo", "impala"])
def test_multi_agent_env_steps_trained_are_env_steps_not_agent_rows(make):
    """``num_env_steps_trained_lifetime`` summed the policies' batch rows, which are agent steps:
    with two agents acting at each step it counted every env step twice, more than were ever
    sampled. An on-policy learner trains on each sampled env step once."""
    algo = make().build()
    try:
        for _ in range(2):
            result = algo.train()
            assert result["num_agent_steps_sampled_lifetime"] > result["num_env_steps_sampled_lifetime"]
            assert result["num_env_steps_trained_lifetime"] == result["num_env_steps_sampled_lifetime"]
    finally:
        algo.stop()


@pytest.mark.parametrize("make", [small_ma_dqn, small_ma_sac, small_ma_td3], ids=["dqn", "sac", "td3"])
def test_multi_agent_off_policy_env_steps_trained_count_a_rounds_updates_once(make, monkeypatch):
    """``num_env_steps_trained_lifetime`` added ``minibatch_size`` per update of every policy:
    two policies learning from the same env steps counted each round's replay twice. A round's
    updates now count their minibatch rows once: as many minibatches as the policy that made
    the most updates in it (two symmetric policies count as one; DQN's CartPole agents, whose
    episodes end apart, make different numbers). An update that raises leaves the counter at
    the updates made before it."""
    algo = make().build()
    learn, rounds = algo.learn, [{}]
    sample = algo._sample
    calls, fail_at = [], [0]

    def marking_rounds():
        rounds.append({})
        return sample()

    def recording(fn, policy_id, **inputs):
        calls.append(policy_id)
        if len(calls) == fail_at[0]:
            raise RuntimeError("injected failure in a learner")
        output = learn(fn, policy_id, **inputs)
        rounds[-1][policy_id] = rounds[-1].get(policy_id, 0) + 1
        return output

    def assert_counts_each_rounds_minibatches_once():
        mb = algo.config.minibatch_size
        updates = {pid: algo.policies[pid].num_grad_updates for pid in ("p0", "p1")}
        assert updates == {pid: sum(r.get(pid, 0) for r in rounds) for pid in ("p0", "p1")}
        trained = algo.counters["num_env_steps_trained_lifetime"]
        assert trained == mb * sum(max(r.values(), default=0) for r in rounds)
        assert mb * max(updates.values()) <= trained < mb * sum(updates.values())

    monkeypatch.setattr(algo, "_sample", marking_rounds)
    monkeypatch.setattr(algo, "learn", recording)
    try:
        algo.train()
        assert_counts_each_rounds_minibatches_once()
        fail_at[0] = len(calls) + 3  # an update of the next iteration's first learning round
        with pytest.raises(RuntimeError, match="injected"):
            algo.train()
        assert_counts_each_rounds_minibatches_once()
        algo.train()
        assert_counts_each_rounds_minibatches_once()
    finally:
        algo.stop()
