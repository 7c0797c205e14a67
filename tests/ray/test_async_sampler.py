"""Asynchronous sampling (cairn.env_runner.async_sampler) on a real local Ray: the runners
sample while the learner works, every fragment carries the weights version it was sampled
with, the queue delivers each fragment of a live runner exactly once, and a runner killed
mid-run is handled by the one fault-tolerance mechanism."""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
import ray

import cairn
from cairn.env_runner.async_sampler import RemoteFragment
from cairn.errors import EnvRunnerFailedError
from tests.algorithms.impala.small import small
from tests.helpers import small_ppo
from tests.ray.actors import kill_and_wait
from tests.ray.envs import held_marker, hold, make_flaky_cartpole

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def always(policy: cairn.Policy, action: int) -> None:
    """Weights under which ``policy`` picks ``action`` with probability 1 - e^-100."""
    weights = policy.get_weights()
    weights["action_head.weight"] = np.zeros_like(weights["action_head.weight"])
    bias = np.full_like(weights["action_head.bias"], -50.0)
    bias[action] = 50.0
    weights["action_head.bias"] = bias
    policy.set_weights(weights)


def steps_sampled(actor) -> int:
    return int(ray.get(actor.get_state.remote())["counters"]["num_env_steps_sampled"])


def assert_each_fragment_once(fragments: list[RemoteFragment], actors: dict) -> None:
    """Per runner (``actors``: worker_index -> actor), the fragments' steps add up to what the
    runner's own counter says it sampled (a lost fragment makes the sum smaller, one delivered
    twice makes it larger), and each fragment starts where the previous one ended."""
    by_runner: dict[int, list[RemoteFragment]] = defaultdict(list)
    for fragment in fragments:
        by_runner[fragment.worker_index].append(fragment)
    assert sorted(by_runner) == sorted(actors)
    for index, own in by_runner.items():
        ends = [int(f.result.position["counters"]["num_env_steps_sampled"]) for f in own]
        assert ends == list(np.cumsum([f.result.env_steps for f in own]))
        assert ends[-1] == steps_sampled(actors[index])


def test_fragments_carry_the_version_they_were_sampled_with_each_delivered_once(ray_cluster, monkeypatch):
    algo = small_ppo(train_batch_size=64).env_runners(num_env_runners=2).build()
    try:
        group, policy = algo.env_runner_group, algo.get_policy()
        puts = []
        real_put = ray.put
        monkeypatch.setattr(ray, "put", lambda value, **kw: puts.append(1) or real_put(value, **kw))
        group.broadcast_weights(0)
        seen = group.sample_async(min_fragments=2)
        lags = []
        for version in range(1, 7):
            # Each version acts one way only: a fragment tagged with the wrong version shows it.
            always(policy, version % 2)
            group.broadcast_weights(version)
            assert group.broadcast_version == version
            fragments = group.sample_async()
            lags += [version - f.weights_version for f in fragments]
            seen += fragments
        assert len(puts) == 7  # one object per broadcast, read by both runners
        assert group.num_fragments_dropped == 0
        seen += group.stop_async_sampling(wait=True)
        for fragment in seen:
            actions = fragment.result.batches["default_policy"]["actions"]
            if fragment.weights_version:
                assert (actions == fragment.weights_version % 2).all(), fragment.weights_version
        # Both runners had a request in flight at every broadcast: their next fragments lag.
        assert max(lags) >= 1 and {f.weights_version for f in seen} >= set(range(6))
        assert_each_fragment_once(seen, dict(enumerate(group.remote_actors(), start=1)))
        # Every fragment's steps were counted into the learner's policy, once.
        assert policy.global_timestep == sum(f.result.env_steps for f in seen)
    finally:
        algo.stop()


