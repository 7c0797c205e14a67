"""Module-level helpers for tests: importable (``tests.helpers``) so that checkpoints can store
references to them, and subprocess tests can use them."""

from __future__ import annotations

import os
from collections.abc import Callable

import cairn
from cairn.envs import MultiAgentCartPole


def learning_seed(default: int) -> int:
    """The seed of a learning test: ``default``, or ``CAIRN_LEARNING_SEED`` when set, so that a
    new CPU kind can be checked on other seeds without editing tests
    (``scripts/learning_seeds.sh`` runs every learning test on seeds 0-4)."""
    return int(os.environ.get("CAIRN_LEARNING_SEED", default))


def make_ma_cartpole(env_config: dict) -> MultiAgentCartPole:
    """A module-level (hence storable) creator for the multi-agent test env."""
    return MultiAgentCartPole(num_agents=int(env_config.get("num_agents", 2)))


def map_by_index(agent_id: str, **kwargs: object) -> str:
    """agent_<i> -> p<i>: a module-level, storable policy mapping."""
    return "p" + agent_id.rsplit("_", 1)[1]


def small_ppo(**training: object) -> cairn.PPOConfig:
    """CartPole PPO with batches small enough for unit tests."""
    defaults = {"train_batch_size": 128, "minibatch_size": 64, "num_epochs": 2}
    return (
        cairn.PPOConfig()
        .environment("CartPole-v1")
        .training(**{**defaults, **training})
        .debugging(seed=0)
    )


def small_cartpole(kind: str) -> cairn.AlgorithmConfig:
    """CartPole PPO or DQN (``kind``: "ppo", "dqn") with batches of 64, minibatches of 32 and
    seed 0; DQN learns from its 32nd step on (the non-finite state tests')."""
    config = cairn.PPOConfig() if kind == "ppo" else cairn.DQNConfig().training(
        num_steps_sampled_before_learning_starts=32)
    return (config.environment("CartPole-v1").training(train_batch_size=64, minibatch_size=32)
            .debugging(seed=0))


def trained_cartpole(kind: str, iterations: int) -> cairn.Algorithm:
    """:func:`small_cartpole` built and trained ``iterations`` times, its optimizer holding
    moments (DQN learns from its second iteration on)."""
    algo = small_cartpole(kind).build()
    for _ in range(iterations):
        algo.train()
    assert algo.get_policy().optimizer.state  # the optimizer has moments to spoil
    return algo


def small_ma_ppo(num_agents: int = 2, **training: object) -> cairn.PPOConfig:
    """Multi-agent CartPole PPO, one policy per agent (p0, p1, ...)."""
    defaults = {"train_batch_size": 128, "minibatch_size": 64, "num_epochs": 2}
    config = (
        cairn.PPOConfig()
        .environment(make_ma_cartpole, env_config={"num_agents": num_agents})
        .training(**{**defaults, **training})
        .multi_agent(policies={f"p{i}" for i in range(num_agents)}, policy_mapping_fn=map_by_index)
        .debugging(seed=0)
    )
    return config


def weights_digest(algo: cairn.Algorithm) -> str:
    """A hash of every policy's weights, to compare runs across processes bit for bit."""
    import hashlib

    digest = hashlib.sha256()
    for pid in sorted(algo.policies):
        for name, array in sorted(algo.get_policy(pid).get_weights().items()):
            digest.update(name.encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def assert_trains_identically(algo: cairn.Algorithm, restored: cairn.Algorithm, iterations: int = 2) -> None:
    """Exact resume: ``algo`` and its ``restored`` copy train ``iterations`` more times and end
    with the same weights (digest) and equal state trees."""
    for _ in range(iterations):
        algo.train()
        restored.train()
    assert weights_digest(restored) == weights_digest(algo)
    assert_trees_equal(algo.get_state(), restored.get_state())


def assert_resumes_exactly(algo: cairn.Algorithm, path: object, iterations: int = 2) -> None:
    """A checkpoint of ``algo`` saved at ``path`` now trains on as ``algo`` does
    (:func:`assert_trains_identically`); the restored copy is stopped afterwards."""
    restored = cairn.Algorithm.from_checkpoint(algo.save(path))
    try:
        assert_trains_identically(algo, restored, iterations=iterations)
    finally:
        restored.stop()


def assert_trees_equal(a: object, b: object, path: str = "state") -> None:
    """Two state trees are equal: the same keys, types, array dtypes, shapes and values
    (NaN equal to NaN); the message names the first path that differs."""
    import numpy as np

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), f"{path}: {type(a)} vs {type(b)}"
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{path}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), f"{path}: values differ"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys {set(a) ^ set(b or {})} differ"
        for key in a:
            assert_trees_equal(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{path}: {a!r:.80} vs {b!r:.80}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_trees_equal(x, y, f"{path}[{i}]")
    else:
        same_nan = isinstance(a, float) and isinstance(b, float) and a != a and b != b
        assert type(a) is type(b) and (a == b or same_nan), f"{path}: {a!r} vs {b!r}"


def policy_checkpoint(policy: cairn.Policy, path: object, *, export_native: bool = False) -> str:
    """Write ``policy`` as a Policy checkpoint at ``path`` and return the path, as a str."""
    policy.export_checkpoint(path, export_native_model_files=export_native)  # type: ignore[arg-type]
    return str(path)


def small_ma_dqn() -> cairn.DQNConfig:
    """Multi-agent CartPole DQN (p0, p1) that learns from its first round, keeping its replay
    buffers in checkpoints."""
    config = (
        cairn.DQNConfig()
        .environment(make_ma_cartpole, env_config={"num_agents": 2})
        .training(train_batch_size=32, minibatch_size=16, num_steps_sampled_before_learning_starts=16,
                  target_network_update_freq=32, model={"hidden": [16]})
        .env_runners(rollout_fragment_length=8)
        .checkpointing(store_replay_buffer=True)
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=map_by_index)
        .debugging(seed=0)
    )
    return config  # type: ignore[return-value]


