"""Attack corpus, part 2: state a checkpoint carries that loads and would run wrong (issue 37,
item 7). Each value is checked before use: NaN or infinite recurrent states, env indices and
agents that are not the runner's, turn-based boards and selections that do not fit the game, and
settings (threads, replay capacity) no machine can honour. Each refusal names the checkpoint and
the key. Importing this module adds its cases to :data:`corpus.ATTACKS`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cairn.errors import CheckpointConfigError, CheckpointFormatError
from tests.checkpoint.attacks import edit_json, safetensors_bytes, safetensors_parts, write_bytes
from tests.checkpoint.attacks.corpus import ASTATE, _config, _set, attack

AARRAYS = "algorithm_state.safetensors"
RECURRENT = ["env_runners", 0, "recurrent_states"]
TURN = ["env_runners", 0, "current_obs", 0]
BOARD = ["env_runners", 0, "envs", 0, "state"]


def _fill_array(root: Path, name: str, value: float) -> None:
    """Overwrite every element of the float32 array ``name`` in the algorithm's arrays file."""
    header, body = safetensors_parts((root / AARRAYS).read_bytes())
    start, end = header[name]["data_offsets"]
    assert header[name]["dtype"] == "F32", header[name]
    data = bytearray(body)
    data[start:end] = np.full((end - start) // 4, value, dtype="<f4").tobytes()
    write_bytes(root, AARRAYS, safetensors_bytes(header, bytes(data)))


def _edit(path: list[Any], value: Any) -> Any:
    return lambda root, _: edit_json(root, ASTATE, _set(path, value))


# ------------------------------------------------- recurrent states in flight (LSTM base)
for _name, _value in [("nan", float("nan")), ("inf", float("inf"))]:
    attack(f"recurrent_state_{_name}", CheckpointFormatError, ("algo",), "lstm",
           names=("recurrent_states[0]['state']",))(
        lambda root, _, v=_value: _fill_array(root, "env_runners/0/recurrent_states/0/state/1", v))
for _name, _value in [("negative", -1), ("huge", 10**30), ("float", 1.0), ("past_end", 2)]:
    attack(f"recurrent_state_env_{_name}", CheckpointFormatError, ("algo",), "lstm",
           names=("recurrent_states[0]['env']",))(_edit([*RECURRENT, 0, "env"], _value))
attack("recurrent_state_agent_unknown", CheckpointFormatError, ("algo",), "lstm",
       names=("recurrent_states[1]['agent']",))(_edit([*RECURRENT, 1, "agent"], "ghost"))
@attack("recurrent_state_twice", CheckpointFormatError, ("algo",), "lstm", names=("recurrent_states[1]",))
def _(root: Path, _s: Path) -> None:
    def fn(state: Any) -> None:
        entries = state["env_runners"][0]["recurrent_states"]
        entries[1]["env"] = entries[0]["env"]
    edit_json(root, ASTATE, fn)

# --------------------------------------------------------------- settings no machine honours
attack("config_torch_num_threads_3000", CheckpointConfigError, ("algo",),
       names=("torch_num_threads", "3000"))(_config("torch_num_threads", 3000))
attack("config_replay_capacity_5e8", CheckpointConfigError, ("algo",), "dqn",
       names=("replay_buffer_config.capacity", "500000000"))(
    _edit(["config", "replay_buffer_config", "capacity"], 500_000_000))

# ------------------------------------------------- a turn-based game in flight (tic-tac-toe)
# Env 0 of the base, mid-game: one player to move, the other's move pending (which one, and the
# board, follow the seed: the cases about who moves edit relative to the saved state).
for _name, _path, _value in [
        ("board_value", [*BOARD, "board"], [7, 2, 1, 2, 1, 2, 2, 1, 1]),
        ("board_short", [*BOARD, "board"], [0, 2, 1]),
        # Square 0 taken under an observation that says it is free: "Location is not empty".
        ("board_under_observation", [*BOARD, "board"], [1, 2, 1, 2, 1, 2, 2, 1, 1]),
        ("agent_selection", [*BOARD, "agent_selection"], "nobody"),
        ("agents_unknown", [*BOARD, "agents"], ["player_1", "ghost"]),
        ("selector_agent", [*BOARD, "selector", "selected_agent"], "nobody"),
        ("selector_index", [*BOARD, "selector", "current_agent"], 5),
        ("agent_dicts", [*BOARD, "agent_dicts", "rewards"], {}),
        ("to_move_none", [*TURN, "to_move"], None),
        ("pending_rows", [*TURN, "pending_agents"], ["player_2", "player_1"])]:
    _key = str(_path[-1]) if _path[-2] not in ("to_move", "agent_dicts") else str(_path[-2])
    attack(f"turn_based_{_name}", CheckpointFormatError, ("algo",), "tictactoe", names=(_key,))(
        _edit(_path, _value))


def _entry(state: Any) -> Any:
    entry = state
    for key in TURN:
        entry = entry[key]
    return entry


@attack("turn_based_to_move_not_selected", CheckpointFormatError, ("algo",), "tictactoe", names=("to_move",))
def _(root: Path, _s: Path) -> None:
    def fn(state: Any) -> None:  # the player whose move is pending, not the env's selected one
        entry = _entry(state)
        assert entry["pending_agents"] and entry["to_move"]["agent"] not in entry["pending_agents"]
        entry["to_move"]["agent"] = entry["pending_agents"][0]
    edit_json(root, ASTATE, fn)


@attack("turn_based_pending_is_to_move", CheckpointFormatError, ("algo",), "tictactoe",
        names=("pending_agents",))
def _(root: Path, _s: Path) -> None:
    def fn(state: Any) -> None:  # the player to move said to wait for its last move's outcome
        entry = _entry(state)
        entry["pending_agents"] = [entry["to_move"]["agent"]]
    edit_json(root, ASTATE, fn)
