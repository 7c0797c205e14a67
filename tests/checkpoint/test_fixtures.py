"""Every frozen fixture of every format version keeps loading, acting and training."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import cairn
from tests.helpers import assert_trains_identically, assert_trees_equal

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checkpoints"
VERSIONS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
EXPECTED = {
    "ppo_single": ("Algorithm", ["default_policy"]),
    "ppo_multi": ("Algorithm", ["p0", "p1", "p2"]),
    "policy": ("Policy", None),
    "sac_single": ("Algorithm", ["default_policy"]),
    "td3_single": ("Algorithm", ["default_policy"]),
    "ppo_lstm": ("Algorithm", ["default_policy"]),
    "impala_single": ("Algorithm", ["default_policy"]),
    "appo_single": ("Algorithm", ["default_policy"]),
    "ppo_parallel_pending": ("Algorithm", ["p0", "p1"]),
}
#: The fixtures each version has (a fixture added later, such as td3_single and ppo_lstm in
#: version 2, and ppo_parallel_pending in version 4, is absent from the versions before it).
CASES = [(version, name) for version in VERSIONS for name in sorted(EXPECTED)
         if (FIXTURES / version / name).is_dir()]


def test_there_are_fixtures_for_the_current_version():
    assert cairn.checkpoint.FORMAT_VERSION in VERSIONS
    assert {name for version, name in CASES if version == cairn.checkpoint.FORMAT_VERSION} == set(EXPECTED)


def test_every_version_from_2_on_has_an_lstm_fixture():
    assert all((FIXTURES / v / "ppo_lstm").is_dir() for v in VERSIONS if int(v) >= 2)


@pytest.mark.parametrize(("version", "name"), CASES)
def test_fixture_loads_acts_and_trains(tmp_path, version, name):
    path = FIXTURES / version / name
    info = cairn.get_checkpoint_info(path)
    kind, policy_ids = EXPECTED[name]
    assert info["type"] == kind
    assert info["checkpoint_version"] == version
    assert info["policy_ids"] == policy_ids
    obs = np.array([0.01, -0.02, 0.03, 0.0], dtype=np.float32)
    if kind == "Policy":
        policy = cairn.Policy.from_checkpoint(path)
        assert policy.compute_single_action(obs, explore=False) in (0, 1)
        return
    algo = cairn.Algorithm.from_checkpoint(path)
    if name.startswith(("sac", "td3")):
        # The greedy actions it computed when it was written, to float32 rounding.
        expected = json.loads((FIXTURES / version / f"{name}.expected.json").read_text())
        for obs_row, action in zip(expected["obs"], expected["actions"], strict=True):
            got = algo.compute_single_action(np.array(obs_row, dtype=np.float32))
            np.testing.assert_allclose(got, action, rtol=0, atol=1e-6)
        assert len(algo.replay_buffers["default_policy"]) > 0
        if name.startswith("td3"):  # saved between two delayed actor updates
            assert algo.get_policy().num_grad_updates % 2 == 1
    elif name == "ppo_lstm":
        check_lstm_fixture(algo, FIXTURES / version / f"{name}.expected.json")
    elif name in ("impala_single", "appo_single"):
        check_vtrace_fixture(algo, FIXTURES / version / f"{name}.expected.json")
    elif name == "ppo_parallel_pending":
        check_pending_fixture(algo, FIXTURES / version / f"{name}.expected.json")
    else:
        for pid in policy_ids:
            assert algo.compute_single_action(obs, policy_id=pid) in (0, 1)
    before = algo.iteration
    assert algo.train()["training_iteration"] == before + 1
    # Saving a restored fixture writes the current version, which loads again.
    again = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "resaved"))
    assert again.iteration == before + 1


def check_lstm_fixture(algo, expected_path):
    """The LSTM fixture computes the greedy actions, logits and values it computed when written
    (to float32 rounding), through the acting path (state carried) and the learner's forward."""
    expected = json.loads(expected_path.read_text())
    policy = algo.get_policy()
    state = policy.get_initial_state()
    for obs_row, action in zip(expected["obs"], expected["actions"], strict=True):
        got, state = policy.compute_single_action(np.array(obs_row, dtype=np.float32), state=state,
                                                  explore=False)
        assert int(got) == action
    obs = torch.from_numpy(policy.process_observations(np.array(expected["obs"], np.float32), update=False))
    with torch.inference_mode():
        initial = [torch.from_numpy(s)[None] for s in policy.get_initial_state()]
        inputs, values, _ = policy.model(obs[None], initial)
    np.testing.assert_allclose(inputs[0].numpy(), expected["action_inputs"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(values[0].numpy(), expected["values"], rtol=0, atol=1e-6)


def check_vtrace_fixture(algo, expected_path):
    """An IMPALA or APPO fixture computes the greedy actions, logits and values it computed when
    written (to float32 rounding); APPO's also keeps its target network (which differs from the
    network), KL weight and train batch count."""
    expected = json.loads(expected_path.read_text())
    assert type(algo).__name__ == ("APPO" if "target_action_inputs" in expected else "IMPALA")
    policy = algo.get_policy()
    for obs_row, action in zip(expected["obs"], expected["actions"], strict=True):
        assert int(algo.compute_single_action(np.array(obs_row, dtype=np.float32))) == action
    obs = torch.from_numpy(policy.process_observations(np.array(expected["obs"], np.float32), update=False))
    with torch.inference_mode():
        inputs, values = policy.model(obs)
        np.testing.assert_allclose(inputs.numpy(), expected["action_inputs"], rtol=0, atol=1e-6)
        np.testing.assert_allclose(values.numpy(), expected["values"], rtol=0, atol=1e-6)
        if "target_action_inputs" in expected:
            target = policy.target_model(obs)[0].numpy()
            np.testing.assert_allclose(target, expected["target_action_inputs"], rtol=0, atol=1e-6)
            assert not np.allclose(target, inputs.numpy(), rtol=0, atol=1e-6)
            assert (policy.kl_coeff, policy.num_train_batches) == \
                (expected["kl_coeff"], expected["num_train_batches"])


def test_format_2_lstm_restores_and_upgrades_to_the_gradient_stopped_shared_lstm(tmp_path):
    """Format 2's use_lstm with vf_share_layers=False was one LSTM shared by both heads, the value
    gradient stopped at it: restored, and after ``cairn checkpoint upgrade``, it is that network
    (vf_share_layers=True, vf_stop_gradient=True) and computes what it computed when written."""
    from cairn.cli.checkpoint_upgrade import upgrade_checkpoint

    fixture = FIXTURES / "2" / "ppo_lstm"
    upgraded, old, new = upgrade_checkpoint(str(fixture), str(tmp_path / "upgraded"))
    assert (old, new) == ("2", cairn.checkpoint.FORMAT_VERSION)
    for path in (fixture, upgraded):
        algo = cairn.Algorithm.from_checkpoint(path)
        model_config = algo.get_policy().config["model"]
        assert model_config["vf_share_layers"] is True and model_config["vf_stop_gradient"] is True
        assert algo.config.model["vf_stop_gradient"] is True
        net = algo.get_policy().model
        assert net.vf_stop_gradient and net.critic_lstm is None
        check_lstm_fixture(algo, FIXTURES / "2" / "ppo_lstm.expected.json")
        algo.stop()


@pytest.mark.parametrize("version", [v for v in VERSIONS if int(v) <= 3])
def test_parallel_fixtures_before_format_4_resume_with_no_waiting_rows(version):
    """Format 3 and before kept no rows waiting across a fragment's end: the migration gives each
    parallel env entry an empty ``pending``, and the episode in flight goes on (not reset)."""
    algo = cairn.Algorithm.from_checkpoint(FIXTURES / version / "ppo_multi")
    try:
        state = algo.env_runner_group.local.get_state()
        assert state["multi_agent"] and not state["turn_based"] and not state["needs_reset"]
        assert [entry["pending"] for entry in state["current_obs"]] == [[] for _ in state["current_obs"]]
    finally:
        algo.stop()


def check_pending_fixture(algo, expected_path):
    """The parallel fixture restores the episodes in flight (each env at t = 3 of its second
    episode, tests/checkpoint/fixture_envs.py) and, in each env, a1's row of t = 2 waiting for
    its next observation: every field as the runner held it when the fixture was written."""
    expected = json.loads(expected_path.read_text())["pending"]
    state = algo.env_runner_group.local.get_state()
    assert state["multi_agent"] and not state["turn_based"] and not state["needs_reset"]
    assert [env["state"] for env in state["envs"]] == [{"t": 3, "agents": ["a0", "a1"]}] * 2
    assert [entry["agents"] for entry in state["current_obs"]] == [["a0"], ["a0"]]  # a1 waits
    assert len(state["current_obs"]) == len(expected) == 2
    for entry, rows in zip(state["current_obs"], expected, strict=True):
        [row] = entry["pending"]
        [want] = rows
        assert set(row) == set(want)
        assert (row["agent"], row["reward"], row["terminated"], row["truncated"], row["first"]) == \
            ("a1", 1.0, False, False, False)  # acted at t = 2, paid 1 at t = 3, not observed since
        assert row["obs"].dtype == np.float32 and row["obs"].tolist() == [2.0, 1.0]
        assert row["action"].tolist() == want["action"] and want["action"] in (0, 1)
        assert row["action_logp"] == want["action_logp"] and row["action_logp"] < 0
        assert [s.dtype for s in row["state_in"]] == [np.float32] * len(want["state_in"])
        for got, saved in zip(row["state_in"], want["state_in"], strict=True):
            np.testing.assert_array_equal(got, np.array(saved, np.float32))


def _carried_rows(batch):
    """p1's rows of a1's observation at t = 2, in a fragment that starts at t = 3: only the rows
    that waited across the fragment's end (each env's next a1 row of t = 2 is in its next episode,
    beyond the fragment)."""
    rows = np.flatnonzero(np.asarray(batch["obs"])[:, 0] == 2)
    return {key: np.asarray(value)[rows] for key, value in batch.items()}


@pytest.mark.parametrize("version", [v for v in VERSIONS if (FIXTURES / v / "ppo_parallel_pending").is_dir()])
def test_parallel_fixture_sends_its_waiting_rows_and_resumes_as_a_resaved_copy(tmp_path, version):
    """The waiting rows of the frozen parallel fixture are sent by the next fragment, completed
    (their true next observation, the rewards paid meanwhile, the saved action, log-probability
    and recurrent state), and the fixture trains on exactly as its copy saved at the current
    format version and loaded again does (the same machine runs both: nothing here depends on
    the float behaviour of the machine that wrote the fixture)."""
    path = FIXTURES / version / "ppo_parallel_pending"
    expected = json.loads((FIXTURES / version / "ppo_parallel_pending.expected.json").read_text())["pending"]
    algo = cairn.Algorithm.from_checkpoint(path)
    try:
        check_pending_fixture(algo, FIXTURES / version / "ppo_parallel_pending.expected.json")
        resaved = algo.save(tmp_path / "resaved")
        assert cairn.get_checkpoint_info(resaved)["checkpoint_version"] == cairn.checkpoint.FORMAT_VERSION
        again = cairn.Algorithm.from_checkpoint(resaved)
        try:
            runner, other = algo.env_runner_group.local, again.env_runner_group.local
            assert_trees_equal(other.get_state(), runner.get_state())
            a, b = runner.sample(5), other.sample(5)
            assert set(a) == set(b) == {"p0", "p1"}
            for pid in a:
                assert_trees_equal(dict(a[pid]), dict(b[pid]), f"sample/{pid}")
            carried = _carried_rows(a["p1"])
            # One per env, matched to the saved rows by their log-probability (the envs' order in
            # a batch is not the point here).
            order = np.argsort(carried["action_logp"])
            saved = sorted(expected, key=lambda rows: rows[0]["action_logp"])
            assert len(order) == len(saved) == 2
            for i, [want] in zip(order, saved, strict=True):
                assert carried["obs"][i].tolist() == [2.0, 1.0]
                assert carried["next_obs"][i].tolist() == [4.0, 1.0]  # its true next observation
                assert carried["rewards"][i] == 2.0  # paid at t = 3 (saved) and t = 4
                assert not carried["firsts"][i] and not carried["terminateds"][i]
                assert not carried["truncateds"][i]
                assert carried["actions"][i] == want["action"]
                assert carried["action_logp"][i] == np.float32(want["action_logp"])
                for k, state_in in enumerate(want["state_in"]):
                    np.testing.assert_array_equal(carried[f"state_in_{k}"][i], np.array(state_in, np.float32))
            before = algo.iteration
            assert_trains_identically(algo, again, iterations=2)
            assert algo.iteration == again.iteration == before + 2
        finally:
            again.stop()
    finally:
        algo.stop()
