"""DDP learners on Ray (num_learners=2, gloo on CPU): PPO, IMPALA, APPO, DQN, SAC and TD3 train,
match a single learner after one iteration within rtol=1e-4, atol=1e-5, a checkpoint of 2 learners restores
with num_learners=0 and continues, a killed learner is a LearnerFailedError, and stop()
releases the learners' CPUs. One Ray session (tests/conftest.py's ray_cluster), 2 CPUs."""

import time

import numpy as np
import pytest
import torch

import cairn
from cairn.errors import ConfigError, LearnerFailedError
from cairn.learners import LearnOutput
from tests.helpers import readd_after_removal_matches_restore, small_ma_ppo
from tests.ray.actors import kill_and_wait

pytestmark = pytest.mark.slow

RTOL, ATOL = 1e-4, 1e-5


def ppo_config() -> cairn.PPOConfig:
    # Minibatches of 50, 50 and 30 rows: shards of 25/25 and 15/15.
    config = (cairn.PPOConfig().environment("CartPole-v1")
              .training(train_batch_size=130, minibatch_size=50, num_epochs=2, model={"hidden": [16, 16]})
              .env_runners(rollout_fragment_length=130).debugging(seed=3))
    return config  # type: ignore[return-value]


def dqn_config() -> cairn.DQNConfig:
    config = (cairn.DQNConfig().environment("CartPole-v1")
              .training(train_batch_size=64, minibatch_size=15, num_steps_sampled_before_learning_starts=32,
                        training_intensity=None, target_network_update_freq=16, update_backend="torch",
                        replay_buffer_config={"type": "prioritized"}, model={"hidden": [16]})
              .env_runners(rollout_fragment_length=4).debugging(seed=1))
    return config  # type: ignore[return-value]


def sac_config() -> cairn.SACConfig:
    config = (cairn.SACConfig().environment("Pendulum-v1")
              .training(train_batch_size=48, minibatch_size=16, num_steps_sampled_before_learning_starts=32,
                        grad_clip=1.0, model={"hidden": [16, 16]})
              .debugging(seed=2))
    return config  # type: ignore[return-value]


def td3_config() -> cairn.TD3Config:
    # 17 gradient steps (an odd count: the last has no actor update) on prioritized minibatches
    # of 15 rows: shards of 8 and 7.
    config = (cairn.TD3Config().environment("Pendulum-v1")
              .training(train_batch_size=48, minibatch_size=15, num_steps_sampled_before_learning_starts=32,
                        grad_clip=1.0, replay_buffer_config={"type": "prioritized"},
                        model={"hidden": [16, 16]})
              .debugging(seed=2))
    return config  # type: ignore[return-value]


def vtrace_config(algo: str) -> cairn.AlgorithmConfig:
    # V-trace over the whole 130 rows on each rank, minibatches of 50, 50 and 30: shards of
    # 25/25 and 15/15; APPO with the KL loss and a target update after the train batch.
    config_cls = cairn.APPOConfig if algo == "APPO" else cairn.IMPALAConfig
    config = (config_cls().environment("CartPole-v1")
              .training(train_batch_size=130, minibatch_size=50, num_epochs=2, model={"hidden": [16, 16]})
              .env_runners(rollout_fragment_length=130).debugging(seed=3))
    if algo == "APPO":
        config.training(use_kl_loss=True, kl_target=1e-4)
    return config


def assert_same_policy(got: cairn.Policy, want: cairn.Policy) -> None:
    got_state, want_state = got.get_state(), want.get_state()
    for name, value in want_state["weights"].items():
        np.testing.assert_allclose(got_state["weights"][name], value, rtol=RTOL, atol=ATOL, err_msg=name)
    assert got.num_grad_updates == want.num_grad_updates > 0


def free_cpus_become(ray, expected: float) -> bool:
    """Whether Ray's free CPUs reach ``expected`` (released actors give theirs back a little
    later) within 60 s: a wait for a state, generous for a loaded machine."""
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0.0) == expected:
            return True
        time.sleep(0.2)
    return False


