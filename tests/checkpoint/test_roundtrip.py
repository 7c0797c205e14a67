"""Save and restore: Algorithm and Policy checkpoints, from_state, every checkpoint form."""

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest

import cairn
from cairn.checkpoint.format import FORMAT_VERSION, MANIFEST_FILE
from cairn.errors import CheckpointError
from tests.helpers import small_ppo


def _weights_equal(a, b):
    wa, wb = a.get_weights(), b.get_weights()
    return wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)


def test_save_writes_the_documented_layout(ma_algo, tmp_path):
    ma_algo.train()
    path = Path(ma_algo.save(tmp_path / "ckpt"))
    assert path == tmp_path / "ckpt"
    names = {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()}
    assert {MANIFEST_FILE, "algorithm_state.json", "algorithm_state.safetensors"} <= names
    for pid in ("p0", "p1", "p2"):
        assert {f"policies/{pid}/{MANIFEST_FILE}", f"policies/{pid}/policy_state.json",
                f"policies/{pid}/policy_state.safetensors"} <= names
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    assert manifest["format"] == "cairn-checkpoint" and manifest["format_version"] == FORMAT_VERSION
    assert manifest["type"] == "Algorithm" and manifest["class"] == "PPO"
    assert manifest["policy_ids"] == ["p0", "p1", "p2"]
    assert set(manifest["versions"]) >= {"cairn", "torch", "gymnasium", "python"}
    for name, entry in manifest["files"].items():
        assert (path / name).stat().st_size == entry["size"]
    assert not list(tmp_path.glob(".*cairn-tmp*"))


def test_get_checkpoint_info_reads_the_manifest_only(ppo_algo, tmp_path):
    path = ppo_algo.save(tmp_path / "c")
    (Path(path) / "algorithm_state.json").write_text("garbage")  # not read by info
    info = cairn.get_checkpoint_info(path)
    assert info["type"] == "Algorithm"
    assert info["checkpoint_version"] == FORMAT_VERSION
    assert info["format"] == "cairn-checkpoint"
    assert info["checkpoint_dir"] == str(path)
    assert info["state_file"].endswith("algorithm_state.json")
    assert info["policy_ids"] == ["default_policy"]
    assert info["cairn_version"] == cairn.__version__
    ppo_algo.get_policy().export_checkpoint(tmp_path / "p")
    policy_info = cairn.get_checkpoint_info(tmp_path / "p")
    assert policy_info["type"] == "Policy" and policy_info["policy_ids"] is None


def test_from_checkpoint_needs_no_config(ppo_algo, tmp_path):
    ppo_algo.train()
    path = ppo_algo.save(tmp_path / "c")
    restored = cairn.Algorithm.from_checkpoint(path)
    assert type(restored) is cairn.PPO
    assert restored.iteration == 1
    assert restored.config.to_dict() == ppo_algo.config.to_dict()
    assert _weights_equal(restored.get_policy(), ppo_algo.get_policy())
    assert restored.counters == ppo_algo.counters


def test_default_save_path_is_numbered_under_log_dir(tmp_path):
    algo = small_ppo().debugging(log_dir=str(tmp_path / "logs")).build()
    algo.train()
    assert algo.save() == str(tmp_path / "logs" / "checkpoint_000001")


def test_restore_in_place_and_save_over_existing(ppo_algo, tmp_path):
    path = ppo_algo.save(tmp_path / "c")
    before = ppo_algo.get_policy().get_weights()
    ppo_algo.train()
    ppo_algo.save(path)  # replaces the old checkpoint atomically
    after = ppo_algo.get_policy().get_weights()
    ppo_algo.train()
    ppo_algo.restore(path)
    assert ppo_algo.iteration == 1
    now = ppo_algo.get_policy().get_weights()
    assert all(np.array_equal(now[k], after[k]) for k in now)
    assert not all(np.array_equal(before[k], after[k]) for k in now)


def test_from_state_in_memory(ma_algo):
    ma_algo.train()
    state = ma_algo.get_state()
    clone = cairn.Algorithm.from_state(state)
    for pid in ma_algo.policies:
        assert _weights_equal(clone.get_policy(pid), ma_algo.get_policy(pid))
    ma_algo.train()
    clone.train()
    for pid in ma_algo.policies:
        assert _weights_equal(clone.get_policy(pid), ma_algo.get_policy(pid))


