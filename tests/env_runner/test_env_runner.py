import gymnasium as gym
import numpy as np
import pytest

from cairn.env_runner import EnvRunner
from cairn.env_runner.env_state import get_env_state, set_env_state
from cairn.envs import MultiAgentCartPole
from cairn.envs.memory import StatelessCartPole
from cairn.errors import EnvError
from tests.helpers import small_ma_ppo, small_ppo


def _runner(config, num_envs=None):
    algo = config.build()
    return EnvRunner(algo.config, algo.policies, num_envs=num_envs), algo


def test_single_agent_batch_columns_and_episode_ends():
    runner, _ = _runner(small_ppo().env_runners(num_envs_per_env_runner=2))
    batch = runner.sample(100)["default_policy"]
    assert len(batch) == 200
    assert batch["obs"].shape == (200, 4) and batch["obs"].dtype == np.float32
    assert batch["ends"][99] and batch["ends"][199]  # each env's fragment ends
    # Within one env's piece, next_obs[t] is obs[t+1] unless the episode ended at t.
    for t in range(99):
        if not (batch["terminateds"][t] or batch["truncateds"][t]):
            np.testing.assert_array_equal(batch["next_obs"][t], batch["obs"][t + 1])
    assert batch["terminateds"].any()  # random CartPole policies fall quickly
    assert (batch["ends"] >= (batch["terminateds"] | batch["truncateds"])).all()


def test_truncated_episode_keeps_its_final_observation():
    runner, _ = _runner(small_ppo().environment("CartPole-v1", env_config={"max_episode_steps": 5}))
    batch = runner.sample(12)["default_policy"]
    t = int(np.flatnonzero(batch["truncateds"])[0])
    assert not batch["terminateds"][t]
    # The next row starts a new episode: its obs is a reset state, not the final one.
    assert not np.array_equal(batch["next_obs"][t], batch["obs"][t + 1])


def test_multi_agent_batches_by_policy():
    runner, _ = _runner(small_ma_ppo(3))
    batches = runner.sample(50)
    assert set(batches) == {"p0", "p1", "p2"}
    for batch in batches.values():
        assert len(batch) <= 50
        assert batch["ends"][-1]
        assert batch["next_obs"].shape == batch["obs"].shape


def test_runner_state_round_trip_is_exact():
    config = small_ma_ppo(2)
    a, algo = _runner(config)
    a.sample(30)
    state = a.get_state()
    b = EnvRunner(algo.config, algo.policies)
    b.set_state(state)
    # Same policies object, same RNG streams? Use two identical policy copies instead.
    import cairn

    pa = {pid: cairn.Policy.from_state(p.get_state()) for pid, p in algo.policies.items()}
    pb = {pid: cairn.Policy.from_state(p.get_state()) for pid, p in algo.policies.items()}
    a.policies, b.policies = pa, pb
    out_a, out_b = a.sample(40), b.sample(40)
    for pid in out_a:
        for column in out_a[pid]:
            np.testing.assert_array_equal(out_a[pid][column], out_b[pid][column])


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "MountainCar-v0", "Acrobot-v1"])
def test_classic_control_state_protocol(env_id):
    env, twin = gym.make(env_id), gym.make(env_id)
    env.reset(seed=3)
    for _ in range(5):
        env.step(env.action_space.sample())
    assert set_env_state(twin, get_env_state(env))
    action = env.action_space.sample()
    out_env, out_twin = env.step(action), twin.step(action)
    np.testing.assert_array_equal(out_env[0], out_twin[0])
    assert out_env[1:4] == out_twin[1:4]


def test_env_without_state_protocol_returns_none():
    class Opaque(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (1,))
        action_space = gym.spaces.Discrete(2)

    assert get_env_state(Opaque()) is None


def test_multi_agent_cartpole_protocol():
    env = MultiAgentCartPole(num_agents=2)
    env.reset(seed=0)
    env.step({"agent_0": 0, "agent_1": 1})
    twin = MultiAgentCartPole(num_agents=2)
    set_env_state(twin, get_env_state(env))
    a = env.step({"agent_0": 1, "agent_1": 1})
    b = twin.step({"agent_0": 1, "agent_1": 1})
    for k in a[0]:
        np.testing.assert_array_equal(a[0][k], b[0][k])


def test_multi_agent_cartpole_passes_pettingzoos_api_test():
    from pettingzoo.test import parallel_api_test

    parallel_api_test(MultiAgentCartPole(num_agents=3), num_cycles=100)