def test_ppo_two_learners_match_one_and_checkpoint_restores_with_zero(ray_cluster, tmp_path) -> None:
    single = ppo_config().build()
    ddp = ppo_config().learners(num_learners=2).build()
    try:
        assert len(ddp.learner_group.remote_actors()) == 2
        assert ray_cluster.available_resources().get("CPU", 0.0) == 0.0  # each reserves 1 CPU
        single.train()
        result = ddp.train()
        assert np.isfinite(result["learners"]["default_policy"]["total_loss"])
        assert_same_policy(ddp.get_policy(), single.get_policy())
        path = ddp.save(str(tmp_path / "ddp"))
    finally:
        ddp.stop()
    assert free_cpus_become(ray_cluster, 2.0), ray_cluster.available_resources()
    restored = cairn.Algorithm.from_checkpoint(path, config_overrides={"num_learners": 0})
    try:
        assert restored.config.num_learners == 0 and restored.learner_group.num_remote_learners == 0
        single.train()
        assert restored.train()["training_iteration"] == 2
        assert_same_policy(restored.get_policy(), single.get_policy())
    finally:
        restored.stop()
        single.stop()


@pytest.mark.parametrize("algo", ["IMPALA", "APPO"])
def test_vtrace_two_learners_match_one(ray_cluster, algo) -> None:
    single = vtrace_config(algo).build()
    ddp = vtrace_config(algo).learners(num_learners=2).build()
    try:
        single.train()
        stats = ddp.train()["learners"]["default_policy"]
        assert np.isfinite(stats["total_loss"])
        assert_same_policy(ddp.get_policy(), single.get_policy())
        if algo == "APPO":  # the target network and the KL weight travelled back too
            got, want = ddp.get_policy(), single.get_policy()
            assert got.kl_coeff == want.kl_coeff and got.num_train_batches == want.num_train_batches == 1
            for name, value in want.get_state()["target"]["weights"].items():
                np.testing.assert_allclose(got.get_state()["target"]["weights"][name], value,
                                           rtol=RTOL, atol=ATOL, err_msg=name)
    finally:
        ddp.stop()
        single.stop()
    assert free_cpus_become(ray_cluster, 2.0)


@pytest.mark.parametrize("make_config", [dqn_config, sac_config, td3_config], ids=["dqn", "sac", "td3"])
def test_off_policy_two_learners_match_one(ray_cluster, make_config) -> None:
    single = make_config().build()
    try:
        single.train()
    finally:
        single.stop()
    ddp = make_config().learners(num_learners=2).build()
    try:
        stats = ddp.train()["learners"]["default_policy"]
        assert all(np.isfinite(v) for v in stats.values() if isinstance(v, float))
        assert_same_policy(ddp.get_policy(), single.get_policy())
        if hasattr(single, "replay_buffers"):
            want = single.replay_buffers["default_policy"]
            got = ddp.replay_buffers["default_policy"]
            if hasattr(want, "tree"):  # prioritized: the joined TD errors set the same priorities
                n = len(want)
                np.testing.assert_allclose(got.tree.leaves(n), want.tree.leaves(n), rtol=RTOL, atol=ATOL)
    finally:
        ddp.stop()
    assert free_cpus_become(ray_cluster, 2.0)


def fail_on_rank_1(config, policy, sync):
    """A learn function that raises on rank 1 while rank 0 waits for it in an all-reduce."""
    if sync.rank == 1:
        raise RuntimeError("learn function failed on rank 1")
    params = list(policy.model.parameters())
    for param in params:
        param.grad = torch.zeros_like(param)
    sync.all_reduce_grads(params)
    return LearnOutput({})


def test_failed_learners_are_learner_failed_errors_and_train_starts_new_learners(ray_cluster) -> None:
    algo = ppo_config().learners(num_learners=2).build()
    try:
        with pytest.raises(LearnerFailedError, match="rank 1 of 2") as caught:
            algo.learner_group.update(fail_on_rank_1, "default_policy", algo.get_policy())
        assert "learn function failed on rank 1" in str(caught.value)
        assert algo.learner_group.num_remote_learners == 0  # the group was shut down
        assert algo.train()["training_iteration"] == 1  # with a new group of learners
        before = algo.get_policy().get_weights()
        kill_and_wait(algo.learner_group.remote_actors()[1])
        with pytest.raises(LearnerFailedError, match="rank 1") as caught:
            algo.train()
        assert "call train() again" in str(caught.value)
        for name, value in algo.get_policy().get_weights().items():
            np.testing.assert_array_equal(value, before[name])  # the failed update left no trace
        assert algo.train()["training_iteration"] == 2  # the failed one did not count
        assert algo.learner_group.num_remote_learners == 2
        # A learner lost inside an iteration (its optimizer state not read back yet): stop()
        # says what is lost and still releases everything.
        algo.training_step()
        kill_and_wait(algo.learner_group.remote_actors()[0])
        with pytest.warns(RuntimeWarning, match="optimizer state since the last iteration"):
            algo.stop()
    finally:
        algo.stop()
    assert free_cpus_become(ray_cluster, 2.0)


