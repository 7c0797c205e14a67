import copy

import pytest

from cairn.checkpoint.migrations import MIGRATIONS, MigrationRegistry, migrate, register_migration
from cairn.errors import CheckpointFormatError, UnsupportedCheckpointVersionError


def test_chain_applies_one_step_at_a_time():
    registry: MigrationRegistry = {}
    calls = []

    @register_migration("Policy", "1", "2", registry=registry)
    def one_to_two(state):
        calls.append("1->2")
        new = dict(state)
        new["renamed"] = new.pop("old")
        return new

    @register_migration("Policy", "2", "3", registry=registry)
    def two_to_three(state):
        calls.append("2->3")
        return {**state, "v3": True}

    out = migrate("Policy", {"old": 1}, "1", target="3", registry=registry)
    assert out == {"renamed": 1, "v3": True}
    assert calls == ["1->2", "2->3"]
    assert migrate("Policy", {"x": 1}, "3", target="3", registry=registry) == {"x": 1}


def test_missing_step_and_newer_versions_fail():
    registry: MigrationRegistry = {}
    with pytest.raises(UnsupportedCheckpointVersionError, match="No migration"):
        migrate("Algorithm", {}, "1", target="2", registry=registry)
    with pytest.raises(UnsupportedCheckpointVersionError, match="newer"):
        migrate("Algorithm", {}, "5", target="1", registry=registry)
    with pytest.raises(CheckpointFormatError):
        migrate("Algorithm", {}, "v1", target="1", registry=registry)


def test_only_single_steps_register():
    with pytest.raises(ValueError, match="one version at a time"):
        register_migration("Policy", "1", "3", registry={})


def test_version_2_changed_no_state_tree():
    """Format version 2 added an optional manifest key (``metadata``): 1 -> 2 is the identity
    for every kind, components included (through the ``"component"`` kind)."""
    from_1 = {key for key in MIGRATIONS if key[1] == "1"}
    assert from_1 == {("Algorithm", "1"), ("Policy", "1"), ("component", "1")}
    for kind in ("Algorithm", "Policy", "component:replay_buffer"):
        assert migrate(kind, {"a": 1}, "1") == {"a": 1}
    assert migrate("Algorithm", {"a": 1}, "2") == {"a": 1}


# Format 2 -> 3: vf_share_layers=False with use_lstm meant a shared LSTM with the value gradient
# stopped; format 3 says so with vf_share_layers=True, vf_stop_gradient=True.
FULL = {"hidden": [8], "activation": "tanh", "vf_share_layers": False, "log_std_init": 0.0,
        "use_lstm": False, "lstm_cell_size": 8, "max_seq_len": 4}
SHARED_STOPPED = {"vf_share_layers": True, "vf_stop_gradient": True}


def _effective(state, pid):
    """A policy's merged model config after the migration, as AlgorithmConfig.policy_config merges it."""
    config = state["config"]
    override = ((config["policies"][pid] or {}).get("config") or {}).get("model") or {}
    return {**config["model"], **override}


def _sharing(model):
    return {k: model.get(k, False) for k in ("vf_share_layers", "vf_stop_gradient")}


def test_format_2_lstm_policy_state_becomes_shared_with_the_value_gradient_stopped():
    state = {"spec": {"config": {"model": {**FULL, "use_lstm": True}, "lr": 1e-3}}, "weights": {"x": 1}}
    out = migrate("Policy", state, "2", target="3")
    assert out["spec"]["config"]["model"] == {**FULL, "use_lstm": True, **SHARED_STOPPED}
    assert out["weights"] == {"x": 1} and state["spec"]["config"]["model"]["vf_share_layers"] is False
    lstm_shared = {**FULL, "use_lstm": True, "vf_share_layers": True}
    for model in (FULL, {**FULL, "vf_share_layers": True}, lstm_shared):
        same = {"spec": {"config": {"model": dict(model)}}}
        assert migrate("Policy", same, "2", target="3") == same  # everything else unchanged


