"""config.learners(...): fields, checks, the device check at build(), and the device learner
path (device copies of the driver's policies) run on the CPU."""

import numpy as np
import pytest
import torch

import cairn
from cairn.errors import ConfigError
from cairn.learners import LearnerGroup
from cairn.learners.actor import LearnerActor
from cairn.learners.sync import LOCAL_SYNC, LearnOutput, join_outputs, shard_bounds

NO_CUDA = "torch sees no CUDA device"


def small_ppo() -> cairn.PPOConfig:
    config = (cairn.PPOConfig().environment("CartPole-v1")
              .training(train_batch_size=128, minibatch_size=50, num_epochs=2, model={"hidden": [16, 16]})
              .debugging(seed=3))
    return config  # type: ignore[return-value]


def test_learners_settings_round_trip_through_to_dict() -> None:
    config = small_ppo().learners(num_learners=2, num_gpus_per_learner=0, num_cpus_per_learner=0.5)
    data = config.to_dict()
    assert (data["num_learners"], data["num_gpus_per_learner"], data["num_cpus_per_learner"]) == (2, 0, 0.5)
    again = cairn.PPOConfig.from_dict(data)
    assert (again.num_learners, again.num_cpus_per_learner) == (2, 0.5)
    defaults = cairn.PPOConfig().to_dict()
    keys = ("num_learners", "num_gpus_per_learner", "num_cpus_per_learner")
    assert tuple(defaults[k] for k in keys) == (0, 0, 1)


@pytest.mark.parametrize(("key", "value"), [
    ("num_learners", -1), ("num_learners", 1.5), ("num_gpus_per_learner", -1), ("num_cpus_per_learner", -0.5),
])
def test_negative_or_wrong_counts_are_config_errors(key: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"'{key}'"):
        cairn.PPOConfig().learners(**{key: value})
    data = {**cairn.PPOConfig().to_dict(), key: value}
    with pytest.raises(ConfigError, match=f"'{key}'"):
        cairn.PPOConfig.from_dict(data).validate()


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a CUDA device")
def test_a_gpu_where_torch_sees_none_is_a_config_error_at_build() -> None:
    config = small_ppo().learners(num_gpus_per_learner=1)
    config.validate()  # a config may name a GPU; building where there is none fails
    with pytest.raises(ConfigError, match=r"torch.cuda.is_available\(\)=False") as caught:
        config.build()
    assert "num_gpus_per_learner" in str(caught.value) and "mps" in str(caught.value)