def test_keras_policies_and_numpy_dqn_updates_are_refused_with_learners() -> None:
    # Refused by config validation, before Keras is imported or any actor starts.
    config = ppo_config().framework("keras").learners(num_learners=1)
    with pytest.raises(ConfigError, match="Keras policies"):
        config.validate()
    with pytest.raises(ConfigError, match="Keras policies"):
        ppo_config().multi_agent(policies={"default_policy": cairn.PolicySpec(
            config={"model": {"framework": "keras"}})}).learners(num_learners=2).validate()
    with pytest.raises(ConfigError, match="recurrent policies"):
        ppo_config().training(model={"use_lstm": True}).learners(num_learners=1).validate()
    with pytest.raises(ConfigError, match="update_backend='numpy'"):
        dqn_config().training(update_backend="numpy").learners(num_learners=1).build()


def test_learner_gpus_the_ray_cluster_lacks_are_a_config_error_at_build(ray_cluster) -> None:
    if ray_cluster.cluster_resources().get("GPU", 0.0):
        pytest.skip("the Ray cluster has GPUs")
    config = ppo_config().learners(num_learners=2, num_gpus_per_learner=1)
    with pytest.raises(ConfigError, match="needs 2 GPUs, but the Ray cluster has 0"):
        config.build()
    assert free_cpus_become(ray_cluster, 2.0)  # no actor was left holding a CPU


def test_a_users_recurrent_model_is_a_config_error_that_keeps_the_learners(ray_cluster) -> None:
    """A RecurrentActorCriticModel passes validate() (only use_lstm is known there); its first
    learn call with 2 learners is a ConfigError naming the policy and the fix, raised before
    the learners are sent anything, so they stay up."""
    from cairn.envs import make_cue_recall

    config = (cairn.PPOConfig().environment(make_cue_recall, env_config={"delay": 2})
              .training(train_batch_size=64, minibatch_size=32, num_epochs=1,
                        model={"custom_model": "tests.recurrent.nets:RecordingGRU", "max_seq_len": 3})
              .learners(num_learners=2))
    algo = config.build()
    try:
        actors = algo.learner_group.remote_actors()
        for _ in range(2):
            with pytest.raises(ConfigError, match=r"'default_policy' is recurrent.*num_learners=0"):
                algo.train()
            assert algo.learner_group.remote_actors() == actors
    finally:
        algo.stop()


def move_batchnorm_by_shard(config, policy, sync, *, obs):
    """A learn function whose training-mode forward moves a BatchNorm's running statistics by
    this rank's shard of ``obs`` only (as every learn function's forward does)."""
    with torch.no_grad():
        policy.model(torch.from_numpy(obs[sync.shard(len(obs))]))
    return LearnOutput({})


def report_buffers(config, policy, sync):
    """A learn function that returns this rank's buffers of every network, flat, as its rows."""
    return LearnOutput({}, np.concatenate([buffer.detach().cpu().numpy().astype(np.float64).ravel()
                                           for network in policy.networks() for buffer in network.buffers()]))