@pytest.mark.parametrize("shared, overrides, expected", [
    # The shared config is an LSTM's: every policy that keeps it becomes shared+stopped; one whose
    # override turns the LSTM off keeps its MLP's separate critic.
    ({**FULL, "use_lstm": True}, {"a": None, "b": {"model": {"use_lstm": False}}},
     {"a": SHARED_STOPPED, "b": {"vf_share_layers": False, "vf_stop_gradient": False}}),
    # An override turns the LSTM on over an MLP's shared config: only that policy changes meaning.
    (FULL, {"a": {"lr": 0.1}, "b": {"model": {"use_lstm": True}}},
     {"a": {"vf_share_layers": False, "vf_stop_gradient": False}, "b": SHARED_STOPPED}),
    # vf_share_layers=True already meant what it means now.
    ({**FULL, "use_lstm": True, "vf_share_layers": True}, {"a": {"model": {"hidden": [4]}}},
     {"a": {"vf_share_layers": True, "vf_stop_gradient": False}}),
])
def test_format_2_algorithm_config_keeps_every_policys_network(shared, overrides, expected):
    specs = {pid: {"policy_class": "Policy", "config": cfg} for pid, cfg in overrides.items()}
    state = {"config": {"model": dict(shared), "policies": specs, "lr": 5e-5}, "iteration": 3}
    out = migrate("Algorithm", state, "2", target="3")
    assert out["iteration"] == 3 and out["config"]["lr"] == 5e-5
    for pid, want in expected.items():
        merged = _effective(out, pid)
        assert _sharing(merged) == want, pid
        old = _effective(state, pid)  # and nothing but those two keys changed
        assert {k: v for k, v in merged.items() if k not in want} == \
            {k: v for k, v in old.items() if k not in want}
    assert state["config"]["model"] == shared  # the input is not modified


def test_format_2_states_without_model_configs_pass_through():
    assert migrate("Algorithm", {"config": None}, "2", target="3") == {"config": None}
    assert migrate("Policy", {"spec": {"config": None}}, "2", target="3") == {"spec": {"config": None}}
    assert migrate("component:league", {"x": [1]}, "2", target="3") == {"x": [1]}


# Format 3 -> 4: a parallel multi-agent runner state keeps the rows waiting across a fragment's
# end (``pending`` in each current_obs entry); format 3 kept none.
def _runner(multi_agent, turn_based, current_obs):
    return {"multi_agent": multi_agent, "turn_based": turn_based, "current_obs": current_obs, "num_envs": 2}


def test_format_3_parallel_runner_states_get_no_waiting_rows():
    parallel = _runner(True, False, [{"agents": ["a"], "obs": {}, "agent_pids": {"a": "p"}},
                                     {"agents": [], "obs": {}, "agent_pids": {}, "scripted_actions": {}}])
    turn_based = _runner(True, True, [{"to_move": None, "pending_agents": []}])
    single = _runner(False, False, [[0.0, 1.0]])
    state = {"iteration": 2, "env_runners": [parallel, turn_based, single, None],
             "evaluation_runner": copy.deepcopy(parallel)}
    before = copy.deepcopy(state)
    out = migrate("Algorithm", state, "3", target="4")
    assert state == before  # the input is not modified
    migrated = out["env_runners"][0]["current_obs"]
    assert [entry["pending"] for entry in migrated] == [[], []]
    assert [{k: v for k, v in e.items() if k != "pending"} for e in migrated] == parallel["current_obs"]
    assert out["evaluation_runner"]["current_obs"] == migrated
    # Turn-based (its own pending_* keys), single-agent and absent runners are left as they were.
    assert out["env_runners"][1:] == [turn_based, single, None]
    assert out["iteration"] == 2
    # Nothing else: no runner state, no evaluation runner, Policy and component states.
    assert migrate("Algorithm", {"config": None}, "3", target="4") == {"config": None}
    assert migrate("Algorithm", {"env_runners": [], "evaluation_runner": None}, "3", target="4") == \
        {"env_runners": [], "evaluation_runner": None}
    assert migrate("Policy", {"spec": {"x": 1}}, "3", target="4") == {"spec": {"x": 1}}
    assert migrate("component:league", {"x": [1]}, "3", target="4") == {"x": [1]}