def test_policy_checkpoint_alone(ppo_algo, tmp_path):
    ppo_algo.train()
    policy = ppo_algo.get_policy()
    assert policy.export_checkpoint(tmp_path / "pol") is None
    loaded = cairn.Policy.from_checkpoint(tmp_path / "pol")
    assert isinstance(loaded, cairn.Policy)
    assert _weights_equal(loaded, policy)
    assert loaded.num_grad_updates == policy.num_grad_updates
    obs = np.random.default_rng(0).uniform(-0.1, 0.1, (20, 4)).astype(np.float32)
    assert np.array_equal(loaded.compute_actions(obs, explore=False),
                          policy.compute_actions(obs, explore=False))
    from_state = cairn.Policy.from_state(policy.get_state())
    assert _weights_equal(from_state, policy)


def test_policy_from_algorithm_checkpoint_returns_dict(ma_algo, tmp_path):
    path = ma_algo.save(tmp_path / "c")
    policies = cairn.Policy.from_checkpoint(path)
    assert set(policies) == {"p0", "p1", "p2"}
    subset = cairn.Policy.from_checkpoint(path, policy_ids=["p1"])
    assert set(subset) == {"p1"}
    # Each policies/<id>/ folder is itself a complete Policy checkpoint.
    alone = cairn.Policy.from_checkpoint(Path(path) / "policies" / "p2")
    assert _weights_equal(alone, ma_algo.get_policy("p2"))


class _ToDirectory:
    def __init__(self, path):
        self.path = path

    def to_directory(self):
        return str(self.path)


class _AsDirectory:
    def __init__(self, path):
        self.path = path

    @contextlib.contextmanager
    def as_directory(self):
        yield str(self.path)


@pytest.mark.parametrize("form", ["str", "pathlike", "file_url", "to_directory", "as_directory"])
def test_every_checkpoint_form(ppo_algo, tmp_path, form):
    path = Path(ppo_algo.save(tmp_path / "c"))
    arg = {"str": str(path), "pathlike": path, "file_url": path.as_uri(),
           "to_directory": _ToDirectory(path), "as_directory": _AsDirectory(path)}[form]
    assert cairn.get_checkpoint_info(arg)["type"] == "Algorithm"
    assert _weights_equal(cairn.Algorithm.from_checkpoint(arg).get_policy(), ppo_algo.get_policy())


def test_topology_and_overrides_at_restore(tmp_path):
    algo = small_ppo().env_runners(num_envs_per_env_runner=2).build()
    algo.train()
    path = algo.save(tmp_path / "c")
    restored = cairn.Algorithm.from_checkpoint(
        path, config_overrides={"num_envs_per_env_runner": 3, "lr": 1e-4, "seed": 7})
    assert restored.config.lr == 1e-4 and restored.config.num_envs_per_env_runner == 3
    assert restored.get_policy().optimizer.param_groups[0]["lr"] == 1e-4
    assert restored.train()["training_iteration"] == 2


def test_lambda_mapping_warns_and_must_be_passed(tmp_path):
    from tests.helpers import small_ma_ppo

    algo = small_ma_ppo(2).multi_agent(policy_mapping_fn=lambda aid, **kw: "p" + aid[-1]).build()
    with pytest.warns(UserWarning, match="policy_mapping_fn"):
        path = algo.save(tmp_path / "c")
    with pytest.raises(cairn.errors.MissingCallableError, match="policy_mapping_fn=..."):
        cairn.Algorithm.from_checkpoint(path)
    restored = cairn.Algorithm.from_checkpoint(path, policy_mapping_fn=lambda aid, **kw: "p" + aid[-1])
    assert set(restored.policies) == {"p0", "p1"}


def test_memory_mapped_files_restore_and_stay_private(ppo_algo, tmp_path, monkeypatch):
    from cairn.checkpoint import dirhandle

    monkeypatch.setattr(dirhandle, "MMAP_MIN_BYTES", 1)  # map every file, as for large ones
    ppo_algo.train()
    path = Path(ppo_algo.save(tmp_path / "c"))
    on_disk = (path / "policies/default_policy/policy_state.safetensors").read_bytes()
    restored = cairn.Algorithm.from_checkpoint(path)
    assert _weights_equal(restored.get_policy(), ppo_algo.get_policy())
    ppo_algo.train()
    restored.train()  # writes to the mapped parameters: copy-on-write, never to the file
    assert _weights_equal(restored.get_policy(), ppo_algo.get_policy())
    assert (path / "policies/default_policy/policy_state.safetensors").read_bytes() == on_disk