def test_a_runner_killed_mid_run_is_recreated_and_sampling_continues(ray_cluster, tmp_path):
    # Runner 1 delivers its first 32-step fragment, then blocks at its 41st step, inside its
    # second fragment, until it is killed: the kill lands mid-fragment however slow the
    # machine (ray.kill only sends it, and a fragment finished first would be delivered).
    hold_file = tmp_path / "hold"
    env_config = {"step_sleep_s": 0.005, "hold_file": str(hold_file), "hold_after_steps": 40}
    config = (cairn.PPOConfig().environment(make_flaky_cartpole, env_config=env_config)
              .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
              .env_runners(num_env_runners=2).debugging(seed=0))
    algo = config.build()
    try:
        group = algo.env_runner_group
        victim = 1
        old_actor = dict(enumerate(group.remote_actors(), start=1))[victim]
        pid = ray.get(old_actor.pid.remote())
        hold(hold_file, pid)
        group.broadcast_weights(0)
        seen = group.sample_async()
        # Its second request is sent once its first fragment is taken, and that call returns it:
        # once it is held, every fragment it finished is in `seen`.
        while not os.path.exists(held_marker(hold_file, pid)):
            seen += group.sample_async()
        assert any(f.worker_index == victim for f in seen)
        before = len(seen)
        kill_and_wait(old_actor)
        while not any(f.worker_index == victim for f in seen[before:]):
            seen += group.sample_async()
        assert group.num_fragments_dropped == 1  # the killed runner's request in flight
        assert group.health_metrics() == {"num_healthy_env_runners": 2, "num_env_runner_restarts": 1,
                                          "num_env_runner_fragments_dropped": 1}
        assert dict(enumerate(group.remote_actors(), start=1))[victim] is not old_actor
        seen += group.stop_async_sampling(wait=True)
        assert group.num_fragments_dropped == 1 and group.broadcast_version is None
        # The recreated runner went on from its last delivered fragment: nothing twice, no gap.
        assert_each_fragment_once(seen, dict(enumerate(group.remote_actors(), start=1)))
    finally:
        algo.stop()


def test_two_requests_in_flight_deliver_each_fragment_once_and_report_the_lag(ray_cluster, monkeypatch):
    # APPO with max_requests_in_flight_per_env_runner=2 and one runner: while the learner learns,
    # two requests wait on the runner (each acting with the weights current when it was sent).
    algo = (small("APPO", train_batch_size=80)
            .environment(make_flaky_cartpole, env_config={"step_sleep_s": 0.002})
            .env_runners(num_env_runners=1, max_requests_in_flight_per_env_runner=2).build())
    try:
        group = algo.env_runner_group
        taken: list[RemoteFragment] = []
        real_sample_async = group.sample_async

        def recording(**kwargs: Any) -> list[RemoteFragment]:
            fragments = real_sample_async(**kwargs)
            taken.extend(fragments)
            return fragments

        monkeypatch.setattr(group, "sample_async", recording)
        lags = []
        for _ in range(4):
            result = algo.train()
            assert group.num_requests_in_flight == 2  # topped up again after the last take
            learner = result["learners"]["default_policy"]
            lags.append((learner["policy_lag_mean"], learner["policy_lag_max"]))
        # The lag is reported from the fragments' versions: the requests queued before an update
        # act with older weights; two requests of one runner are at most a train batch ahead.
        assert lags[0] == (0.0, 0.0) and max(lag_max for _, lag_max in lags[1:]) >= 1
        assert all(0 <= mean <= lag_max <= 2 for mean, lag_max in lags)
        sampled = algo.counters["num_env_steps_sampled_lifetime"]
        assert sampled == sum(f.result.env_steps for f in taken)
        rest = group.stop_async_sampling(wait=True)
        assert len(rest) == 2 and group.num_fragments_dropped == 0  # the two in flight
        assert_each_fragment_once(taken + rest, dict(enumerate(group.remote_actors(), start=1)))
    finally:
        algo.stop()


@pytest.fixture
def two_nodes(request):
    """A Ray cluster of two nodes on this machine (``ray.cluster_utils.Cluster``), 1 CPU each,
    so that each of two runners sits on its own node; the session's Ray is brought back after."""
    from ray.cluster_utils import Cluster

    session_ray = ray.is_initialized()
    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        worker = cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        yield cluster, worker
    finally:
        ray.shutdown()
        cluster.shutdown()
        if session_ray:  # as tests/conftest.py's ray_cluster started it
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)


