"""Small league configs for the tests: connect four (pettingzoo.classic) with tiny networks."""

from __future__ import annotations

from typing import Any

import cairn


def make_connect_four(env_config: dict) -> Any:
    from pettingzoo.classic import connect_four_v3

    return connect_four_v3.env()


def small_league(**league: Any) -> cairn.AlgorithmConfig:
    """PPO on connect four, 128 env steps per iteration in 2 env copies, with ``league``."""
    settings = {"snapshot_every_iterations": 1, "max_snapshots": 2, "self_play_fraction": 0.25, **league}
    return (cairn.PPOConfig().environment(make_connect_four)
            .env_runners(num_envs_per_env_runner=2, observation_filter="NoFilter")
            .training(model={"hidden": [8]}, train_batch_size=128, minibatch_size=64, num_epochs=1)
            .league(**settings)
            .debugging(seed=0))


class CountingRandomLegal:
    """A scripted opponent (``"tests.league.games:CountingRandomLegal"``) that plays random legal
    moves and counts them in :attr:`moves` (class-wide: the env runner builds its own instance)."""

    moves = 0

    def __call__(self, observation: Any, action_mask: Any, rng: Any) -> int:
        from cairn.env_runner.scripted_opponents import random_legal

        CountingRandomLegal.moves += 1
        return random_legal(observation, action_mask, rng)
