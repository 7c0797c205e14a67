"""gym_env_vectorize_mode="async": each env in a child process, same results as "sync"."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.env_runner.subprocess_envs import AsyncEnvs
from cairn.errors import ConfigError, EnvError
from cairn.rng import env_process_seed
from tests.conftest import ROOT
from tests.helpers import small_ma_ppo, small_ppo, weights_digest
from tests.ray.envs import global_random_creator


def failing_creator(env_config: dict) -> gym.Env:
    """A module-level creator whose constructor fails (in the child)."""
    raise RuntimeError("no licence server for this simulator")


def child_only_failing_creator(env_config: dict) -> gym.Env:
    """Creates CartPole in the main process, fails in a child (a licence bound to one process)."""
    if multiprocessing.parent_process() is not None:
        failing_creator(env_config)
    return gym.make("CartPole-v1")


class _StubbornEnv(gym.Wrapper):
    """CartPole whose process ignores SIGTERM and whose ``close`` never returns."""

    def close(self) -> None:
        time.sleep(3600)


def stubborn_creator(env_config: dict) -> gym.Env:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return _StubbornEnv(gym.make("CartPole-v1"))


def _async(config: cairn.PPOConfig, num_envs: int = 2) -> cairn.PPOConfig:
    return config.env_runners(num_envs_per_env_runner=num_envs, gym_env_vectorize_mode="async")


def _children(algo: cairn.Algorithm) -> list:
    runner = algo.env_runner_group.local
    assert runner is not None
    return runner.vector_envs.processes()  # type: ignore[attr-defined]


def test_setting_round_trips_and_unknown_modes_fail():
    config = _async(small_ppo())
    data = config.to_dict()
    assert data["gym_env_vectorize_mode"] == "async"
    assert cairn.AlgorithmConfig.from_dict(data).gym_env_vectorize_mode == "async"
    assert small_ppo().to_dict()["gym_env_vectorize_mode"] == "sync"
    with pytest.raises(ConfigError, match="gym_env_vectorize_mode.*'sync', 'async'"):
        small_ppo().env_runners(gym_env_vectorize_mode="subprocess")
    with pytest.raises(ConfigError, match="gym_env_vectorize_mode"):
        cairn.AlgorithmConfig.from_dict({**data, "gym_env_vectorize_mode": "threads"})


def test_async_trains_bit_identically_to_sync_and_stop_ends_children():
    def run(mode: str) -> tuple[str, dict, list]:
        algo = small_ppo().env_runners(num_envs_per_env_runner=3, gym_env_vectorize_mode=mode).build()
        for _ in range(3):
            algo.train()
        batch = algo.env_runner_group.local.sample(20)["default_policy"]  # type: ignore[union-attr]
        children = _children(algo) if mode == "async" else []
        assert all(p.is_alive() for p in children)
        algo.stop()
        return weights_digest(algo), batch, children

    sync_digest, sync_batch, _ = run("sync")
    async_digest, async_batch, children = run("async")
    assert async_digest == sync_digest
    for key in ("obs", "actions", "rewards", "terminateds", "truncateds", "next_obs"):
        np.testing.assert_array_equal(async_batch[key], sync_batch[key])
    assert len(children) == 3 and not any(p.is_alive() for p in children)
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("cairn-env")]


def test_evaluation_runner_follows_the_mode():
    algo = _async(small_ppo()).evaluation(evaluation_interval=1, evaluation_duration=2).build()
    try:
        result = algo.train()
        assert result["evaluation"]["episode_return_mean"] > 0
        children = [p for p in multiprocessing.active_children() if p.name.startswith("cairn-env")]
        assert len(children) == 3  # 2 training envs, 1 evaluation env
    finally:
        algo.stop()
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("cairn-env")]


@pytest.mark.parametrize("restore_mode", ["async", "sync"])
def test_async_checkpoint_resumes_exactly(tmp_path, restore_mode):
    algo = _async(small_ppo()).build()
    algo.train()
    path = algo.save(tmp_path / "c")
    for _ in range(2):
        algo.train()
    expected = weights_digest(algo)
    algo.stop()
    restored = cairn.Algorithm.from_checkpoint(
        path, config_overrides={"gym_env_vectorize_mode": restore_mode})
    assert restored.config.gym_env_vectorize_mode == restore_mode
    for _ in range(2):
        restored.train()
    assert weights_digest(restored) == expected
    restored.stop()


def test_env_state_comes_from_the_children():
    envs = AsyncEnvs("CartPole-v1", {}, 2)
    try:
        envs.reset({0: 1, 1: 2})
        envs.step([0, 1])
        states = envs.get_states()
        assert [s["kind"] for s in states] == ["classic_control", "classic_control"]  # type: ignore[index]
        after = envs.step([1, 1])
        assert envs.set_states(states)
        again = envs.step([1, 1])
        for a, b in zip(after, again):
            np.testing.assert_array_equal(a[0], b[0])
            assert a[1:] == b[1:]
    finally:
        envs.close()
    assert not any(p.is_alive() for p in envs.processes())


def test_lambda_creators_are_sent_by_value():
    envs = AsyncEnvs(lambda cfg: gym.make("CartPole-v1", **cfg), {"max_episode_steps": 3}, 1)
    try:
        envs.reset({0: 0})
        assert [envs.step([0])[0][3] for _ in range(3)] == [False, False, True]  # truncated at 3
    finally:
        envs.close()


def test_unpicklable_creator_names_the_env_and_the_fix():
    lock = threading.Lock()

    def make_locked_env(env_config: dict) -> gym.Env:
        with lock:
            return gym.make("CartPole-v1")

    config = _async(small_ppo().environment(make_locked_env))
    with pytest.raises(EnvError, match=r"cannot send environment .*make_locked_env.*lock(.|\n)*locks, "
                                       r"open files.*create those inside it.*'sync'"):
        config.build()


def test_constructor_failing_in_the_child_shows_its_error():
    # The algorithm creates one env in this process first (for the spaces): fail in children only.
    with pytest.raises(EnvError, match=r"child_only_failing_creator.*failed in create\(\)(.|\n)*no licence"):
        _async(small_ppo().environment(child_only_failing_creator)).build()
    with pytest.raises(EnvError, match=r"failing_creator.*failed in create\(\)(.|\n)*no licence"):
        AsyncEnvs(failing_creator, {}, 2)


def test_multi_agent_envs_are_refused_with_the_alternative():
    with pytest.raises(ConfigError, match="single-agent.*gym_env_vectorize_mode='sync'"):
        _async(small_ma_ppo(2)).build()


_ORPHAN = """
import os, sys
sys.path.insert(0, {root!r})
from cairn.env_runner.subprocess_envs import AsyncEnvs
if __name__ == "__main__":
    envs = AsyncEnvs("CartPole-v1", {{}}, 2)
    print(" ".join(str(p.pid) for p in envs.processes()), flush=True)
    os._exit(0)  # no close(), no atexit: as if the parent were killed
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow  # a fresh interpreter that imports cairn and starts the fork server: ~10 s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_children_exit_when_the_parent_dies(tmp_path):
    script = tmp_path / "orphan.py"
    script.write_text(_ORPHAN.format(root=str(ROOT)))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         check=True, cwd=ROOT, timeout=120).stdout
    pids = [int(p) for p in out.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 60  # a wait for a state: generous for a loaded machine
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), f"children {pids} outlived their parent {os.getpid()}"


