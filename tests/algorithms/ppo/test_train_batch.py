"""PPO learns from ``train_batch_size`` env steps per iteration, whatever the fragment length:
it samples rounds until they are in hand (RLlib's semantics), and learns once on all of them."""

from typing import Any

import numpy as np
import pytest

import cairn
from cairn.algorithms.reward_normalization import RewardNormalizer
from cairn.env_runner.sample_batch import SampleBatch
from cairn.policy_ids import DEFAULT_POLICY_ID
from tests.fault_injection import InjectedError


def _spy(algo: Any) -> tuple[list[dict[str, SampleBatch]], list[dict[str, Any]]]:
    """Record every sampling round (copied) and every learn call's inputs of ``algo``."""
    rounds: list[dict[str, SampleBatch]] = []
    learned: list[dict[str, Any]] = []
    sample, learn = algo._sample, algo.learn

    def recording_sample() -> dict[str, SampleBatch]:
        batches = sample()
        rounds.append({pid: SampleBatch({k: v.copy() for k, v in b.items()}) for pid, b in batches.items()})
        return batches

    def recording_learn(fn: Any, policy_id: str, **inputs: Any) -> Any:
        batch = SampleBatch({k: v.copy() for k, v in inputs["batch"].items()})
        rewards = np.array(inputs["rewards"], copy=True)
        learned.append({"policy_id": policy_id, "batch": batch, "rewards": rewards})
        return learn(fn, policy_id, **inputs)

    algo._sample, algo.learn = recording_sample, recording_learn
    return rounds, learned


@pytest.mark.parametrize(("fragment", "num_envs", "expected"), [(100, 1, 600), (64, 2, 512), (1000, 1, 1000)])
def test_an_iteration_samples_and_learns_from_train_batch_size_env_steps(fragment, num_envs, expected):
    # One fragment of 100 steps used to be the whole batch: train_batch_size=512 was ignored.
    algo = (cairn.PPOConfig().environment("CartPole-v1")
            .env_runners(rollout_fragment_length=fragment, num_envs_per_env_runner=num_envs)
            .training(train_batch_size=512, minibatch_size=64, num_epochs=1, model={"hidden": [8]})
            .debugging(seed=0).build())
    try:
        rounds, learned = _spy(algo)
        result = algo.train()
        assert result["num_env_steps_sampled_lifetime"] == expected
        assert result["num_env_steps_trained_lifetime"] == expected
        assert len(rounds) == expected // (fragment * num_envs)
        # The one update learned from every row of every round, in sampling order.
        assert len(learned) == 1
        joined = SampleBatch.concat([r[DEFAULT_POLICY_ID] for r in rounds])
        assert sorted(learned[0]["batch"]) == sorted(joined)
        for column, values in joined.items():
            np.testing.assert_array_equal(learned[0]["batch"][column], values, err_msg=column)
        assert result["learners"][DEFAULT_POLICY_ID]["num_grad_updates"] == -(-expected // 64)
        assert algo.get_policy().global_timestep == expected
    finally:
        algo.stop()


def test_rewards_are_normalised_round_by_round():
    """Two rounds of two environments: each env's rows are contiguous within a round, not across
    the joined batch; the normaliser must see the rounds one after the other, as it would see two
    iterations (normalising the joined batch at once restarts the second round's returns)."""
    algo = (cairn.PPOConfig().environment("CartPole-v1")
            .env_runners(rollout_fragment_length=16, num_envs_per_env_runner=2)
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1, normalize_rewards=True,
                      gamma=0.9, model={"hidden": [8]})
            .debugging(seed=0).build())
    try:
        rounds, learned = _spy(algo)
        algo.train()
        assert len(rounds) == 2
        reference = RewardNormalizer(gamma=0.9, clip=algo.config.reward_clip)
        expected = []
        for batches in rounds:
            batch = batches[DEFAULT_POLICY_ID]
            expected.append(reference.normalize(batch["rewards"], batch["terminateds"] | batch["truncateds"],
                                                batch["streams"], batch["firsts"]))
        np.testing.assert_array_equal(learned[0]["rewards"], np.concatenate(expected))
        live = algo.reward_normalizers[DEFAULT_POLICY_ID]
        assert (live.stats.get_state(), live.returns) == (reference.stats.get_state(), reference.returns)
    finally:
        algo.stop()


def test_multi_agent_counts_env_steps_not_agent_steps():
    """Two agents per env step: train_batch_size counts env steps, so 64 env steps are 128 rows."""
    from tests.helpers import small_ma_ppo

    algo = small_ma_ppo(train_batch_size=64, minibatch_size=32, num_epochs=1).env_runners(
        rollout_fragment_length=16).build()
    try:
        rounds, learned = _spy(algo)
        result = algo.train()
        assert len(rounds) == 4
        assert result["num_env_steps_sampled_lifetime"] == result["num_env_steps_trained_lifetime"] == 64
        assert result["num_agent_steps_sampled_lifetime"] == sum(len(b) for r in rounds for b in r.values())
        assert {d["policy_id"]: len(d["batch"]) for d in learned} == {
            pid: sum(len(r[pid]) for r in rounds if pid in r) for pid in ("p0", "p1")}
    finally:
        algo.stop()


class FailInRound(cairn.Callbacks):
    """Raises InjectedError in ``on_sample_end`` of the sampling round numbered ``FAIL_AT``."""

    calls = 0
    FAIL_AT = -1

    def on_sample_end(self, *, samples: Any, env_runner: Any) -> None:
        FailInRound.calls += 1
        if FailInRound.calls == FailInRound.FAIL_AT:
            raise InjectedError(f"round {FailInRound.calls}")


def test_a_round_that_raises_drops_the_iteration_and_training_goes_on(tmp_path):
    """Rounds 1-2 of the iteration completed, round 3 raised: the iteration does not count, the
    completed rounds stay counted as sampled (the envs stepped) and nothing is trained; the next
    train() samples a whole batch again, and a checkpoint saved then resumes exactly."""
    from tests.helpers import assert_trains_identically

    FailInRound.calls, FailInRound.FAIL_AT = 0, 4 + 3  # the first iteration's 4 rounds, then 2 more
    algo = (cairn.PPOConfig().environment("CartPole-v1").env_runners(rollout_fragment_length=16)
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1, model={"hidden": [8]})
            .callbacks(FailInRound).debugging(seed=0).build())
    try:
        algo.train()
        updates = algo.get_policy().num_grad_updates
        with pytest.raises(InjectedError, match="round 7"):
            algo.train()
        assert algo.iteration == 1
        assert algo.counters["num_env_steps_sampled_lifetime"] == 64 + 32
        assert algo.counters["num_env_steps_trained_lifetime"] == 64
        assert algo.get_policy().global_timestep == 96
        assert algo.get_policy().num_grad_updates == updates
        result = algo.train()
        assert result["training_iteration"] == 2
        assert result["num_env_steps_sampled_lifetime"] == 96 + 64
        assert result["num_env_steps_trained_lifetime"] == 128
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "after_fault"))
        try:
            assert_trains_identically(algo, restored)
        finally:
            restored.stop()
    finally:
        algo.stop()
