"""Learning rates changed on restore: ``config_overrides`` sets the actor's, the critics' and
alpha's rates of the restored optimizer, whose Adam moments stay (it trains on exactly as the
original would with those rates)."""

from __future__ import annotations

import numpy as np

import cairn
from tests.helpers import assert_trees_equal, weights_digest

NEW = {"actor_lr": 1e-3, "critic_lr": 5e-4, "alpha_lr": 2e-3}


def test_overridden_learning_rates_apply_to_the_restored_optimizer_with_its_moments(tmp_path):
    algo = (cairn.SACConfig().environment("Pendulum-v1")
            .training(train_batch_size=100, minibatch_size=16, model={"hidden": [8]},
                      num_steps_sampled_before_learning_starts=50)
            .checkpointing(store_replay_buffer=True).debugging(seed=0).build())
    try:
        algo.train()
        path = algo.save(tmp_path / "c")
        restored = cairn.Algorithm.from_checkpoint(path, config_overrides=NEW)
        policy = restored.get_policy()
        assert [g["lr"] for g in policy.optimizer.param_groups] == [1e-3, 5e-4, 2e-3]
        stored = algo.get_policy().get_state()["optimizer"]["state"]
        assert_trees_equal(stored, policy.get_state()["optimizer"]["state"])  # moments kept
        assert restored.config.actor_lr == 1e-3

        # The original, given the same rates by hand, trains on identically.
        algo.get_policy().set_group_learning_rates(NEW)
        algo.train()
        restored.train()
        assert weights_digest(restored) == weights_digest(algo)
        assert [g["lr"] for g in policy.optimizer.param_groups] == [1e-3, 5e-4, 2e-3]

        # ...and differently from a restore that keeps the stored rates.
        plain = cairn.Algorithm.from_checkpoint(path)
        plain.train()
        assert not np.array_equal(plain.get_policy().get_weights()["actor.mean_head.weight"],
                                  policy.get_weights()["actor.mean_head.weight"])
        plain.stop()
        restored.stop()
    finally:
        algo.stop()


def test_overridden_target_entropy_is_the_one_alpha_learns_towards(tmp_path):
    """``config_overrides={"target_entropy": ...}`` on restore sets the policy's target entropy
    (alpha's loss read the stored one while the algorithm's config showed the new one)."""
    algo = (cairn.SACConfig().environment("Pendulum-v1")
            .training(train_batch_size=100, minibatch_size=16, model={"hidden": [8]},
                      num_steps_sampled_before_learning_starts=50)
            .checkpointing(store_replay_buffer=True).debugging(seed=0).build())
    try:
        algo.train()
        path = algo.save(tmp_path / "c")
        restored = cairn.Algorithm.from_checkpoint(path, config_overrides={"target_entropy": -5.0})
        policy = restored.get_policy()
        assert restored.config.target_entropy == -5.0
        assert policy.target_entropy == -5.0 and policy.config["target_entropy"] == -5.0

        # The original, given the same target by hand, trains on identically (alpha included).
        algo.get_policy().config["target_entropy"] = -5.0
        algo.train()
        restored.train()
        assert weights_digest(restored) == weights_digest(algo)
        restored.stop()
    finally:
        algo.stop()