def test_losing_the_node_of_a_runner_mid_run_does_not_stop_sampling(two_nodes):
    cluster, worker = two_nodes
    config = (cairn.PPOConfig().environment(make_flaky_cartpole, env_config={"step_sleep_s": 0.01})
              .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
              .env_runners(num_env_runners=2).debugging(seed=0)
              # No CPU is left for a new runner: the group goes on with the other one.
              .fault_tolerance(restart_failed_env_runners=False, ignore_env_runner_failures=True))
    algo = config.build()
    try:
        group = algo.env_runner_group
        group.broadcast_weights(0)
        seen = group.sample_async(min_fragments=2)
        cluster.remove_node(worker)
        while group.health_metrics()["num_healthy_env_runners"] == 2:
            seen += group.sample_async()
        after = group.sample_async(min_fragments=3)
        (survivor,) = {f.worker_index for f in after}
        assert group.health_metrics()["num_healthy_env_runners"] == 1
        assert group.health_metrics()["num_env_runner_restarts"] == 0
        assert group.num_fragments_dropped >= 1
        seen += after + group.stop_async_sampling(wait=True)
        live = [f for f in seen if f.worker_index == survivor]
        assert_each_fragment_once(live, {survivor: group.remote_actors()[0]})
    finally:
        algo.stop()


@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
def test_losing_the_node_of_a_runner_inside_train_does_not_stop_training(two_nodes, monkeypatch, algo_name):
    """The node hosting one of two runners goes away inside ``train()``, while both sample
    asynchronously: that iteration finishes on the other runner's fragments, and so do the
    next ones (no CPU is left for a replacement, so the group goes on with one runner)."""
    cluster, worker = two_nodes
    algo = (small(algo_name, train_batch_size=80)
            .environment(make_flaky_cartpole, env_config={"step_sleep_s": 0.005})
            .env_runners(num_env_runners=2)
            .fault_tolerance(restart_failed_env_runners=False, ignore_env_runner_failures=True).build())
    try:
        group = algo.env_runner_group  # 1 CPU a node: one runner on each
        assert algo.train()["num_healthy_env_runners"] == 2
        real_sample_async = group.sample_async

        def remove_first(**kwargs: Any) -> list[RemoteFragment]:
            monkeypatch.setattr(group, "sample_async", real_sample_async)
            cluster.remove_node(worker)  # both runners have a request in flight now
            return real_sample_async(**kwargs)

        monkeypatch.setattr(group, "sample_async", remove_first)
        results = [algo.train() for _ in range(3)]
        assert [r["training_iteration"] for r in results] == [2, 3, 4] and algo.weights_version == 4
        assert results[-1]["num_healthy_env_runners"] == 1
        assert results[-1]["num_env_runner_restarts"] == 0
        assert results[-1]["num_env_steps_sampled_lifetime"] >= 4 * 80
        for result in results:
            assert np.isfinite(result["learners"]["default_policy"]["total_loss"])
        # Every step the learner counted came in a fragment it received, once.
        assert algo.get_policy().global_timestep == results[-1]["num_env_steps_sampled_lifetime"]
    finally:
        algo.stop()


def test_with_every_runner_gone_outside_sampling_get_raises_instead_of_waiting(ray_cluster):
    config = (small_ppo(train_batch_size=64).env_runners(num_env_runners=2)
              .fault_tolerance(restart_failed_env_runners=False, ignore_env_runner_failures=True))
    algo = config.build()
    try:
        group = algo.env_runner_group
        group.broadcast_weights(0)
        group.sample_async(min_fragments=2)
        for actor in group.remote_actors():
            kill_and_wait(actor)
        with pytest.warns(RuntimeWarning, match="gave no state") as warned:
            group.get_state()  # both fail here, outside the sampler, and are left out there
        assert len(warned) == 2
        # A fragment a runner finished before it was killed lives in the driver's object store
        # and may still be delivered (one per runner at most): then the next call raises.
        with pytest.raises(EnvRunnerFailedError, match="no healthy remote env runner left"):
            for _ in range(3):
                group.sample_async()
    finally:
        algo.stop()
