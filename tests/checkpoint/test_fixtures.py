"""Every frozen fixture of every format version keeps loading, acting and training."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import cairn

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
}
#: The fixtures each version has (a fixture added later, such as td3_single and ppo_lstm in
#: version 2, is absent from the versions before it).
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