def test_every_rank_holds_rank_0s_batchnorm_statistics_after_a_learn_call(ray_cluster) -> None:
    """A user's BatchNorm moves its running statistics by each rank's shard; after the learn
    call every rank holds rank 0's (those the driver gets), so that a rank's later eval-mode
    targets read the statistics the driver has."""
    from tests.models.nets import NoisyHeads

    algo = ppo_config().training(model={"custom_model": NoisyHeads}).learners(num_learners=2).build()
    try:
        obs = (np.random.default_rng(0).normal(size=(9, 4)) * [1.0, 2.0, 3.0, 4.0]).astype(np.float32)
        algo.learn(move_batchnorm_by_shard, "default_policy", obs=obs)
        rows = algo.learn(report_buffers, "default_policy").rows
        assert rows is not None
        rank0, rank1 = np.split(rows, 2)
        np.testing.assert_array_equal(rank1, rank0)
        driver = algo.get_policy().get_weights()  # ends the loan: rank 0's buffers came back
        assert driver["trunk.1.num_batches_tracked"] == 1
        names = ("trunk.1.running_mean", "trunk.1.running_var", "trunk.1.num_batches_tracked")
        np.testing.assert_array_equal(
            np.concatenate([np.asarray(driver[name], np.float64).ravel() for name in names]), rank0)
    finally:
        algo.stop()


def vtrace_learn_reporting_target_buffers(config, policy, sync, *, batch, permutations):
    """IMPALA's learn function, returning as its rows this rank's buffers of the network at each
    eval-mode forward (V-trace's targets over the whole batch, once per epoch)."""
    from cairn.algorithms.impala.learn import vtrace_learn

    seen = []

    def record(model, args):
        if not model.training:
            seen.append(np.concatenate([buffer.detach().cpu().numpy().astype(np.float64).ravel()
                                        for buffer in model.buffers()]))

    hook = policy.model.register_forward_pre_hook(record)
    try:
        vtrace_learn(config, policy, sync, batch=batch, permutations=permutations, appo=False)
    finally:
        hook.remove()
    return LearnOutput({}, np.concatenate(seen))


def test_every_rank_computes_each_epochs_vtrace_targets_from_rank_0s_batchnorm_stats(ray_cluster) -> None:
    """IMPALA computes V-trace's targets again before each epoch, in eval mode, from the
    running statistics that the epoch before moved by each rank's shards: every rank reads
    rank 0's there too (those the driver gets), not its own, so that the ranks' targets are one
    minibatch's targets and not each rank's own."""
    from cairn.algorithms.impala.fragments import join_fragments
    from tests.models.nets import NoisyHeads

    config = vtrace_config("IMPALA").training(model={"custom_model": NoisyHeads}).learners(num_learners=2)
    algo = config.build()
    try:
        batch = join_fragments(algo.sample_fragments(), "default_policy")
        order = np.random.default_rng(0).permutation(len(batch))
        rows = algo.learn(vtrace_learn_reporting_target_buffers, "default_policy", batch=batch,
                          permutations=[order, order[::-1].copy()]).rows
        assert rows is not None
        rank0, rank1 = np.split(rows, 2)
        first, second = np.split(rank0, 2)
        assert not np.array_equal(second, first)  # the first epoch moved them
        np.testing.assert_array_equal(rank1, rank0)
    finally:
        algo.stop()


def _ranks_holding(algo: cairn.Algorithm, policy_id: str) -> list[int]:
    """The learner ranks that still hold a copy of ``policy_id`` (asked for its learned parts)."""
    import ray

    holding = []
    for rank, actor in enumerate(algo.learner_group.remote_actors()):
        try:
            ray.get(actor.learned.remote(policy_id))
            holding.append(rank)
        except ray.exceptions.RayTaskError as error:
            assert "holds no policy" in str(error)
    return holding


def test_a_removed_policy_leaves_the_learners_and_comes_back_new(ray_cluster, tmp_path) -> None:
    """remove_policy reaches the learners: every rank drops its copy of the policy, and a new
    policy under the same ID learns (on 2 learners) as in an algorithm restored from a checkpoint
    taken after the removal, reward normaliser and observation filter included."""
    config = (small_ma_ppo(2, normalize_rewards=True, model={"hidden": [16]})
              .env_runners(observation_filter="MeanStdFilter").learners(num_learners=2))

    def learners_dropped_p1(algo: cairn.Algorithm) -> None:
        assert _ranks_holding(algo, "p0") == [0, 1]  # the question tells held from dropped
        assert _ranks_holding(algo, "p1") == []

    readd_after_removal_matches_restore(config, str(tmp_path / "removed"), learners_dropped_p1)
    assert free_cpus_become(ray_cluster, 2.0)


