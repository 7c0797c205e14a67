"""A simultaneous game's step that raises while a scripted opponent is seated: the parallel
sampler drops that opponent's drawn action before the env steps, and the runner's error rule
(docs/fault-tolerance.md: every env of the runner starts a new episode, now or at the next
sample()) is what keeps the seat consistent: each live scripted seat has exactly one action
drawn for its new episode, the next sample plays main's rows only, one per step and env, and a
checkpoint saved right after the error resumes exactly."""

from __future__ import annotations

from typing import Any

import pytest

import cairn
from tests.fault_injection import InjectedError
from tests.helpers import assert_trains_identically
from tests.league.games import RoundsOfRockPaperScissors, small_league


class FlakyRounds(RoundsOfRockPaperScissors):
    """Rounds of rock-paper-scissors whose ``fail_at``-th step (counted over every copy in
    this process, once armed) raises :attr:`error`."""

    error: type[BaseException] = InjectedError
    fail_at: int | None = None
    steps = 0

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        if FlakyRounds.fail_at is not None:
            FlakyRounds.steps += 1
            if FlakyRounds.steps == FlakyRounds.fail_at:
                FlakyRounds.fail_at = None
                raise FlakyRounds.error("injected failure in step()")
        return super().step(actions)


def make_flaky_rounds(env_config: dict) -> FlakyRounds:
    return FlakyRounds(**env_config)


def _seats_consistent(runner: Any) -> None:
    """Every live agent that a scripted opponent seats has its next action, and no other."""
    state = runner.get_state()
    for i, entry in enumerate(state["current_obs"]):
        live = [str(a) for a in runner.envs[i].agents]
        seated = sorted(a for a in live if entry["agent_pids"].get(a) == "random_legal")
        assert sorted(entry["scripted_actions"]) == seated, f"env {i}"
        assert sorted(entry["obs"]) == sorted(a for a in live if a not in seated), f"env {i}"
    runner.set_state(state)  # the runner's own check of saved scripted actions accepts it


@pytest.mark.parametrize("error", [InjectedError, KeyboardInterrupt])
def test_a_step_that_raises_with_a_scripted_opponent_seated_leaves_the_seat_consistent(error, tmp_path):
    config = small_league(opponents={"random_legal": "random_legal"}, self_play_fraction=0.0,
                          snapshot_every_iterations=1000)
    algo = config.environment(make_flaky_rounds, env_config={"rounds": 5}).build()
    try:
        algo.train()
        runner = algo.env_runner_group.local
        assert any(entry["scripted_actions"] for entry in runner.get_state()["current_obs"])
        # The second env copy's step raises at the second step of the next iteration's sample,
        # the first copy having stepped already (its opponent's next action drawn again).
        FlakyRounds.error, FlakyRounds.steps, FlakyRounds.fail_at = error, 0, 4
        with pytest.raises(error, match="injected failure"):
            algo.train()
        assert runner.get_state()["needs_reset"] == (error is KeyboardInterrupt)  # reset now, or next
        if error is InjectedError:
            _seats_consistent(runner)
        at_fault = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "at_fault"))
        try:
            assert_trains_identically(algo, at_fault, iterations=1)
        finally:
            at_fault.stop()
        _seats_consistent(runner)
        steps = 7
        batches = runner.sample(steps)
        assert set(batches) == {"main"} and len(batches["main"]) == steps * runner.num_envs
        _seats_consistent(runner)
    finally:
        FlakyRounds.fail_at = None
        algo.stop()
