"""Turn-based PettingZoo (AEC) games: the agent whose turn it is acts, transitions span from an
agent's move to its next one, every agent gets its terminal transition, and an algorithm saved
mid-game resumes bit for bit.

Until policies mask illegal moves, tic-tac-toe and connect four may end early when a policy
plays an illegal move (PettingZoo's TerminateIllegalWrapper: -1 for the offender); nothing here
depends on how often that happens.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo import AECEnv
from pettingzoo.classic import connect_four_v3, tictactoe_v3
from pettingzoo.utils import OrderEnforcingWrapper
from pettingzoo.utils.env_logger import EnvLogger

import cairn
from cairn.errors import ActionMaskError
from cairn.policy.spec import PolicySpec
from tests.helpers import assert_trains_identically, assert_trees_equal, map_by_index, weights_digest

SMALL = {"train_batch_size": 128, "minibatch_size": 64}


@pytest.fixture(autouse=True)
def _quiet_illegal_moves():
    # TerminateIllegalWrapper prints a warning for each illegal move; beside the point here.
    EnvLogger.suppress_output()
    yield
    EnvLogger.unsuppress_output()


# ------------------------------------------------------------------------ envs and mappings
def make_tictactoe(env_config: dict) -> AECEnv:
    """Module-level (storable) creator of PettingZoo's tic-tac-toe."""
    return tictactoe_v3.env()


def make_connect_four(env_config: dict) -> AECEnv:
    """Module-level (storable) creator of PettingZoo's connect four."""
    return connect_four_v3.env()


def shared_policy(agent_id: str, **kwargs: object) -> str:
    """Self-play: every player acts with one policy."""
    return "shared"