def test_a_removal_a_learner_refuses_changes_nothing(ray_cluster) -> None:
    """A learner that dies as a removal reaches it: LearnerFailedError, and the algorithm keeps
    the policy (its training state included) and its config; once the failed group is gone the
    removal goes through."""
    algo = small_ma_ppo(2, model={"hidden": [16]}).learners(num_learners=2).build()
    try:
        algo.train()
        config, before = algo.config, algo.get_policy("p1").get_state()
        kill_and_wait(algo.learner_group.remote_actors()[1])
        with pytest.raises(LearnerFailedError, match="releasing policies"):
            algo.remove_policy("p1", policy_mapping_fn={"agent_0": "p0", "agent_1": "p0"})
        assert algo.config is config and set(algo.policies) == {"p0", "p1"}
        after = algo.get_policy("p1").get_state()
        for index, slots in before["optimizer"]["state"].items():
            np.testing.assert_array_equal(after["optimizer"]["state"][index]["exp_avg"], slots["exp_avg"])
        algo.remove_policy("p1", policy_mapping_fn={"agent_0": "p0", "agent_1": "p0"})
        assert set(algo.policies) == set(algo.config.policies) == {"p0"}
    finally:
        algo.stop()
    assert free_cpus_become(ray_cluster, 2.0)


def test_league_snapshots_leave_nothing_in_the_learners(ray_cluster) -> None:
    """A league's snapshots are frozen: no learner rank is ever lent one (not main_v2, in the
    pool for an iteration; it would be, were snapshots trained), so those that max_snapshots
    removes leave nothing there (removal goes through remove_policy, which would release them:
    the tests above)."""
    from tests.league.games import small_league

    algo = small_league(max_snapshots=2, self_play_fraction=0.0).learners(num_learners=2).build()
    try:
        for _ in range(3):  # main_v2 plays an iteration in the pool; main_v1 leaves it at the end
            algo.train()
        assert algo.league.pool == ["main_v2", "main_v3"]
        assert _ranks_holding(algo, "main") == [0, 1]
        for snapshot in ("main_v1", "main_v2", "main_v3"):
            assert _ranks_holding(algo, snapshot) == []
    finally:
        algo.stop()
    assert free_cpus_become(ray_cluster, 2.0)


def test_a_restore_while_loans_are_open_reaches_the_learners(ray_cluster, tmp_path) -> None:
    """A direct training_step() leaves the learners' loans open; a restore in place then must
    reach them: the next iteration learns from the checkpoint (as a 0-learner algorithm
    restored from it), not on from the learners' copies."""
    ddp = ppo_config().learners(num_learners=2).build()
    try:
        ddp.train()
        path = ddp.save(str(tmp_path / "ckpt"))
        ddp.training_step()
        assert ddp.learner_group.lent  # the loans are open
        ddp.restore(path)
        ddp.train()
    finally:
        ddp.stop()
    assert free_cpus_become(ray_cluster, 2.0), ray_cluster.available_resources()
    single = cairn.Algorithm.from_checkpoint(path, config_overrides={"num_learners": 0})
    try:
        single.train()
        assert_same_policy(ddp.get_policy(), single.get_policy())
    finally:
        single.stop()


def nan_loss_on_rank_1(config, policy, sync):
    """A learn step whose loss is NaN on rank 1 only (its shard held the NaN row)."""
    params = list(policy.model.parameters())
    loss = sum(p.square().sum() for p in params) * (float("nan") if sync.rank == 1 else 1e-3)
    sync.optimizer_step(policy.optimizer, loss, params, grad_clip=None)
    return LearnOutput({})


def test_a_nan_loss_on_one_rank_stops_every_rank_before_stepping(ray_cluster) -> None:
    # Every rank raises at the same step (the flag travels in the all-reduce), none steps, and
    # the driver keeps its weights: no rank goes on to a collective its peer never joins.
    algo = ppo_config().learners(num_learners=2).build()
    try:
        before = algo.get_policy().get_weights()
        with pytest.raises(LearnerFailedError, match="not finite") as caught:
            algo.learner_group.update(nan_loss_on_rank_1, "default_policy", algo.get_policy())
        assert "NonFiniteLossError" in str(caught.value)
        after = algo.get_policy().get_weights()
        assert all(np.array_equal(after[k], before[k]) for k in before)
        assert algo.train()["training_iteration"] == 1  # with a new group of learners
    finally:
        algo.stop()
    assert free_cpus_become(ray_cluster, 2.0)