@pytest.mark.parametrize("num_envs", [1, 2])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_gymnasium_vector_env_is_refused_with_the_fix(num_envs, mode):
    # cairn vectorises environments itself (it resets each one as its episode ends, keeping the
    # final observation): a Gymnasium VectorEnv's batched spaces and autoreset steps are not one
    # environment's. It used to build, then fail deep in sampling with a numpy error.
    closed = []

    def creator(env_config):
        env = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="sync")
        close = env.close
        env.close = lambda **kwargs: (closed.append(True), close(**kwargs))
        return env

    config = small_ppo().environment(creator).env_runners(gym_env_vectorize_mode=mode)
    with pytest.raises(EnvError, match=r"VectorEnv.*num_envs_per_env_runner"):
        config.build()
    if mode == "sync":  # the refused env is closed (in "async" it lives in the child)
        assert closed


class _Float32Rewards(gym.Env):
    """Pays np.float32(0.1) a step; episodes of 1000 steps (then truncated)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_config):
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), np.float32(0.1), False, self.t >= 1000, {}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_episode_returns_add_float32_rewards_in_double_precision(mode):
    # Summed in the rewards' own float32, a return drifted (99.99905 here) and came out as a
    # numpy float32; the parallel and turn-based samplers already took float(reward).
    runner, algo = _runner(small_ppo().environment(_Float32Rewards).env_runners(gym_env_vectorize_mode=mode))
    try:
        runner.sample(1000)
        [episode] = runner.get_metrics()
    finally:
        runner.stop()
        algo.stop()
    expected = 0.0
    for _ in range(1000):
        expected += float(np.float32(0.1))
    assert type(episode["return"]) is float and episode["return"] == expected
    assert episode["policy_returns"] == {"default_policy": [expected]}


class _ObservationBuffer(gym.Env):
    """Returns its own observation buffer, written in place by the next step or reset (as a
    simulator's view of its state may be); truncated after 3 steps, observing ``[t, t]``."""

    observation_space = gym.spaces.Box(-1.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_config):
        self.buffer = np.zeros(2, np.float32)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.buffer[:] = -1.0
        return self.buffer, {}

    def step(self, action):
        self.t += 1
        self.buffer[:] = self.t
        return self.buffer, 1.0, False, self.t >= 3, {}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_truncated_episode_keeps_its_final_observation_when_the_reset_overwrites_it(mode):
    # The final observation was filtered after the env's reset: an env returning its own buffer
    # had it overwritten by the reset's, so with "sync" (no pickling in between) next_obs, the
    # value PPO and DQN bootstrap from, was the next episode's first observation.
    config = small_ppo().environment(_ObservationBuffer).env_runners(gym_env_vectorize_mode=mode)
    runner, algo = _runner(config)
    try:
        batch = runner.sample(8)["default_policy"]
    finally:
        runner.stop()
        algo.stop()
    np.testing.assert_array_equal(batch["truncateds"], [False, False, True] * 2 + [False, False])
    np.testing.assert_array_equal(batch["next_obs"][:, 0], [1, 2, 3, 1, 2, 3, 1, 2])
    np.testing.assert_array_equal(batch["obs"][:, 0], [-1, 1, 2, -1, 1, 2, -1, 1])


class _CountingWrapper(gym.Wrapper):
    """A user wrapper with state of its own (its steps, seen in the observation)."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def step(self, action):
        self.steps += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs + self.steps, reward, terminated, truncated, info


def _stacked(env):
    return gym.wrappers.FlattenObservation(gym.wrappers.FrameStackObservation(env, 3))


# (wrapper around a classic-control env, whether its state is one cairn restores exactly)
_WRAPPED_CLASSIC_CONTROL = {
    "make": (lambda: gym.make("CartPole-v1"), True),
    "stateless_cartpole": (lambda: StatelessCartPole(), True),
    "flatten": (lambda: gym.wrappers.FlattenObservation(gym.make("CartPole-v1")), True),
    "rescale_action": (lambda: gym.wrappers.RescaleAction(gym.make("Pendulum-v1"), -1.0, 1.0), True),
    "clip_reward": (lambda: gym.wrappers.ClipReward(gym.make("Pendulum-v1"), -1.0, 0.0), True),
    "frame_stack": (lambda: _stacked(gym.make("CartPole-v1")), False),
    "normalize_observation": (lambda: gym.wrappers.NormalizeObservation(gym.make("CartPole-v1")), False),
    "time_aware": (lambda: gym.wrappers.TimeAwareObservation(gym.make("CartPole-v1")), False),
    "user_wrapper_with_state": (lambda: _CountingWrapper(gym.make("CartPole-v1")), False),
}


@pytest.mark.parametrize("name", sorted(_WRAPPED_CLASSIC_CONTROL))
def test_wrapped_classic_control_env_is_restored_exactly_or_not_at_all(name):
    # Only the physics, the generator and TimeLimit/OrderEnforcing were stored, yet any wrapper
    # was taken as restored: a frame stack, a running normaliser or a time feature went on from
    # the fresh env's values (the next observations differed) while the runner resumed as exact.
    make, exact = _WRAPPED_CLASSIC_CONTROL[name]
    env, twin = make(), make()
    env.reset(seed=3)
    actions = [env.action_space.sample() for _ in range(12)]
    for action in actions[:6]:
        env.step(action)
    for _ in range(3):  # the twin's wrappers have seen other episodes
        twin.reset(seed=11)
        twin.step(actions[0])
    state = get_env_state(env)
    assert (state is not None) == exact
    if state is None:  # nor is a state without its wrappers' (an earlier checkpoint's) applied
        assert not set_env_state(twin, get_env_state(env.unwrapped))
        return
    assert set_env_state(twin, state)
    for action in actions[6:]:
        out_env, out_twin = env.step(action), twin.step(action)
        np.testing.assert_array_equal(out_env[0], out_twin[0])
        assert out_env[1:4] == out_twin[1:4]


def test_a_runner_with_stateful_wrappers_restarts_episodes_after_a_restore():
    config = small_ppo().environment(lambda cfg: _CountingWrapper(gym.make("CartPole-v1")))
    a, algo = _runner(config)
    a.sample(20)
    b = EnvRunner(algo.config, algo.policies)
    b.sample(3)
    b.set_state(a.get_state())
    b.sample(1)
    assert all(episode.length == 1 for episode in b._episodes.current)  # fresh episodes


class _ProtocolCounter(gym.Env):
    """Observes its step count; exact resume through the state protocol."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 1.0, False, False, {}

    def get_state(self):
        return {"t": self.t}

    def set_state(self, state):
        self.t = state["t"]


def _made_counter(max_episode_steps):
    """_ProtocolCounter behind the wrappers gym.make puts around a registered env."""
    env = gym.wrappers.OrderEnforcing(gym.wrappers.PassiveEnvChecker(_ProtocolCounter()))
    return env if max_episode_steps is None else gym.wrappers.TimeLimit(env, max_episode_steps)


def test_a_protocol_env_behind_a_time_limit_restarts_its_episodes_after_a_restore():
    # The protocol stored the env's state, not its TimeLimit's count: the restored episode
    # was truncated at the restoring runner's count (3 steps on, not 6), with no error.
    config = small_ppo().environment(lambda cfg: _made_counter(10))
    a, algo = _runner(config)
    a.sample(4)
    assert get_env_state(a.envs[0]) is None
    b = EnvRunner(algo.config, algo.policies)
    b.sample(7)
    b.set_state(a.get_state())
    batch = b.sample(10)["default_policy"]
    np.testing.assert_array_equal(batch["obs"][:, 0], np.arange(10))  # a fresh episode
    assert np.flatnonzero(batch["truncateds"]).tolist() == [9]  # at its 10th step


def test_a_protocol_env_made_by_gym_make_resumes_exactly_in_a_new_runner():
    # A new runner's env had never been reset: its OrderEnforcing raised ResetNeeded at the
    # first step after the restore.
    config = small_ppo().environment(lambda cfg: _made_counter(None))
    a, algo = _runner(config)
    a.sample(4)
    b = EnvRunner(algo.config, algo.policies)
    b.set_state(a.get_state())
    out_a, out_b = a.sample(10)["default_policy"], b.sample(10)["default_policy"]
    np.testing.assert_array_equal(out_b["obs"][:, 0], np.arange(4, 14))
    np.testing.assert_array_equal(out_a["obs"], out_b["obs"])


class _StateBeforeResetFails(_ProtocolCounter):
    """Its get_state reads an attribute only reset() sets (as Pendulum's ``state``)."""

    def __init__(self):
        self.t_at_reset = None

    def reset(self, *, seed=None, options=None):
        out = super().reset(seed=seed, options=options)
        self.t_at_reset = 0
        return out

    def get_state(self):
        return {"t": self.t}  # AttributeError before the first reset


def test_an_envs_failing_get_state_is_an_env_error_naming_it_and_the_runner_goes_on():
    a, _ = _runner(small_ppo().environment(lambda cfg: _StateBeforeResetFails()))
    with pytest.raises(EnvError, match=r"_StateBeforeResetFails\.get_state\(\) raised AttributeError.*"
                                       r"remove get_state/set_state"):
        a.get_state()
    batch = a.sample(3)["default_policy"]  # the runner is as it was: it resets and samples
    np.testing.assert_array_equal(batch["obs"][:, 0], [0, 1, 2])
    assert a.get_state()["envs"] == [{"kind": "protocol", "state": {"t": 3}}]