class ScriptedGame(AECEnv):
    """Two players alternate for five moves (:attr:`moves_per_game`). After move k (1-based)
    player_0 receives k and player_1 receives 10 k, whoever moved; the observation is [moves so
    far, player index]."""

    metadata = {"name": "scripted_game_v0", "render_modes": []}

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["player_0", "player_1"]
        self.render_mode = None

    def observation_space(self, agent):
        return gym.spaces.Box(0.0, 10.0, (2,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    #: Observe None for a player once the game is over (some AEC envs do).
    blind_at_end = False
    #: The moves of one game.
    moves_per_game = 5

    def observe(self, agent):
        if self.blind_at_end and self.terminations[agent]:
            return None
        return np.array([self._moves, self.possible_agents.index(agent)], np.float32)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self._moves = 0
        self.agent_selection = "player_0"
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}

    def step(self, action):
        if self.terminations[self.agent_selection]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[self.agent_selection] = 0.0  # PettingZoo's usual bookkeeping
        self._moves += 1
        self.rewards = {"player_0": float(self._moves), "player_1": 10.0 * self._moves}
        if self._moves == self.moves_per_game:
            self.terminations = dict.fromkeys(self.agents, True)
        self.agent_selection = self.possible_agents[self._moves % 2]
        self._accumulate_rewards()


    # The environment state protocol, for exact resume.
    def get_state(self):
        return {"moves": self._moves, "agents": list(self.agents), "agent_selection": self.agent_selection,
                **{k: dict(getattr(self, k)) for k in ("rewards", "_cumulative_rewards", "terminations",
                                                        "truncations")}}

    def set_state(self, state):
        self._moves, self.agents = state["moves"], list(state["agents"])
        self.agent_selection = state["agent_selection"]
        for key in ("rewards", "_cumulative_rewards", "terminations", "truncations"):
            setattr(self, key, dict(state[key]))
        self.infos = {a: {} for a in self.agents}


def make_scripted(env_config: dict) -> AECEnv:
    return OrderEnforcingWrapper(ScriptedGame())


def _scripted_config(num_envs: int = 1) -> cairn.AlgorithmConfig:
    return (cairn.PPOConfig().environment(make_scripted).training(**SMALL)
            .env_runners(num_envs_per_env_runner=num_envs)
            .multi_agent(policies={"a", "b"}, policy_mapping_fn={"player_0": "a", "player_1": "b"})
            .debugging(seed=0))


def _ppo(env, mapping=shared_policy, policies=("shared",), num_envs=3):
    return (cairn.PPOConfig().environment(env).training(**SMALL, num_epochs=2)
            .env_runners(num_envs_per_env_runner=num_envs)
            .multi_agent(policies=policies if isinstance(policies, dict) else set(policies),
                         policy_mapping_fn=mapping).debugging(seed=0))


def _dqn(env):
    return (cairn.DQNConfig().environment(env)
            .training(**SMALL, num_steps_sampled_before_learning_starts=64, training_intensity=2,
                      target_network_update_freq=100, replay_buffer_config={"capacity": 2000})
            .checkpointing(store_replay_buffer=True)
            .env_runners(num_envs_per_env_runner=3)
            .multi_agent(policies={"shared"}, policy_mapping_fn=shared_policy).debugging(seed=0))


# ------------------------------------------------------------------------------ transitions
def test_scripted_game_rewards_accumulate_between_moves_and_both_players_get_the_end():
    algo = _scripted_config().build()
    try:
        runner = algo.env_runner_group.local
        batches = runner.sample(5)  # exactly one game of five moves
        a, b = batches["a"], batches["b"]
        # player_0 moves at 0, 2, 4 moves played; its rewards: moves 1+2, 3+4, then 5 (end).
        np.testing.assert_array_equal(a["rewards"], [3.0, 7.0, 5.0])
        np.testing.assert_array_equal(a["terminateds"], [False, False, True])
        np.testing.assert_array_equal(a["obs"][:, 0], [0, 2, 4])
        np.testing.assert_array_equal(a["next_obs"][:, 0], [2, 4, 5])
        # player_1 moves at 1, 3; its 10 for move 1 came before it acted (return only).
        np.testing.assert_array_equal(b["rewards"], [50.0, 90.0])
        np.testing.assert_array_equal(b["terminateds"], [False, True])
        np.testing.assert_array_equal(b["next_obs"][:, 0], [3, 5])
        np.testing.assert_array_equal(a["firsts"], [True, False, False])  # each player's first move
        np.testing.assert_array_equal(b["firsts"], [True, False])
        for batch in (a, b):
            assert not batch["truncateds"].any() and batch["ends"][-1]
        [episode] = runner.get_metrics()
        assert episode == {"return": 165.0, "length": 5, "policy_returns": {"a": [15.0], "b": [150.0]}}
    finally:
        algo.stop()


class BufferedScriptedGame(ScriptedGame):
    """ScriptedGame whose observe() returns the env's own buffer per player, written in place
    by the next observe() of that player (after a reset too)."""

    metadata = {"name": "buffered_scripted_game_v0", "render_modes": []}

    def __init__(self) -> None:
        super().__init__()
        self.buffers = {a: np.zeros(2, np.float32) for a in self.possible_agents}

    def observe(self, agent):
        self.buffers[agent][:] = super().observe(agent)
        return self.buffers[agent]


def make_buffered_scripted(env_config: dict) -> AECEnv:
    return OrderEnforcingWrapper(BufferedScriptedGame())


def test_a_players_final_observation_survives_the_reset_writing_into_it():
    # The final observations were processed after the dead players stepped and the game was
    # reset: an env returning its own buffers had them overwritten by the next game's first
    # observation, which became the last transition's next_obs.
    algo = _scripted_config().environment(make_buffered_scripted).build()
    try:
        batches = algo.env_runner_group.local.sample(5)  # one game of five moves, then the reset
        np.testing.assert_array_equal(batches["a"]["next_obs"][:, 0], [2, 4, 5])
        np.testing.assert_array_equal(batches["b"]["next_obs"][:, 0], [3, 5])
    finally:
        algo.stop()


def test_a_players_only_move_of_a_game_is_its_first_even_when_the_game_ends_at_once(monkeypatch):
    # Three moves: player_1 moves once per game, and the game ends (and the env is reset) when
    # that move completes; its row is still the first step of its part in the game.
    monkeypatch.setattr(ScriptedGame, "moves_per_game", 3)
    algo = _scripted_config().build()
    try:
        batches = algo.env_runner_group.local.sample(6)  # exactly two games
        a, b = batches["a"], batches["b"]
        np.testing.assert_array_equal(b["rewards"], [50.0, 50.0])  # 20 + 30 per game
        np.testing.assert_array_equal(b["terminateds"], [True, True])
        np.testing.assert_array_equal(b["firsts"], [True, True])
        np.testing.assert_array_equal(a["rewards"], [3.0, 3.0, 3.0, 3.0])
        np.testing.assert_array_equal(a["firsts"], [True, False, True, False])
    finally:
        algo.stop()


def test_a_game_that_observes_nothing_at_the_end_still_ends_every_transition(monkeypatch):
    monkeypatch.setattr(ScriptedGame, "blind_at_end", True)
    algo = _scripted_config().build()
    try:
        batches = algo.env_runner_group.local.sample(5)
        np.testing.assert_array_equal(batches["a"]["rewards"], [3.0, 7.0, 5.0])
        np.testing.assert_array_equal(batches["b"]["rewards"], [50.0, 90.0])
        for batch in batches.values():  # the last next_obs falls back to the agent's own obs
            assert batch["terminateds"][-1]
            np.testing.assert_array_equal(batch["next_obs"][-1], batch["obs"][-1])
    finally:
        algo.stop()


def test_transitions_waiting_at_a_fragment_end_come_in_the_next_batch():
    whole, split = _scripted_config(2).build(), _scripted_config(2).build()
    try:
        one = whole.env_runner_group.local.sample(7)
        first = split.env_runner_group.local.sample(3)
        second = split.env_runner_group.local.sample(4)
        # After 7 moves the runner waits on moves not yet followed by their agent's next one.
        assert whole.env_runner_group.local.get_state()["current_obs"][0]["pending_agents"]
        for pid in ("a", "b"):
            for stream in np.unique(one[pid]["streams"]):  # one trajectory: (env, agent)
                for column in ("obs", "actions", "rewards", "terminateds", "firsts", "next_obs"):
                    joined = np.concatenate([part[pid][column][part[pid]["streams"] == stream]
                                             for part in (first, second)])
                    np.testing.assert_array_equal(joined, one[pid][column][one[pid]["streams"] == stream])
    finally:
        whole.stop()
        split.stop()


def test_run_episodes_reports_whole_games():
    algo = _scripted_config(2).build()
    try:
        episodes = algo.env_runner_group.local.run_episodes(3)
        assert len(episodes) == 3
        assert all(e["return"] == 165.0 and e["length"] == 5 for e in episodes)
    finally:
        algo.stop()


# ---------------------------------------------------------------------------------- training
@pytest.mark.parametrize("env", [make_tictactoe, make_connect_four], ids=["tictactoe", "connect_four"])
def test_ppo_self_play_with_one_shared_policy_trains(env):
    algo = _ppo(env).build()
    try:
        before = weights_digest(algo)
        for _ in range(2):
            result = algo.train()
        assert set(algo.policies) == {"shared"}
        assert result["num_episodes_lifetime"] > 0 and weights_digest(algo) != before
        episodes = algo.env_runner_group.local.run_episodes(2)
        # Both players report their return under the one policy; a game is zero-sum.
        assert all(len(e["policy_returns"]["shared"]) == 2 and e["return"] == 0 for e in episodes)
    finally:
        algo.stop()


def test_two_policies_one_per_player():
    algo = _ppo(make_tictactoe, mapping=map_by_index, policies=("p1", "p2")).build()  # player_1/2
    try:
        batches = algo.env_runner_group.local.sample(20)
        assert set(batches) == {"p1", "p2"}
        algo.train()
        episode = algo.env_runner_group.local.run_episodes(1)[0]
        assert set(episode["policy_returns"]) == {"p1", "p2"}
    finally:
        algo.stop()


def test_dqn_self_play_on_tictactoe_trains():
    algo = _dqn(make_tictactoe).build()
    try:
        before = weights_digest(algo)
        for _ in range(2):
            result = algo.train()
        assert result["num_episodes_lifetime"] > 0 and weights_digest(algo) != before
    finally:
        algo.stop()


# ------------------------------------------------------------------------------ exact resume
@pytest.mark.parametrize(("make", "env_state_kind"), [
    (lambda: _ppo(make_tictactoe), "pettingzoo_board_game"),
    (lambda: _dqn(make_tictactoe), "pettingzoo_board_game"),
    (lambda: _ppo(make_connect_four, mapping=map_by_index, policies=("p0", "p1")), "pettingzoo_board_game"),
    (lambda: _scripted_config(3), "protocol"),  # the env's own get_state/set_state
], ids=["ppo-tictactoe", "dqn-tictactoe", "ppo-connect_four-two_policies", "ppo-scripted-protocol"])
def test_algorithm_saved_mid_game_resumes_bit_for_bit(tmp_path, make, env_state_kind):
    algo = make().build()
    try:
        algo.train()
        runner_state = algo.env_runner_group.local.get_state()
        assert runner_state["turn_based"] and not runner_state["needs_reset"]
        assert all(s is not None and s["kind"] == env_state_kind for s in runner_state["envs"])
        assert any(s["pending_agents"] for s in runner_state["current_obs"])  # mid-game
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
        try:
            assert_trees_equal(algo.get_state(), restored.get_state())
            assert_trains_identically(algo, restored)
        finally:
            restored.stop()
    finally:
        algo.stop()


def test_board_game_state_restores_the_game_exactly():
    from cairn.env_runner.env_state import get_env_state, set_env_state

    rng = np.random.default_rng(0)
    for make in (tictactoe_v3.env, connect_four_v3.env):
        for _ in range(20):
            env, twin = make(), make()
            env.reset()
            for _ in range(int(rng.integers(0, 12))):  # random moves, illegal ones included
                if not env.agents:
                    break
                _, _, terminated, truncated, _ = env.last()
                done = terminated or truncated
                env.step(None if done else int(rng.integers(env.action_space(env.agent_selection).n)))
            assert set_env_state(twin, get_env_state(env))
            while env.agents:
                (obs, *rest), (twin_obs, *twin_rest) = env.last(), twin.last()
                assert env.agent_selection == twin.agent_selection and rest == twin_rest
                assert_trees_equal(obs, twin_obs)
                moves = env.action_space(env.agent_selection).n
                action = None if rest[1] or rest[2] else int(rng.integers(moves))
                env.step(action)
                twin.step(action)
            assert not twin.agents


# ------------------------------------------------------------------------- policy changes
def test_a_game_in_flight_keeps_its_mapping_and_the_next_game_follows_the_new_one():
    algo = _scripted_config(2).build()
    try:
        runner = algo.env_runner_group.local
        runner.sample(3)  # mid-game: player_0 waits on its move, player_1 is to move
        config = algo.config.copy().multi_agent(policy_mapping_fn={"player_0": "a", "player_1": "a"})
        runner.update_policies(config, algo.policies)
        assert not runner.get_state()["needs_reset"]  # the games go on, player_1 still with b
        # Moves 4 and 5 end the games: player_1's move 4 is b's (player_0's moves 3 and 5 are
        # a's); the next games follow the new mapping.
        finishing = runner.sample(2)
        assert len(finishing["b"]) == 2 * 1 and len(finishing["a"]) == 2 * 2
        assert set(runner.sample(5)) == {"a"}
    finally:
        algo.stop()


def test_a_mapping_to_a_removed_policy_restarts_the_games_in_flight():
    algo = _scripted_config(2).build()
    try:
        runner = algo.env_runner_group.local
        runner.sample(3)
        config = algo.config.copy().multi_agent(policies={"a"}, policy_mapping_fn=lambda aid, **kw: "a")
        runner.update_policies(config, {"a": algo.get_policy("a")})
        assert runner.get_state()["needs_reset"]  # player_1's observation went through b's filter
        assert set(runner.sample(10)) == {"a"}
    finally:
        algo.stop()


def test_runner_state_restores_the_mapping_of_the_games_in_flight():
    algo = _scripted_config(2).build()
    try:
        runner = algo.env_runner_group.local
        runner.sample(3)
        state = runner.get_state()
        # Another mapping at restore: the games in flight keep theirs, the next ones follow it.
        config = algo.config.copy().multi_agent(policy_mapping_fn={"player_0": "b", "player_1": "a"})
        other = cairn.env_runner.EnvRunner(config, algo.policies)
        other.set_state(state)
        assert_trees_equal(other.get_state(), state)
        finishing = other.sample(2)  # player_1's move 4 is still b's
        assert len(finishing["b"]) == 2 * 1 and len(finishing["a"]) == 2 * 2
        swapped = other.sample(5)
        assert len(swapped["a"]) == 2 * 2 and len(swapped["b"]) == 2 * 3
        # A saved policy that is gone: fresh games.
        fewer = cairn.env_runner.EnvRunner(config.copy().multi_agent(
            policies={"a"}, policy_mapping_fn=lambda aid, **kw: "a"), {"a": algo.get_policy("a")})
        fewer.set_state(state)
        assert fewer.get_state()["needs_reset"]
    finally:
        algo.stop()


# ----------------------------------------------------------------------------- action masks
class NoLegalActionPolicy(cairn.Policy):
    """Acts once, then finds no legal action in batch row 0's action_mask (as a masking policy
    would raise)."""

    def compute_raw_actions(self, processed_obs: np.ndarray, *, explore: bool) -> np.ndarray:
        return self.compute_raw_actions_and_logp(processed_obs, explore=explore)[0]

    def compute_raw_actions_and_logp(self, processed_obs: np.ndarray, *,
                                     explore: bool) -> tuple[np.ndarray, np.ndarray]:
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == 2:
            raise ActionMaskError("action_mask of row 0 has no legal action", rows=(0,))
        return super().compute_raw_actions_and_logp(processed_obs, explore=explore)


@pytest.mark.parametrize("kind", ["turn_based", "parallel", "single_agent"])
def test_action_mask_error_names_agent_env_and_step(kind):
    spec = PolicySpec(policy_class=NoLegalActionPolicy)
    if kind == "turn_based":  # policy a (player_0) acts at moves 0 and 2
        config = _scripted_config(2).multi_agent(policies={"a": spec, "b": spec})
        agent, step = "player_0", 2
    elif kind == "parallel":
        from tests.helpers import small_ma_ppo

        config = small_ma_ppo(2).env_runners(num_envs_per_env_runner=2).multi_agent(
            policies={"shared": spec}, policy_mapping_fn=shared_policy)  # rows: env 0's agents first
        agent, step = "agent_0", 1
    else:
        config = cairn.PPOConfig().environment("CartPole-v1").env_runners(
            num_envs_per_env_runner=2).multi_agent(policies={"default_policy": spec}).debugging(seed=0)
        agent, step = "default_agent", 1
    algo = config.build()
    try:
        with pytest.raises(ActionMaskError) as info:
            algo.env_runner_group.local.sample(4)
        message = str(info.value)
        assert "mask" in message and f"Agent {agent!r} in env 0, at step {step} of its episode" in message
        assert "env 1" not in message  # only the row at fault
        assert info.value.rows == (0,) and isinstance(info.value.__cause__, ActionMaskError)
    finally:
        algo.stop()


class UnequalSeats(AECEnv):
    """Three players take turns for ever; player k observes k + 1 numbers (the moves so far)."""

    metadata = {"name": "unequal_seats_v0", "render_modes": []}

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["p0", "p1", "p2"]
        self.render_mode = None

    def observation_space(self, agent):
        return gym.spaces.Box(0.0, 1e6, (self.possible_agents.index(agent) + 1,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def observe(self, agent):
        return np.full(self.possible_agents.index(agent) + 1, self._moves, np.float32)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self._moves = 0
        self.agent_selection = "p0"
        for key in ("rewards", "_cumulative_rewards"):
            setattr(self, key, dict.fromkeys(self.agents, 0.0))
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}

    def step(self, action):
        self._moves += 1
        self.agent_selection = self.possible_agents[self._moves % 3]


def make_unequal_seats(env_config: dict) -> AECEnv:
    return UnequalSeats()


def test_moves_in_flight_of_unequal_observations_are_refused_at_save_with_the_fix():
    # After two moves p0's and p1's moves wait, with observation rows of 1 and 2 numbers: the
    # state keeps them as one array (a bare ValueError from numpy before).
    config = (cairn.PPOConfig().environment(make_unequal_seats).training(**SMALL)
              .multi_agent(policies={"p0", "p1", "p2"}, policy_mapping_fn={a: a for a in ("p0", "p1", "p2")})
              .debugging(seed=0))
    algo = config.build()
    try:
        runner = algo.env_runner_group.local
        runner.sample(2)
        with pytest.raises(cairn.errors.ConfigError, match=r"observation rows of different shapes.*'p0': "
                                                           r"float32\[1\], 'p1': float32\[2\].*Fix: "):
            runner.get_state()
        batches = runner.sample(3)  # the runner goes on: the save changed nothing
        assert set(batches) == {"p0", "p1", "p2"}
        assert [batches[p]["obs"].shape[1] for p in ("p0", "p1", "p2")] == [1, 2, 3]
    finally:
        algo.stop()