def nan_gradient_on_rank_1(config, policy, sync):
    """A learn step whose loss is finite on every rank, but whose gradient is NaN on rank 1's
    shard only (``sqrt(|u - u|)``: 0 forward, NaN backward)."""
    params = list(policy.model.parameters())
    loss = sum(p.square().sum() for p in params) * 1e-3
    if sync.rank == 1:
        loss = loss + torch.sqrt((params[1] - params[1].detach()).abs()).sum()
    sync.optimizer_step(policy.optimizer, loss, params, grad_clip=None)
    return LearnOutput({})


def test_a_nan_gradient_on_one_rank_stops_every_rank_before_stepping(ray_cluster) -> None:
    # Every rank reads the same all-reduced (NaN) gradients, so every rank raises at the same
    # step and none steps; without grad_clip nothing read them and every rank's weights went NaN.
    algo = ppo_config().learners(num_learners=2).build()
    try:
        before = algo.get_policy().get_weights()
        with pytest.raises(LearnerFailedError, match="gradient norm") as caught:
            algo.learner_group.update(nan_gradient_on_rank_1, "default_policy", algo.get_policy())
        assert "NonFiniteLossError" in str(caught.value)
        after = algo.get_policy().get_weights()
        assert all(np.array_equal(after[k], before[k]) for k in before)
        assert algo.train()["training_iteration"] == 1  # with a new group of learners
    finally:
        algo.stop()
    assert free_cpus_become(ray_cluster, 2.0)


def frozen_ppo_config() -> cairn.PPOConfig:
    # Minibatches of 43, 43, 43 and 1 rows: shards of 22/21 (uneven, so that a plain mean of the
    # ranks' statistics is not the minibatch's) and 1/0 (rank 1 has no row of the last one).
    return ppo_config().training(minibatch_size=43, lr=1e-30, grad_clip=0.5)  # type: ignore[return-value]


def frozen_vtrace_config(algo: str) -> cairn.AlgorithmConfig:
    return vtrace_config(algo).training(minibatch_size=43, lr=1e-30)


def frozen_dqn_config() -> cairn.DQNConfig:
    # Prioritized minibatches of 15 rows (importance-weighted losses): shards of 8 and 7.
    return dqn_config().training(lr=1e-30)  # type: ignore[return-value]


def frozen_sac_config() -> cairn.SACConfig:
    return sac_config().training(minibatch_size=15, lr=1e-30)  # type: ignore[return-value]


def frozen_td3_config() -> cairn.TD3Config:
    return td3_config().training(lr=1e-30)  # type: ignore[return-value]


@pytest.mark.parametrize("make_config", [
    frozen_ppo_config, lambda: frozen_vtrace_config("IMPALA"), lambda: frozen_vtrace_config("APPO"),
    frozen_dqn_config, frozen_sac_config, frozen_td3_config,
], ids=["ppo", "impala", "appo", "dqn", "sac", "td3"])
def test_two_learners_report_the_statistics_of_one(ray_cluster, make_config) -> None:
    """The learner statistics of 2 learners are the whole minibatches', as one learner reports
    them, not rank 0's shards'. A learning rate too small to move a weight keeps every
    minibatch's statistics of the same weights on both layouts (and the same batches sampled),
    so they differ only by float reassociation: rtol=1e-5, and atol=1e-6 for the statistics
    that are near 0 (PPO's approx_kl at a ratio of 1, SAC's alpha loss at log alpha = 0)."""
    single = make_config().build()
    try:
        want = single.train()["learners"]["default_policy"]
    finally:
        single.stop()
    ddp = make_config().learners(num_learners=2).build()
    try:
        got = ddp.train()["learners"]["default_policy"]
    finally:
        ddp.stop()
    assert free_cpus_become(ray_cluster, 2.0)
    assert got.keys() == want.keys()
    assert want["num_grad_updates"] == got["num_grad_updates"] > 0
    assert {"total_loss", "loss", "critic_loss"} & want.keys(), sorted(want)  # the losses are there
    for name, value in want.items():
        if isinstance(value, float):
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, equal_nan=False, err_msg=name)
        else:
            assert got[name] == value, name