@pytest.mark.parametrize(("n", "world"), [(50, 2), (51, 2), (1, 2), (7, 3), (64, 1)])
def test_shards_are_contiguous_and_cover_the_minibatch(n: int, world: int) -> None:
    bounds = [shard_bounds(n, rank, world) for rank in range(world)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1 and sizes[0] >= 1
    assert LOCAL_SYNC.shard(n) == slice(0, n)


def test_joined_outputs_sum_the_ranks_parts_and_keep_rank_0s_other_stats() -> None:
    """The learner group's join: each ``summed`` stat is the sum of the ranks' parts (a rank
    with no rows has none), every other stat is rank 0's (not summed, though every rank has
    it), the rows are joined in rank order; with no ``summed`` key rank 0's stats come back."""
    ranks = [LearnOutput({"loss": 0.75, "grad_norm": 2.0, "num_grad_updates": 4.0}, np.array([1.0, 2.0]),
                         summed=["loss"]),
             LearnOutput({"loss": 0.5, "grad_norm": 2.0, "num_grad_updates": 4.0}, np.array([3.0]),
                         summed=["loss"]),
             LearnOutput({"grad_norm": 2.0, "num_grad_updates": 4.0}, None, summed=[])]
    joined = join_outputs(ranks)
    assert joined.stats == {"loss": 1.25, "grad_norm": 2.0, "num_grad_updates": 4.0}
    np.testing.assert_array_equal(joined.rows, [1.0, 2.0, 3.0])
    assert ranks[0].stats["loss"] == 0.75  # rank 0's own output is left as it was
    lists = join_outputs([LearnOutput([0.25, 1.0], summed=range(2)), LearnOutput([], summed=range(0)),
                          LearnOutput([0.5, float("nan")], summed=range(2))])
    assert lists.stats[0] == 0.75 and np.isnan(lists.stats[1]) and lists.rows is None
    assert join_outputs([LearnOutput({"x": 1.0}), LearnOutput({"x": 5.0})]).stats == {"x": 1.0}


def test_device_learner_path_gives_the_same_weights_as_learning_in_place() -> None:
    # num_learners=0 with a GPU learns on device copies of the driver's policies: the state
    # goes out, the learn function runs on the copy, the state comes back. Run that path with
    # device="cpu": it must equal learning on the driver's policy itself, bit for bit.
    direct, copied = small_ppo().build(), small_ppo().build()
    try:
        group = copied.learner_group
        assert isinstance(group, LearnerGroup) and group.device_learner is None
        group.device_learner = LearnerActor(copied.config, device="cpu")
        for _ in range(2):
            direct.train()
            copied.train()
        want, got = direct.get_policy().get_state(), copied.get_policy().get_state()
        for name, value in want["weights"].items():
            np.testing.assert_array_equal(got["weights"][name], value, err_msg=name)
        for index, slots in want["optimizer"]["state"].items():
            for slot, value in slots.items():
                np.testing.assert_array_equal(got["optimizer"]["state"][index][slot], value)
        assert copied.get_policy().num_grad_updates == direct.get_policy().num_grad_updates > 0
    finally:
        direct.stop()
        copied.stop()


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.parametrize("config_class, lstm", [(cairn.PPOConfig, False), (cairn.PPOConfig, True),
                                                (cairn.SACConfig, False)])
def test_gpu_learner_trains_saves_and_restores_on_cpu_with_equal_weights(config_class, lstm, tmp_path):
    env = "CartPole-v1" if config_class is cairn.PPOConfig else "Pendulum-v1"
    model = {"hidden": [32, 32], **({"use_lstm": True, "lstm_cell_size": 16} if lstm else {})}
    config = (config_class().environment(env)
              .training(train_batch_size=256, minibatch_size=64, model=model)
              .learners(num_gpus_per_learner=1).debugging(seed=0))
    algo = config.build()
    try:
        assert algo.learner_group.device.type == "cuda"
        algo.train()
        path = algo.save(str(tmp_path / "ckpt"))
        weights = algo.get_policy().get_weights()
    finally:
        algo.stop()
    restored = cairn.Algorithm.from_checkpoint(path, config_overrides={"num_gpus_per_learner": 0})
    try:
        for name, value in weights.items():
            np.testing.assert_array_equal(restored.get_policy().get_weights()[name], value)
        restored.train()
    finally:
        restored.stop()


def test_distributed_sync_keeps_unreached_parameters_without_gradients() -> None:
    # One rank of a one-process gloo group: the all-reduce is the identity, so what remains to
    # check is the flat buffer's round trip and the "had a gradient" flags (a parameter no loss
    # reached must keep grad=None, or Adam would move it by its momentum alone).
    import socket

    import torch.distributed as dist

    from cairn.learners.sync import DistributedGradientSync

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        reached, unreached = torch.nn.Linear(3, 2), torch.nn.Linear(2, 2)
        reached(torch.randn(4, 3)).square().sum().backward()
        params = [*reached.parameters(), *unreached.parameters()]
        before = [None if p.grad is None else p.grad.clone() for p in params]
        sync = DistributedGradientSync(0, 1)
        sync.all_reduce_grads(params)
        for param, grad in zip(params, before, strict=True):
            if grad is None:
                assert param.grad is None
            else:
                assert param.grad is not None and torch.equal(param.grad, grad)
        assert sync.shard(5) == slice(0, 5)
    finally:
        dist.destroy_process_group()


def test_weights_from_read_only_arrays_load() -> None:
    # DDP learners hand their weights back as Ray's read-only arrays; loading them must write
    # the values (torch.from_numpy refuses to share a read-only array).
    import gymnasium as gym

    policy = cairn.Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    weights = {name: np.full_like(value, 0.5) for name, value in policy.get_weights().items()}
    for value in weights.values():
        value.flags.writeable = False
    policy.set_weights(weights)
    for name, value in policy.get_weights().items():
        np.testing.assert_array_equal(value, weights[name])


def test_distributed_sync_carries_a_non_finite_loss_flag_with_the_gradients() -> None:
    # Every rank must decide alike (a rank raising alone leaves its peers in the next collective):
    # the flag of a rank's non-finite loss travels in the same all-reduce as the gradients.
    import socket

    import torch.distributed as dist

    from cairn.errors import NonFiniteLossError
    from cairn.learners.sync import DistributedGradientSync

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        net = torch.nn.Linear(3, 2)
        optimizer = torch.optim.Adam(net.parameters(), lr=0.1)
        sync = DistributedGradientSync(0, 1)
        net(torch.randn(4, 3)).square().sum().backward()
        assert sync.reduce_and_check(list(net.parameters()), finite=True)
        assert not sync.reduce_and_check(list(net.parameters()), finite=False)
        before = [p.detach().clone() for p in net.parameters()]
        loss = net(torch.randn(4, 3)).square().sum() * float("nan")
        with pytest.raises(NonFiniteLossError, match="loss"):
            sync.optimizer_step(optimizer, loss, list(net.parameters()), grad_clip=None)
        assert all(torch.equal(p, q) for p, q in zip(net.parameters(), before, strict=True))
        sync.optimizer_step(optimizer, net(torch.randn(4, 3)).square().sum(), list(net.parameters()),
                            grad_clip=None)
        assert not any(torch.equal(p, q) for p, q in zip(net.parameters(), before, strict=True))
    finally:
        dist.destroy_process_group()


def test_rank_0_keeps_its_rendezvous_port_from_address_to_join():
    # The port used to be found free, released, and bound again by the process group later:
    # another process could take it in between (EADDRINUSE, seen once on a loaded machine). Rank
    # 0 now holds it open (its store listens there) from the moment it names it.
    import socket

    actor = LearnerActor(cairn.PPOConfig().environment("CartPole-v1"), rank=0, world_size=2, device="cpu")
    host, _, port = actor.address().removeprefix("tcp://").rpartition(":")
    with socket.socket() as other, pytest.raises(OSError):
        other.bind((host, int(port)))
