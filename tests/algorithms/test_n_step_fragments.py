"""n-step transitions are whole across sample fragments (DQN and SAC share them): a window
that reaches the end of a fragment while its episode goes on waits for the next fragment of
the same trajectory, so sampling in short fragments stores what one long fragment would."""

from __future__ import annotations

import numpy as np
import pytest

import cairn
from cairn.algorithms.replay_buffers import NStepTransitions, replay_transitions
from cairn.env_runner.sample_batch import SampleBatch
from cairn.errors import NonFiniteSampleError
from tests.algorithms.constant_obs_envs import (
    make_flaky_constant_env,
    make_flaky_constant_parallel,
    make_nan_reward_constant_env,
)
from tests.algorithms.sac.multi_agent_pendulum import make_ma_pendulum
from tests.helpers import map_by_index

N = 3


def runner_batches(config: cairn.AlgorithmConfig, lengths: list[int]) -> list[dict[str, SampleBatch]]:
    """Fragments of ``lengths`` steps from the local env runner of a freshly built algorithm."""
    algo = config.build()
    try:
        return [algo.env_runner_group.local.sample(n) for n in lengths]
    finally:
        algo.stop()


def by_obs(rows: dict[str, np.ndarray]) -> dict[bytes, tuple[float, int, bytes, bool]]:
    """Transitions keyed by their observation (unique floats in these envs)."""
    return {rows["obs"][i].tobytes(): (float(rows["rewards"][i]), int(rows["n_steps"][i]),
                                       rows["next_obs"][i].tobytes(), bool(rows["terminateds"][i]))
            for i in range(len(rows["rewards"]))}