def test_restore_in_place_adds_policies_the_object_lacks(tmp_path):
    from tests.helpers import small_ma_ppo

    three = small_ma_ppo(3).build()
    three.train()
    path = three.save(tmp_path / "c")
    two = small_ma_ppo(2).build()  # agents 0 and 1, policies p0 and p1
    two.restore(path)
    assert set(two.policies) == {"p0", "p1", "p2"}
    assert _weights_equal(two.get_policy("p2"), three.get_policy("p2"))
    assert two.train()["learners"].keys() == {"p0", "p1"}  # p2 has no agent in this env
    assert "p2" in two.config.to_dict()["policies"]


def _assert_restore_refused_and_unchanged(algo: cairn.Algorithm, path: str, match: str) -> None:
    """``algo.restore(path)`` raises (``match``) and leaves ``algo`` exactly as it was: its whole
    state, replay buffers included; then it trains on."""
    from tests.helpers import assert_trees_equal

    before = algo.get_state()
    with pytest.raises(CheckpointError, match=match):
        algo.restore(path)
    assert_trees_equal(algo.get_state(), before)
    algo.train()


def test_a_restore_that_one_policy_refuses_changes_no_policy(tmp_path):
    """p1's network does not fit the stored p1: the restore is refused before p0, which does
    fit, is overwritten, and before the counters, the runners and the config change or the
    stored policy p2 is added."""
    from cairn.policy.spec import PolicySpec
    from tests.helpers import small_ma_ppo

    saved = small_ma_ppo(3).build()
    saved.train()
    path = saved.save(tmp_path / "c")
    saved.stop()
    live = small_ma_ppo(2).multi_agent(policies={"p0": PolicySpec(), "p1": PolicySpec(
        config={"model": {"hidden": [8]}})}).build()
    try:
        for _ in range(2):
            live.train()
        _assert_restore_refused_and_unchanged(live, path, "does not fit|has shape")
        assert set(live.policies) == set(live.config.policies) == {"p0", "p1"}
    finally:
        live.stop()


def test_a_restore_that_the_replay_buffers_refuse_changes_nothing(tmp_path):
    """A checkpoint of uniform replay buffers restored into a DQN configured for prioritized
    ones: refused with everything as it was, the live buffers kept."""
    from tests.helpers import small_ma_dqn

    saved = small_ma_dqn().build()
    saved.train()
    path = saved.save(tmp_path / "c")
    saved.stop()
    live = small_ma_dqn().training(replay_buffer_config={"type": "prioritized"}).build()
    try:
        for _ in range(2):
            live.train()
        sizes = {pid: len(buffer) for pid, buffer in live.replay_buffers.items()}
        assert sizes and all(sizes.values())
        _assert_restore_refused_and_unchanged(live, path, "replay buffer")
    finally:
        live.stop()


def test_from_checkpoint_whose_state_the_config_refuses_stops_what_it_built(tmp_path):
    """An override makes the replay buffers prioritized, the checkpoint's are uniform: the
    algorithm built for the state is stopped before the error reaches the caller."""
    from tests.callbacks.hooks import CALLS, CountingCallbacks
    from tests.helpers import small_ma_dqn

    saved = small_ma_dqn().callbacks(CountingCallbacks).build()
    saved.train()
    path = saved.save(tmp_path / "c")
    saved.stop()
    CALLS.clear()
    prioritized = {"replay_buffer_config": {"type": "prioritized"}}
    with pytest.raises(CheckpointError, match="replay buffer"):
        cairn.Algorithm.from_checkpoint(path, config_overrides=prioritized)
    assert CALLS["on_algorithm_init"] == CALLS["on_algorithm_stop"] == 1


def _small_league() -> cairn.AlgorithmConfig:
    from tests.league.games import small_league

    return small_league()


def _small_impala() -> cairn.AlgorithmConfig:
    from tests.algorithms.impala.small import small

    config: cairn.AlgorithmConfig = small("IMPALA")
    return config


def _dqn_with_credit() -> cairn.AlgorithmConfig:
    from tests.helpers import small_ma_dqn

    return small_ma_dqn().training(training_intensity=5.0)  # 8 rows: 2.5 updates, credit 0.5


