"""Module-level helpers for tests: importable (``tests.helpers``) so that checkpoints can store
references to them, and subprocess tests can use them."""

from __future__ import annotations

import cairn
from cairn.envs import MultiAgentCartPole


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