# Random actions throughout (epsilon 1, SAC's warm-up), so that the actions do not depend on
# the policies' step counters, which grow once per fragment.
RANDOM_SAC = {"model": {"hidden": [8]}, "num_steps_sampled_before_learning_starts": 10_000}
CONFIGS = {
    "dqn-cartpole-2envs": lambda: cairn.DQNConfig().environment("CartPole-v1")
    .training(epsilon=[[0, 1.0], [10_000, 1.0]]).env_runners(num_envs_per_env_runner=2).debugging(seed=1),
    "sac-pendulum-2envs": lambda: cairn.SACConfig().environment("Pendulum-v1")
    .training(**RANDOM_SAC).env_runners(num_envs_per_env_runner=2).debugging(seed=1),
    "sac-multi-agent": lambda: cairn.SACConfig().environment(make_ma_pendulum, env_config={"num_agents": 2})
    .training(**RANDOM_SAC).multi_agent(policies={"p0", "p1"}, policy_mapping_fn=map_by_index)
    .debugging(seed=1),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_short_fragments_store_the_transitions_of_one_long_fragment(name):
    # CartPole (and the multi-agent Pendulum) end episodes inside the 60 steps, where windows
    # are short by right; Pendulum's 200-step episodes run on, so every window is whole.
    (long,) = runner_batches(CONFIGS[name](), [60])
    short = runner_batches(CONFIGS[name](), [1, 2, 3, 1, 5, 4, 4] + [10] * 4)
    for pid, whole in long.items():
        assert "streams" in whole
        expected = by_obs(replay_transitions(whole, gamma=0.9, n_step=N))
        assembler = NStepTransitions(0.9, N)
        got: dict[bytes, tuple[float, int, bytes, bool]] = {}
        for fragment in short:
            got.update(by_obs(assembler.add(fragment[pid])))
        # The long fragment's own cut leaves its last N-1 rows per trajectory short; the
        # short fragments hold the same rows back, waiting, instead of storing them short.
        held = assembler.get_state()
        num_streams = len(np.unique(whole["streams"]))
        assert len(held["rewards"]) == (N - 1) * num_streams
        cut_short = {whole["obs"][i].tobytes() for i in range(len(whole["rewards"]))
                     if expected[whole["obs"][i].tobytes()][1] < N and not whole["terminateds"][i:i + N].any()
                     and not whole["truncateds"][i:i + N].any()}
        assert len(cut_short) == len(held["rewards"])
        assert set(got) == set(expected) - cut_short
        for key, value in got.items():
            assert value[1:] == expected[key][1:] and value[0] == pytest.approx(expected[key][0], rel=1e-6)
        if name == "sac-pendulum-2envs":
            assert {v[1] for v in got.values()} == {N}  # no episode ended: every window whole


def stream_batch(obs: list[float], rewards: list[float], *, stream: int = 7,
                 terminated_last: bool = False) -> SampleBatch:
    n = len(rewards)
    ends = np.zeros(n, dtype=bool)
    ends[-1] = True
    terms = np.zeros(n, dtype=bool)
    terms[-1] = terminated_last
    column = np.array(obs, dtype=np.float32)[:, None]
    return SampleBatch(obs=column[:-1], actions=np.zeros((n, 1), np.float32),
                       rewards=np.array(rewards, np.float32),
                       terminateds=terms, truncateds=np.zeros(n, dtype=bool), ends=ends, next_obs=column[1:],
                       streams=np.full(n, stream, dtype=np.int64))


def test_held_rows_complete_with_the_next_fragment_and_end_at_termination():
    assembler = NStepTransitions(0.5, 3)
    first = assembler.add(stream_batch([0, 1, 2], [1.0, 2.0]))
    assert len(first["rewards"]) == 0  # both windows run into the next fragment
    second = assembler.add(stream_batch([2, 3, 4, 5], [4.0, 8.0, 16.0], terminated_last=True))
    # r0 + .5 r1 + .25 r2 from obs 0; the last rows stop at the termination.
    assert second["obs"][:, 0].tolist() == [0, 1, 2, 3, 4]
    assert second["rewards"].tolist() == [1 + 1 + 1, 2 + 2 + 2, 4 + 4 + 4, 8 + 8, 16]
    assert second["n_steps"].tolist() == [3, 3, 3, 2, 1]
    assert second["next_obs"][:, 0].tolist() == [3, 4, 5, 5, 5]
    assert second["terminateds"].tolist() == [False, False, True, True, True]
    assert assembler.get_state() == {}


def test_held_rows_whose_trajectory_does_not_continue_are_stored_with_shorter_windows():
    assembler = NStepTransitions(0.5, 3)
    assembler.add(stream_batch([0, 1, 2], [1.0, 2.0]))
    # The same stream starts elsewhere (its env was reset): the held rows bootstrap from obs 2.
    rows = assembler.add(stream_batch([10, 11], [5.0], terminated_last=True))
    assert rows["obs"][:, 0].tolist() == [0, 1, 10]
    assert rows["rewards"].tolist() == [2.0, 2.0, 5.0]
    assert rows["n_steps"].tolist() == [2, 1, 1]
    assert rows["next_obs"][:, 0].tolist() == [2, 2, 11]


def test_held_rows_round_trip_through_their_state():
    assembler = NStepTransitions(0.5, 3)
    assembler.add(stream_batch([0, 1, 2], [1.0, 2.0], stream=1))
    assembler.add(stream_batch([5, 6], [3.0], stream=2))
    again = NStepTransitions(0.5, 3)
    again.set_state(assembler.get_state())
    nxt = [stream_batch([2, 3, 4], [4.0, 8.0], stream=1), stream_batch([6, 7], [1.0], stream=2)]
    for batch in nxt:
        a, b = assembler.add(batch), again.add(batch)
        assert {k: v.tolist() for k, v in a.items()} == {k: v.tolist() for k, v in b.items()}


def test_sac_with_n_step_longer_than_train_freq_stores_whole_windows():
    algo = (cairn.SACConfig().environment("Pendulum-v1")
            .training(n_step=3, train_freq=1, train_batch_size=50, minibatch_size=16, model={"hidden": [8]},
                      num_steps_sampled_before_learning_starts=20)
            .debugging(seed=0).build())
    try:
        algo.train()
        buffer = algo.replay_buffers["default_policy"]
        assert len(buffer) == 48  # 2 rows wait for step 51
        assert set(buffer.columns["n_steps"][:48].tolist()) == {3}
    finally:
        algo.stop()


@pytest.mark.parametrize("maker", [make_flaky_constant_env, make_flaky_constant_parallel],
                         ids=["single-agent", "parallel"])
def test_held_rows_never_join_the_episode_a_reset_after_an_error_began(maker):
    """After an error the runner's envs start new episodes. Here the new episode starts from
    the very observation the held rows ended with (it never changes), so equal observations
    prove nothing: on main the held rows of episode 0 were completed with episode 1's rewards
    (windows of 1 + .9 * 1 + .81 * 2 = 3.52 and 1 + .9 * 2 + .81 * 2 = 4.42). They end
    where episode 0 was cut instead, bootstrapping from its last observation."""
    config = (cairn.DQNConfig().environment(maker, env_config={"fail_at": 8})
              .training(n_step=N, gamma=0.9, epsilon=[[0, 1.0], [10_000, 1.0]]).debugging(seed=0))
    if maker is make_flaky_constant_parallel:
        config = config.multi_agent(policies={"p0", "p1"}, policy_mapping_fn={"a0": "p0", "a1": "p1"})
    algo = config.build()
    try:
        runner = algo.env_runner_group.local
        before = runner.sample(5)
        with pytest.raises(RuntimeError, match="flaky env"):
            runner.sample(5)  # raises at the env's 8th step: its envs start new episodes
        after = runner.sample(5)
    finally:
        algo.stop()
    for pid, batch in before.items():
        assert batch["firsts"].tolist() == [True, False, False, False, False]
        assert after[pid]["firsts"].tolist() == [True, False, False, False, False]
        assembler = NStepTransitions(0.9, N)
        rows = [assembler.add(batch), assembler.add(after[pid])]
        whole = 1 + 0.9 + 0.81
        # Episode 0 (pays 1): 3 whole windows, then its 2 held rows cut short at the reset;
        # episode 1 (pays 2): 3 whole windows, its last 2 rows held for the next fragment.
        assert np.concatenate([r["rewards"] for r in rows]) == pytest.approx(
            [whole] * 3 + [1.9, 1.0] + [2 * whole] * 3)
        assert np.concatenate([r["n_steps"] for r in rows]).tolist() == [3, 3, 3, 2, 1, 3, 3, 3]


@pytest.mark.parametrize("maker", [make_flaky_constant_env, make_flaky_constant_parallel],
                         ids=["single-agent", "parallel"])
def test_firsts_survive_a_checkpoint_between_the_fragments(maker, tmp_path):
    """A checkpoint saved after the error's reset holds episodes not yet stepped: the restored
    runner's first rows are episode starts. One saved mid-episode continues it."""
    config = (cairn.DQNConfig().environment(maker, env_config={"fail_at": 8})
              .training(n_step=N, epsilon=[[0, 1.0], [10_000, 1.0]]).debugging(seed=0))
    if maker is make_flaky_constant_parallel:
        config = config.multi_agent(policies={"p0", "p1"}, policy_mapping_fn={"a0": "p0", "a1": "p1"})
    algo = config.build()
    try:
        runner = algo.env_runner_group.local
        runner.sample(5)
        mid_episode = algo.save(tmp_path / "mid")
        with pytest.raises(RuntimeError, match="flaky env"):
            runner.sample(5)
        after_reset = algo.save(tmp_path / "reset")
    finally:
        algo.stop()
    for path, first_row in ((mid_episode, False), (after_reset, True)):
        restored = cairn.Algorithm.from_checkpoint(path)
        try:
            for batch in restored.env_runner_group.local.sample(2).values():
                assert batch["firsts"].tolist() == [first_row, False]
        finally:
            restored.stop()


def test_held_rows_never_join_the_fragment_after_a_refused_round():
    """A round refused for a NaN reward (NonFiniteSampleError) is not stored, but the episode
    goes on: the next round's first rows do not follow the held rows, whose next steps were in
    the refused round. Here every observation is equal, so equal observations prove nothing: on
    main the rows of steps 3 and 4 were completed with the rewards of steps 9 and 10 as if they
    were their next steps (3 + .5 * 4 + .25 * 9 = 7.25 and 4 + .5 * 9 + .25 * 10 = 11). They end
    where their round was cut instead, bootstrapping from its last observation."""
    algo = (cairn.DQNConfig().environment(make_nan_reward_constant_env, env_config={"nan_at": 6})
            .training(n_step=N, gamma=0.5, train_batch_size=4, num_steps_sampled_before_learning_starts=1000)
            .env_runners(rollout_fragment_length=4).debugging(seed=0).build())
    try:
        algo.train()  # steps 1-4: the rows of steps 3 and 4 wait for steps 5 and 6
        with pytest.raises(NonFiniteSampleError):
            algo.train()  # steps 5-8, refused (step 6 pays NaN)
        algo.train()  # steps 9-12
        buffer = algo.replay_buffers["default_policy"]
        rewards, n_steps = buffer.columns["rewards"][:len(buffer)], buffer.columns["n_steps"][:len(buffer)]
    finally:
        algo.stop()
    # Steps 3 and 4 stop at step 4, where their round was cut (2 and 1 steps).
    assert rewards.tolist() == pytest.approx([1 + 1 + .75, 2 + 1.5 + 1, 3 + 2, 4, 9 + 5 + 2.75, 10 + 5.5 + 3])
    assert n_steps.tolist() == [3, 3, 2, 1, 3, 3]


def test_held_rows_never_join_the_fragment_after_rounds_their_policy_did_not_train():
    """A policy taken out of policies_to_train still acts, but its rows are not stored: the rows
    held for its trajectories cannot be completed by a fragment sampled once it trains again
    (here the env's observation never changes, so it starts where they ended). On main the rows
    of steps 3 and 4 joined steps 9 and 10 (3 + .5 * 4 + .25 * 9 = 7.25 and 11)."""
    algo = (cairn.DQNConfig().environment(make_nan_reward_constant_env, env_config={"nan_at": 10**9})
            .training(n_step=N, gamma=0.5, train_batch_size=4, num_steps_sampled_before_learning_starts=1000)
            .env_runners(rollout_fragment_length=4).debugging(seed=0).build())
    try:
        algo.train()  # steps 1-4: the rows of steps 3 and 4 wait for steps 5 and 6
        policy = algo.get_policy()
        spec = cairn.PolicySpec(observation_space=policy.observation_space, action_space=policy.action_space)
        algo.add_policy("other", spec, policies_to_train=["other"],
                        policy_mapping_fn=lambda *_, **__: "default_policy")
        algo.train()  # steps 5-8: default_policy acts but does not train
        algo.remove_policy("other", policies_to_train=["default_policy"])
        algo.train()  # steps 9-12
        buffer = algo.replay_buffers["default_policy"]
        rewards, n_steps = buffer.columns["rewards"][:len(buffer)], buffer.columns["n_steps"][:len(buffer)]
    finally:
        algo.stop()
    assert rewards.tolist() == pytest.approx([1 + 1 + .75, 2 + 1.5 + 1, 3 + 2, 4, 9 + 5 + 2.75, 10 + 5.5 + 3])
    assert n_steps.tolist() == [3, 3, 2, 1, 3, 3]
