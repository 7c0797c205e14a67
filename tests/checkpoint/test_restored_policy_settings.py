"""A restored policy keeps the settings it used when it was saved: a documented
``set_learning_rate`` (or ``set_exploration_noise``) survives ``save`` and
``Algorithm.from_checkpoint``, which resumes exactly. Before, the restore gave every policy the
stored algorithm config's values again (1e-3 where the run trained at 1e-4), silently. Only the
settings a restore's ``config_overrides`` names replace the policy's own."""

from __future__ import annotations

import cairn
from tests.helpers import assert_resumes_exactly, small_ma_sac, small_ma_td3, small_ppo


def _lrs(policy: cairn.Policy) -> tuple[float, list[float]]:
    return policy.config["lr"], [group["lr"] for group in policy.optimizer.param_groups]


def test_set_learning_rate_survives_a_save_and_restore_and_resumes_exactly(tmp_path):
    algo = small_ppo(lr=1e-3).build()
    try:
        algo.train()
        algo.get_policy().set_learning_rate(1e-4)
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "a"))
        try:
            assert _lrs(restored.get_policy()) == (1e-4, [1e-4])
        finally:
            restored.stop()
        assert_resumes_exactly(algo, tmp_path / "b", iterations=1)
    finally:
        algo.stop()


def test_an_lr_override_still_replaces_the_policys_own(tmp_path):
    algo = small_ppo(lr=1e-3).build()
    try:
        algo.get_policy().set_learning_rate(1e-4)
        path = algo.save(tmp_path / "a")
    finally:
        algo.stop()
    # Named, it wins, even where it equals the stored algorithm config's lr.
    for lr in (1e-3, 3e-5):
        restored = cairn.Algorithm.from_checkpoint(path, config_overrides={"lr": lr})
        try:
            assert _lrs(restored.get_policy()) == (lr, [lr])
        finally:
            restored.stop()


def test_sac_learning_rates_survive_a_save_and_restore(tmp_path):
    algo = small_ma_sac().build()
    try:
        algo.train()
        algo.get_policy("p0").set_learning_rate(1e-4)
        algo.get_policy("p1").set_group_learning_rates({"actor_lr": 2e-4})
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "a"))
        try:
            for pid in ("p0", "p1"):
                want = algo.get_policy(pid).group_learning_rates()
                assert restored.get_policy(pid).group_learning_rates() == want
            assert restored.get_policy("p0").group_learning_rates()["actor"] == 1e-4
            assert restored.get_policy("p1").group_learning_rates()["actor"] == 2e-4
        finally:
            restored.stop()
        overridden = cairn.Algorithm.from_checkpoint(tmp_path / "a", config_overrides={"critic_lr": 5e-5})
        try:  # the named rate replaces the policies' own; the others stay theirs
            assert overridden.get_policy("p0").group_learning_rates() == {
                "actor": 1e-4, "critic": 5e-5, "alpha": 1e-4}
        finally:
            overridden.stop()
    finally:
        algo.stop()


def test_td3_exploration_noise_survives_a_save_and_restore(tmp_path):
    algo = small_ma_td3().build()
    try:
        algo.train()
        algo.get_policy("p0").set_exploration_noise(0.3)
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "a"))
        try:
            assert restored.get_policy("p0").config["exploration_noise"] == 0.3
            assert restored.get_policy("p0").noisy_actions.noise_std == 0.3
        finally:
            restored.stop()
    finally:
        algo.stop()