#: A part of the state that its owner refuses: the config, the path to a value, the bad value.
_REFUSED_PARTS = {
    "ppo_reward_normalizer": (lambda: small_ppo(normalize_rewards=True),
                              ("extra", "reward_normalizers", "default_policy", "epsilon"), "x"),
    "off_policy_update_credit": (_dqn_with_credit, ("extra", "update_credit", "p1"), "x"),
    "impala_weights_version": (_small_impala, ("extra", "weights_version"), "x"),
    "league": (_small_league, ("league", "games"), "x"),
    "counters": (small_ppo, ("counters", "num_episodes_lifetime"), "x"),
    "generator": (small_ppo, ("rng", "bit_generator"), "NoSuchGenerator"),
}


@pytest.mark.parametrize("part", list(_REFUSED_PARTS))
def test_a_state_that_any_part_refuses_changes_nothing(part):
    """set_state of a state whose extra state (PPO's reward normalisers, the replay ratio's
    credit, IMPALA's weights_version), league, counters or generator is refused leaves the whole
    algorithm as it was (the policies, counters, runners and the rest were already replaced
    when the extra state and the league were set last); then it trains on."""
    import copy

    from tests.helpers import assert_trees_equal

    make_config, path, bad = _REFUSED_PARTS[part]
    saved = make_config().build()
    try:
        saved.train()
        state = copy.deepcopy(saved.get_state())
    finally:
        saved.stop()
    node = state
    for key in path[:-1]:
        node = node[key]
    assert path[-1] in node
    node[path[-1]] = bad
    live = make_config().build()
    try:
        for _ in range(2):
            live.train()
        before = live.get_state()
        with pytest.raises((ValueError, CheckpointError)):
            live.set_state(state)
        assert_trees_equal(live.get_state(), before)
        live.train()
    finally:
        live.stop()


def test_an_env_that_refuses_its_state_leaves_the_rest_restored(tmp_path):
    """A user env's set_state cannot be checked before it runs: when it raises, everything but
    the env runners is the checkpoint's (the evaluation runner's state too), the runner has the
    checkpoint's counters and starts new episodes, and the next train() works, in step."""
    from tests.fault_injection import (
        InjectedError,
        assert_counters_agree,
        assert_rows_in_step,
        assert_runner_in_step,
        make_step_record_env,
        step_record_env_config,
    )
    from tests.helpers import assert_trees_equal

    faults = step_record_env_config(tmp_path, fail_in="set_state")
    Path(faults["fail_file"]).touch()  # disarmed until the restore
    config = (small_ppo(train_batch_size=64, minibatch_size=32)
              .environment(make_step_record_env, env_config=faults).env_runners(num_envs_per_env_runner=2))
    saved = config.build()
    try:
        saved.train()
        saved.evaluate(num_episodes=1)
        path = saved.save(tmp_path / "c")
        stored = saved.get_state()
    finally:
        saved.stop()
    live = config.build()
    try:
        for _ in range(2):
            live.train()
        Path(faults["fail_file"]).unlink()
        with pytest.raises(CheckpointError, match=InjectedError.__name__):
            live.restore(path)
        assert_trees_equal({k: v for k, v in live.get_state().items() if k != "env_runners"},
                           {k: v for k, v in stored.items() if k != "env_runners"})
        runner_state = live.env_runner_group.get_state()[0]
        assert runner_state["needs_reset"]
        assert runner_state["counters"] == stored["env_runners"][0]["counters"]
        assert_counters_agree(live)
        live.train()
        assert_counters_agree(live)
        assert_runner_in_step(live)
        runner = live.env_runner_group.local
        assert runner is not None
        assert_rows_in_step(runner.sample()["default_policy"], faults["length"])
    finally:
        live.stop()


def test_extra_state_set_before_refused_replay_buffers_is_set_back():
    """set_state sets the extra state before the components: when the replay buffers then refuse
    theirs (uniform into a prioritized DQN), the replay ratio's credit, already replaced by the
    state's, is set back to the live one (a guard for the undo, which nothing else reaches)."""
    from tests.helpers import assert_trees_equal

    saved = _dqn_with_credit().build()
    try:
        saved.train()
        state = saved.get_state()
    finally:
        saved.stop()
    state["extra"]["update_credit"] = {"p0": 0.25, "p1": 0.75}
    live = _dqn_with_credit().training(replay_buffer_config={"type": "prioritized"}).build()
    try:
        live.train()
        before = live.get_state()
        assert before["extra"]["update_credit"] != state["extra"]["update_credit"]
        with pytest.raises(ValueError, match="replay buffer"):
            live.set_state(state)
        assert_trees_equal(live.get_state(), before)
        live.train()
    finally:
        live.stop()