def small_ma_sac() -> cairn.SACConfig:
    """Two independent Pendulums, SAC policies p0 and p1, that learn from the first round and
    hold n-step rows back across fragments (n_step=2), keeping replay in checkpoints."""
    return _small_ma_box(cairn.SACConfig())  # type: ignore[return-value]


def small_ma_td3() -> cairn.TD3Config:
    """As :func:`small_ma_sac` for TD3, with a replay ratio (``training_intensity``) whose
    fractional credit carries over between rounds, and the actor updated every 2nd step."""
    config = _small_ma_box(cairn.TD3Config()).training(training_intensity=5.0, policy_delay=2)
    return config  # type: ignore[return-value]


def _small_ma_box(config: cairn.AlgorithmConfig) -> cairn.AlgorithmConfig:
    # Imported here: it pulls in PettingZoo, which most users of these helpers never need.
    from tests.algorithms.sac.multi_agent_pendulum import make_ma_pendulum

    return (
        config.environment(make_ma_pendulum, env_config={"num_agents": 2})
        .training(train_batch_size=24, minibatch_size=8, num_steps_sampled_before_learning_starts=8,
                  train_freq=3, n_step=2, model={"hidden": [8]}, replay_buffer_config={"capacity": 200})
        .checkpointing(store_replay_buffer=True)
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=map_by_index)
        .debugging(seed=0)
    )


def assert_same_tree(got: object, want: object, path: str = "") -> None:
    """Two state trees (dicts, lists, numpy arrays, JSON values) are equal, bit for bit."""
    import numpy as np

    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), (path, sorted(got), sorted(want))
        for key in want:
            assert_same_tree(got[key], want[key], f"{path}/{key}")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same_tree(g, w, f"{path}/{i}")
    elif isinstance(want, np.ndarray):
        np.testing.assert_array_equal(got, want, err_msg=path)
    else:
        assert got == want or (got != got and want != want), (path, got, want)  # NaN equals NaN


def readd_after_removal_matches_restore(
    config: cairn.AlgorithmConfig, checkpoint: str,
    after_removal: Callable[[cairn.Algorithm], None] | None = None,
) -> None:
    """Train ``config`` (policies p0 and p1) twice, remove p1, save to ``checkpoint``, add a new
    p1 under the same ID and train once; then do the same from the checkpoint in a new
    algorithm, and check that both hold the same state (policies, algorithm extras,
    components, counters, env runners, recent episodes): a policy removed and added again
    starts as in an algorithm that never held it. The comparison alone cannot see what the
    checkpoint itself carries over (a replay credit is restored for any ID), so the first half
    also checks that the state after the removal names p1 nowhere in its extras and
    components. ``after_removal(algo)`` checks more once p1 is gone."""
    algo = config.build()
    try:
        algo.train()
        algo.train()
        algo.remove_policy("p1", policy_mapping_fn={"agent_0": "p0", "agent_1": "p0"})
        removed = algo.get_state()
        for part in ("extra", "components"):
            assert "p1" not in repr(removed[part]), (part, removed[part])
        if after_removal is not None:
            after_removal(algo)
        algo.save(checkpoint)
        new_p1 = cairn.Policy.from_spec(algo.get_policy("p0").spec, seed=5).get_state()
        algo.add_policy("p1", cairn.Policy.from_state(new_p1), policy_mapping_fn=map_by_index)
        algo.train()
        continued = algo.get_state()
    finally:
        algo.stop()
    restored = cairn.Algorithm.from_checkpoint(checkpoint)
    try:
        restored.add_policy("p1", cairn.Policy.from_state(new_p1), policy_mapping_fn=map_by_index)
        restored.train()
        again = restored.get_state()
    finally:
        restored.stop()
    for part in ("policies", "extra", "components", "counters", "env_runners", "recent_episodes"):
        assert_same_tree(again[part], continued[part], part)