@pytest.mark.slow  # two join timeouts (close, then SIGTERM) before the kill: ~10 s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_close_kills_a_child_that_neither_closes_nor_takes_sigterm():
    envs = AsyncEnvs(stubborn_creator, {}, 1)
    (process,) = envs.processes()
    envs.close()
    assert not process.is_alive() and not _alive(process.pid)
    assert process.exitcode == -9  # SIGKILL: close() hung and SIGTERM was ignored


def _first_global_draws(process_seeds: list | None) -> list[tuple[float, ...]]:
    """Each child's reset and first step observation (numpy's then torch's global draws)."""
    envs = AsyncEnvs(global_random_creator, {}, 3, process_seeds)
    try:
        resets = [tuple(np.asarray(o).tolist()) for o, _ in envs.reset({i: None for i in range(3)}).values()]
        steps = [tuple(np.asarray(o).tolist()) for o, *_ in envs.step([0, 0, 0])]
    finally:
        envs.close()
    return [r + s for r, s in zip(resets, steps)]


def test_children_draw_apart_from_numpys_and_torchs_global_generators():
    """Every child is forked from one fork server: it inherited its global numpy (and torch)
    generator state, so env copies drawing from them (np.random.random(), torch.rand())
    returned the very same numbers, all copies one episode. Each child's generators now take
    its own seed (config.seed's stream), or fresh entropy without a seed."""
    seeds = [env_process_seed(0, 0, 0, i) for i in range(3)]
    for draws in (_first_global_draws(seeds), _first_global_draws(None)):
        for column in range(8):  # numpy's two draws, then torch's, at reset and at the step
            values = [row[column] for row in draws]
            assert len(set(values)) == 3, (column, values)
    assert _first_global_draws(seeds) == _first_global_draws(seeds)  # seeded: reproducible


def test_an_async_runners_children_are_seeded_by_its_own_stream():
    """The runner passes each child its seed of config.seed's stream (keyed by its worker index,
    seed offset and env index): equal seeds give equal draws, and its env copies differ."""
    config = _async(small_ppo().environment(global_random_creator), num_envs=2)
    algo = config.build()
    try:
        first = algo.env_runner_group.local.sample(2)["default_policy"]["obs"]  # type: ignore[union-attr]
    finally:
        algo.stop()
    algo = config.build()
    try:
        again = algo.env_runner_group.local.sample(2)["default_policy"]["obs"]  # type: ignore[union-attr]
    finally:
        algo.stop()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first[:2], first[2:])  # env 0's rows, env 1's rows
