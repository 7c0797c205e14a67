"""Episode callbacks see the episode's data through RLlib's getters (``get_observations``,
``get_actions``, ``get_rewards``, ``get_infos``): what the env emitted and received, raw, in
every kind of runner. Each test compares what a callback saw with each env's own log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import cairn
from cairn.env_runner.episode import EpisodeTotals
from cairn.errors import ConfigError
from tests.callbacks import expected_episodes as expected
from tests.callbacks.emitting import (
    EpisodeData,
    ShortHistory,
    answers,
    log,
    make_emit_env,
    make_emit_game,
    make_emit_parallel,
    read_log,
)


def emit_ppo(log_dir: Path, *, maker: Any = make_emit_env, **env_runners: Any) -> cairn.AlgorithmConfig:
    return (cairn.PPOConfig().environment(maker, env_config={"log_dir": str(log_dir)})
            .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
            .env_runners(**{"num_envs_per_env_runner": 2, **env_runners})
            .callbacks(EpisodeData).debugging(seed=0))


def _train_and_compare(config: cairn.AlgorithmConfig, log_dir: Path, rebuild: Any) -> dict[str, Any]:
    algo = config.build()
    try:
        result = algo.train()
    finally:
        algo.stop()
    seen = read_log(log_dir, "callbacks")
    expected.assert_same_episodes(seen, rebuild(read_log(log_dir, "env")))
    return result


def test_single_agent_callbacks_see_the_raw_data_the_env_emitted(tmp_path: Path) -> None:
    # MeanStdFilter: the policy acts on filtered observations; the getters hold the env's own.
    result = _train_and_compare(emit_ppo(tmp_path, observation_filter="MeanStdFilter"), tmp_path,
                                expected.single_agent)
    sums = [r["reward_sum"] for r in read_log(tmp_path, "callbacks")]
    assert result["custom_metrics"]["reward_sum_max"] == pytest.approx(max(sums))
    # The per-episode metric equals the episode's return (the getters miss no reward).
    assert all(r["reward_sum"] == pytest.approx(r["return"]) for r in read_log(tmp_path, "callbacks"))


def test_async_envs_send_what_the_callbacks_see(tmp_path: Path) -> None:
    _train_and_compare(emit_ppo(tmp_path, gym_env_vectorize_mode="async"), tmp_path, expected.single_agent)


def test_multi_agent_getters_give_a_dict_per_agent(tmp_path: Path) -> None:
    config = emit_ppo(tmp_path, maker=make_emit_parallel).multi_agent(
        policies={"p0", "p1"}, policy_mapping_fn={"a0": "p0", "a1": "p1"})
    _train_and_compare(config, tmp_path, expected.parallel)
    # a1 left after 2 steps: its columns stop there, a0's go on.
    for record in read_log(tmp_path, "callbacks"):
        assert len(record["actions"]["a1"]) == 2 and len(record["observations"]["a1"]) == 3
        assert len(record["observations"]["a0"]) == len(record["actions"]["a0"]) + 1 >= 3


def test_turn_based_getters_follow_each_players_moves(tmp_path: Path) -> None:
    config = emit_ppo(tmp_path, maker=make_emit_game).multi_agent(
        policies={"p0", "p1"}, policy_mapping_fn={"player_0": "p0", "player_1": "p1"})
    _train_and_compare(config, tmp_path, expected.turn_based)


def test_history_is_bounded_and_says_what_it_dropped(tmp_path: Path) -> None:
    algo = emit_ppo(tmp_path).callbacks(ShortHistory).build()
    try:
        algo.train()
    finally:
        algo.stop()
    episodes = expected.single_agent(read_log(tmp_path, "env"))
    seen = read_log(tmp_path, "callbacks")
    assert sorted(expected.canonical({"last": e["rewards"][-2:], "obs": [e["observations"][-3],
                                                                        e["observations"][-1]]})
                  for e in episodes) == sorted(expected.canonical({"last": r["last"], "obs": r["obs"]})
                                               for r in seen)
    # Every episode is longer than 2 steps: asking for all of it is an error naming the fix.
    assert all("only the last 2 rewards are kept" in r["rewards"] and "episode_history_steps" in r["rewards"]
               for r in seen)
    assert all("only the last 3 observations are kept" in r["observations"] for r in seen)


class BadHistory(EpisodeData):
    episode_history_steps = 0


def test_an_invalid_history_length_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"BadHistory.episode_history_steps=0: expected a positive int"):
        cairn.PPOConfig().environment("CartPole-v1").callbacks(BadHistory).build()


def test_an_episode_in_flight_at_restore_starts_its_history_after_it(tmp_path: Path) -> None:
    """The history is not checkpointed: after a restore, the episode in flight answers index -1
    from the first step after it, and refuses what came before (never a partial answer)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    algo = emit_ppo(tmp_path / "a").build()
    try:
        algo.env_runner_group.local.sample(5)  # episodes last 3 to 6 steps: these are in flight
        state = algo.env_runner_group.local.get_state()
    finally:
        algo.stop()
    lengths = [e["length"] for e in state["episodes"]]
    restored = emit_ppo(tmp_path / "b").callbacks(RestoredView).build()
    try:
        restored.env_runner_group.local.set_state(state)
        restored.env_runner_group.local.sample(1)
    finally:
        restored.stop()
    views = [v for v in read_log(tmp_path / "b", "callbacks") if "start" not in v]
    env_steps = [e for e in read_log(tmp_path / "b", "env") if e["kind"] == "step"]
    assert len(views) == 2 and len(env_steps) == 2  # one step in each env, in env order
    for view, step in zip(sorted(views, key=lambda v: v["env_index"]), env_steps):
        # Index -1 is the step taken after the restore (the env's own record of it) ...
        assert view["length"] == lengths[view["env_index"]] + 1
        assert [view[k] for k in ("obs", "action", "reward", "info")] == \
            [step[k] for k in ("obs", "action", "reward", "info")]
        # ... and what came before it is refused, with the reason.
        assert "was in flight when the env runner's state was restored" in view["all_rewards"]
        assert "was in flight" in view["first_obs"]


class RestoredView(EpisodeData):
    """Logs index -1 at each step, and what asking for the whole episode or its start does."""

    def on_episode_start(self, *, episode: Any, env_runner: Any) -> None:
        log(env_runner.config.env_config["log_dir"], "callbacks", {"start": True})

    def on_episode_step(self, *, episode: Any, env_runner: Any) -> None:
        record = {**self.latest(episode), "env_index": episode.env_index, "length": episode.length,
                  **answers(all_rewards=episode.get_rewards, first_obs=lambda: episode.get_observations(0))}
        log(env_runner.config.env_config["log_dir"], "callbacks", record)

    def on_episode_end(self, *, episode: Any, env_runner: Any) -> None:
        pass


def test_nothing_is_recorded_without_an_episode_hook(tmp_path: Path) -> None:
    """The fast path: without an episode hook, episodes hold no history and "async" children
    send no infos."""
    (tmp_path / "x").mkdir()
    plain = emit_ppo(tmp_path).callbacks(cairn.Callbacks).env_runners(gym_env_vectorize_mode="async").build()
    hooked = emit_ppo(tmp_path / "x").env_runners(gym_env_vectorize_mode="async").build()
    try:
        assert not plain.env_runner_group.local.vector_envs.keep_infos
        assert hooked.env_runner_group.local.vector_envs.keep_infos
    finally:
        plain.stop()
        hooked.stop()
    with pytest.raises(AttributeError, match="available in episode callbacks only"):
        EpisodeTotals().get_rewards()
