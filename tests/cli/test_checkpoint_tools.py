"""cairn checkpoint info|verify|upgrade|diff|ls."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import cairn
from cairn.checkpoint import FORMAT_VERSION, load_algorithm_state, load_policy_state, load_policy_states
from cairn.cli import main
from tests.helpers import small_cartpole

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checkpoints"
FIXTURE_DIRS = sorted(p for p in FIXTURES.glob("*/*") if p.is_dir())


def _ckpt(run, iteration):
    return run / "checkpoints" / f"checkpoint_{iteration:06d}"


def test_info(trained_run, capsys):
    for argv in (["checkpoint", "info"], ["info"]):
        assert main([*argv, str(_ckpt(trained_run, 3))]) == 0
        info = json.loads(capsys.readouterr().out)
        assert (info["type"] == "Algorithm" and info["policy_ids"] == ["default_policy"]
                and "files" not in info)


def test_verify_ok_then_one_line_per_problem(trained_run, tmp_path, capsys):
    ckpt = tmp_path / "c"
    shutil.copytree(_ckpt(trained_run, 3), ckpt)
    assert main(["checkpoint", "verify", str(ckpt)]) == 0
    assert capsys.readouterr().out.startswith(
        f"ok: {ckpt} (Algorithm checkpoint, format version {FORMAT_VERSION})")
    weights = ckpt / "policies" / "default_policy" / "policy_state.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x01  # one flipped bit in a weight
    weights.write_bytes(bytes(data))
    assert main(["checkpoint", "verify", str(ckpt)]) == 1
    captured = capsys.readouterr()
    manifest = json.loads((weights.parent / "cairn_checkpoint.json").read_text())
    assert captured.out.splitlines() == [
        f"{weights}: content hash {captured.out.split('content hash ')[1].split()[0]} does not match the "
        f"manifest's {manifest['files']['policy_state.safetensors']['hash']}"]
    assert captured.err.strip() == f"cairn: error: {ckpt}: 1 problem"
    (ckpt / "algorithm_state.json").write_text("{}")  # another size
    (ckpt / "stray.txt").write_text("?")
    assert main(["checkpoint", "verify", str(ckpt)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(f"{ckpt / 'algorithm_state.json'}: size 2 bytes, the manifest says")
    assert (lines[1].startswith(str(weights))
            and lines[2] == f"{ckpt / 'stray.txt'}: not listed in any manifest")


@pytest.mark.parametrize(("edit", "expected"), [
    ({"class": "os:system"}, "standard-library module 'os'"),
    ({"algorithm_class": "os:system", "class": "os:system"}, "standard-library module 'os'"),
    ({"class": "DQN"}, "the manifest names class 'DQN', the state 'PPO'"),
    ({"iteration": -7}, "counter 'iteration' is -7"),
])
def test_verify_checks_the_class_and_counters_as_a_load_does(edit, expected, tmp_path, capsys):
    """A re-hashed manifest or state is no corruption, but `verify` must refuse what a load
    refuses: a class a load would not resolve, or counters out of range (issue 25, item 4)."""
    from tests.checkpoint.attacks import MANIFEST, copy_base, edit_json

    ckpt = copy_base("algo", tmp_path / "c")
    for key, value in edit.items():
        edit_json(ckpt, MANIFEST if key == "class" else "algorithm_state.json",
                  lambda data, k=key, v=value: data.__setitem__(k, v), hashed=key != "class")
    assert main(["checkpoint", "verify", str(ckpt)]) == 1
    assert expected in capsys.readouterr().out


def test_verify_a_missing_checkpoint_is_one_line(tmp_path, capsys):
    assert main(["checkpoint", "verify", str(tmp_path / "none")]) == 1
    out = capsys.readouterr().out.strip()
    assert len(out.splitlines()) == 1 and str(tmp_path / "none") in out


@pytest.mark.parametrize("fixture", FIXTURE_DIRS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_upgrade_every_frozen_fixture(fixture, tmp_path, capsys):
    """Each frozen fixture becomes a current-format checkpoint with the same state (older
    versions through the migrations; the current one is rewritten as it is)."""
    out = tmp_path / "upgraded"
    version = cairn.get_checkpoint_info(fixture)["checkpoint_version"]
    assert main(["checkpoint", "upgrade", str(fixture), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    if version == FORMAT_VERSION:  # not "from format version 1 to 1": a copy, said as one
        assert printed == (f"{fixture} is already at format version {version}, the current one; "
                           f"wrote a verified copy to {out}\n")
    else:
        assert printed == f"upgraded {fixture} from format version {version} to {FORMAT_VERSION}: {out}\n"
    info = cairn.get_checkpoint_info(out)
    assert info["checkpoint_version"] == FORMAT_VERSION
    assert info["metadata"] == cairn.get_checkpoint_info(fixture)["metadata"]  # kept (2/ppo_single)
    assert main(["checkpoint", "verify", str(out)]) == 0
    load = load_algorithm_state if info["type"] == "Algorithm" else load_policy_state
    _assert_same_tree(load(out), load(fixture))
    capsys.readouterr()
    assert main(["checkpoint", "upgrade", str(out)]) == 0  # in place, already current: left alone
    assert "nothing to do" in capsys.readouterr().out


@pytest.mark.slow  # the native model export (torch.export + ONNX) takes seconds
def test_upgrade_in_place_keeps_native_model_files(tmp_path, capsys):
    from tests.helpers import small_ppo

    algo = small_ppo().checkpointing(export_native_model_files=True).build()
    try:
        path = Path(algo.save(tmp_path / "c"))
    finally:
        algo.stop()
    model = path / "policies" / "default_policy" / "model"
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    from cairn.cli.checkpoint_upgrade import upgrade_checkpoint

    written, old, new = upgrade_checkpoint(str(path))  # what `upgrade` runs on an older version
    assert Path(written) == path and old == new == FORMAT_VERSION
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before
    assert main(["checkpoint", "verify", str(path)]) == 0
    assert cairn.get_checkpoint_info(path / "policies" / "default_policy")["native_model"]["status"] == "ok"


def _assert_same_tree(a, b):
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b)
        for key in a:
            _assert_same_tree(a[key], b[key])
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same_tree(x, y)
    else:
        assert a == b


def test_diff_numbers_against_numpy(trained_run, capsys):
    a, b = _ckpt(trained_run, 1), _ckpt(trained_run, 3)
    assert main(["checkpoint", "diff", str(a), str(b), "--json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    wa = load_policy_states(a)["default_policy"]["weights"]
    wb = load_policy_states(b)["default_policy"]["weights"]
    change = diff["policies"]["default_policy"]
    deltas = {name: wb[name].astype(np.float64) - wa[name] for name in wa}
    assert change["l2"] == pytest.approx(float(np.sqrt(sum(np.sum(d * d) for d in deltas.values()))))
    assert change["max_abs"] == pytest.approx(max(float(np.abs(d).max()) for d in deltas.values()))
    for name, d in deltas.items():
        assert change["params"][name]["l2"] == pytest.approx(float(np.linalg.norm(d.ravel())))
    assert diff["settings"]["iteration"] == [1, 3]
    assert diff["settings"]["counters.num_env_steps_sampled_lifetime"] == [64, 192]
    assert main(["checkpoint", "diff", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "weights (1 of 1 shared policies changed):" in text and "  iteration: 1 -> 3" in text


def test_diff_with_itself_reports_no_change(trained_run, capsys):
    ckpt = str(_ckpt(trained_run, 2))
    assert main(["checkpoint", "diff", ckpt, ckpt, "--json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    assert (diff["policies"]["default_policy"]["l2"] == 0.0
            and diff["policies"]["default_policy"]["max_abs"] == 0.0)
    assert diff["settings"] == {} and diff["only_in_a"] == diff["only_in_b"] == []
    assert main(["checkpoint", "diff", ckpt, ckpt]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "no differences"


def test_ls(trained_run, capsys):
    for root in (trained_run, trained_run / "checkpoints"):
        assert main(["checkpoint", "ls", str(root), "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert [r["iteration"] for r in rows] == [1, 2, 3]
        progress = (trained_run / "progress.csv").read_text().splitlines()[1:]
        assert [r["episode_return_mean"] for r in rows] == [
            pytest.approx(float(line.split(",")[3])) for line in progress]
        # Every listed file counts, the policies' too (listed in their own manifests): on
        # disk there is nothing else.
        on_disk = [sum(f.stat().st_size for f in Path(r["path"]).rglob("*") if f.is_file()) for r in rows]
        assert [r["size"] for r in rows] == on_disk
        assert rows[-1]["tags"][0] == "latest"
    assert main(["checkpoint", "ls", str(trained_run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["checkpoint", "iteration", "return_mean", "size", "created"]
    assert ((lines[1].split()[:2] == ["checkpoint_000001", "1"] and lines[3].endswith("latest"))
            or "latest" in lines[3])
    assert lines[-1] == f"3 checkpoints in {trained_run / 'checkpoints'}"


def _rehash(root: Path, name: str, manifest: dict) -> None:
    from cairn.checkpoint.safetensors_io import new_hasher

    data = (root / name).read_bytes()
    hasher = new_hasher()
    hasher.update(data)
    manifest["files"][name] = {"size": len(data), "hash": hasher.hexdigest()}


def test_upgrade_runs_the_registered_migrations_in_place(tmp_path, monkeypatch, capsys):
    """An older format version (here a made-up "0" whose algorithm state called the counters
    "counts") goes through the registered one-step migrations and is rewritten, in place."""
    from cairn.checkpoint import migrations

    ckpt = tmp_path / "old"
    shutil.copytree(FIXTURES / "1" / "ppo_single", ckpt)
    root_manifest = json.loads((ckpt / "cairn_checkpoint.json").read_text())
    state = json.loads((ckpt / "algorithm_state.json").read_text())
    state["counts"] = state.pop("counters")
    (ckpt / "algorithm_state.json").write_text(json.dumps(state))
    _rehash(ckpt, "algorithm_state.json", root_manifest)
    policy_manifest_path = ckpt / "policies" / "default_policy" / "cairn_checkpoint.json"
    policy_manifest = json.loads(policy_manifest_path.read_text())
    policy_manifest["format_version"] = "0"
    policy_manifest_path.write_text(json.dumps(policy_manifest))
    _rehash(ckpt, "policies/default_policy/cairn_checkpoint.json", root_manifest)
    root_manifest["format_version"] = "0"
    (ckpt / "cairn_checkpoint.json").write_text(json.dumps(root_manifest))

    def counts_to_counters(tree):
        tree = dict(tree)
        tree["counters"] = tree.pop("counts")
        return tree

    monkeypatch.setitem(migrations.MIGRATIONS, ("Algorithm", "0"), ("1", counts_to_counters))
    monkeypatch.setitem(migrations.MIGRATIONS, ("Policy", "0"), ("1", lambda tree: tree))
    assert main(["checkpoint", "upgrade", str(ckpt)]) == 0
    assert (capsys.readouterr().out.strip()
            == f"upgraded {ckpt} from format version 0 to {FORMAT_VERSION}: {ckpt}")
    assert cairn.get_checkpoint_info(ckpt)["checkpoint_version"] == FORMAT_VERSION
    assert json.loads(policy_manifest_path.read_text())["format_version"] == FORMAT_VERSION
    assert "counts" not in json.loads((ckpt / "algorithm_state.json").read_text())
    monkeypatch.delitem(migrations.MIGRATIONS, ("Algorithm", "0"))  # no migration needed any more
    _assert_same_tree(load_algorithm_state(ckpt), load_algorithm_state(FIXTURES / "1" / "ppo_single"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]  # no temporary sibling left


def test_checkpoint_tools_take_urls_as_given(ppo_algo, capsys):
    """Locations go to the library as strings: a memory:// checkpoint is verified, diffed and
    upgraded like a local one."""
    import fsspec

    ppo_algo.save("memory://cli-tools/a")
    ppo_algo.train()
    ppo_algo.save("memory://cli-tools/b")
    assert main(["checkpoint", "verify", "memory://cli-tools/a"]) == 0
    assert main(["checkpoint", "diff", "memory://cli-tools/a", "memory://cli-tools/b", "--json"]) == 0
    capsys.readouterr()
    assert main(["checkpoint", "diff", "memory://cli-tools/a", "memory://cli-tools/b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["settings"]["iteration"] == [0, 1]
    assert main(["checkpoint", "upgrade", "memory://cli-tools/a", "--out", "memory://cli-tools/c"]) == 0
    assert main(["checkpoint", "verify", "memory://cli-tools/c"]) == 0
    fs = fsspec.filesystem("memory")
    name = "/cli-tools/b/policies/default_policy/policy_state.safetensors"
    data = bytearray(fs.cat_file(name))
    data[-1] ^= 0x10
    fs.pipe_file(name, bytes(data))
    capsys.readouterr()
    assert main(["checkpoint", "verify", "memory://cli-tools/b"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"memory:/{name}: content hash")
    fs.rm("/cli-tools", recursive=True)


def test_diff_counts_a_weight_that_became_nan_as_changed(ppo_algo, tmp_path, capsys):
    """NaN - x is NaN, and NaN > 0 is False: a weight that became NaN was reported as no change
    ("0 of 1 shared policies changed", "no differences"), the one change a user most needs."""
    import torch

    ppo_algo.train()
    ppo_algo.save(tmp_path / "a")
    with torch.no_grad():
        next(iter(ppo_algo.get_policy().model.parameters()))[0, 0] = float("nan")
    ppo_algo.save(tmp_path / "b")
    assert main(["checkpoint", "diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    text = capsys.readouterr().out
    assert "weights (1 of 1 shared policies changed):" in text and "  actor.0.weight: L2 nan" in text
    assert text.splitlines()[-1] != "no differences"
    assert main(["checkpoint", "diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    params = json.loads(capsys.readouterr().out)["policies"]["default_policy"]["params"]
    assert [name for name, p in params.items() if p["changed"]] == [next(iter(
        ppo_algo.get_policy().model.state_dict()))]
    # The same NaN on both sides is no difference.
    assert main(["checkpoint", "diff", str(tmp_path / "b"), str(tmp_path / "b")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "no differences"



def test_diff_reports_optimizer_filter_and_generator_state(ppo_algo, tmp_path, capsys):
    """Checkpoints with the same weights and settings but another optimizer state (or
    observation filter, random generators, env runners) were reported as "no differences":
    a resume from either computes different numbers."""
    ppo_algo.train()
    ppo_algo.save(tmp_path / "a")
    for state in ppo_algo.get_policy().optimizer.state.values():
        state["exp_avg"].mul_(0.5)
    ppo_algo.save(tmp_path / "b")
    assert main(["checkpoint", "diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    assert diff["settings"] == {} and diff["policies"]["default_policy"]["l2"] == 0.0
    changed = sorted(diff["state"])
    assert changed and all(key.startswith("policies.default_policy.optimizer.state.") for key in changed)
    assert all(key.endswith(".exp_avg") for key in changed)
    assert main(["checkpoint", "diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[-1] != "no differences"
    assert f"  policies.default_policy.optimizer: {len(changed)} values differ" in text
    ppo_algo.train()  # generators, env runners, episodes and counters move on
    ppo_algo.save(tmp_path / "c")
    assert main(["checkpoint", "diff", str(tmp_path / "b"), str(tmp_path / "c"), "--json"]) == 0
    parts = {key.split(".")[0] for key in json.loads(capsys.readouterr().out)["state"]}
    assert {"rng", "env_runners", "recent_episodes", "policies"} <= parts
    assert main(["checkpoint", "diff", str(tmp_path / "c"), str(tmp_path / "c"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == {}


def test_info_of_a_run_directory_shows_its_latest_checkpoint(trained_run, capsys):
    """`cairn info RUN` failed ('has no cairn_checkpoint.json') where evaluate, export and league
    take a run directory; it now summarises the run's newest checkpoint, named in the output."""
    for argv in (["info"], ["checkpoint", "info"]):
        for where in (trained_run, trained_run / "checkpoints"):
            assert main([*argv, str(where)]) == 0
            info = json.loads(capsys.readouterr().out)
            assert Path(info["checkpoint_dir"]).name == "checkpoint_000003" and info["type"] == "Algorithm"
    assert main(["info", str(trained_run), "--component", "policies/default_policy"]) == 0
    assert json.loads(capsys.readouterr().out)["type"] == "Policy"


def test_ls_of_a_checkpoint_says_what_to_pass(trained_run, capsys):
    """`cairn checkpoint ls CKPT` printed "no checkpoints in CKPT" and exited 0, as if the run
    had none; a checkpoint is not a root of checkpoints, and the error says what is."""
    ckpt = _ckpt(trained_run, 3)
    assert main(["checkpoint", "ls", str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert f"cairn: error: {ckpt} is a checkpoint, not a run directory" in err
    assert f"cairn checkpoint info {ckpt}" in err and f"cairn checkpoint ls {trained_run}" in err


def test_a_manifest_that_lost_its_components_list_is_refused(tmp_path, capsys):
    """One flipped byte in the manifest's key "components" ("bomponents") hid the replay buffer
    the checkpoint lists among its files: the hashes all matched, `verify` said ok and a load
    restored no buffer. Listed component files that no listed component owns are corruption."""
    from cairn.errors import CheckpointFormatError

    algo = small_cartpole("dqn").checkpointing(store_replay_buffer=True).build()
    try:
        algo.train()
        path = Path(algo.save(tmp_path / "c"))
    finally:
        algo.stop()
    manifest_file = path / "cairn_checkpoint.json"
    text = manifest_file.read_text()
    assert '"components": [' in text and '"components/replay_buffer/' in text
    manifest_file.write_text(text.replace('"components": [', '"bomponents": [', 1))
    assert main(["checkpoint", "verify", str(path)]) == 1
    err = capsys.readouterr().out
    assert "components/replay_buffer/" in err and "'components'" in err
    with pytest.raises(CheckpointFormatError, match="components/replay_buffer/"):
        load_algorithm_state(path)


def test_ls_shows_a_checkpoint_whose_manifest_cannot_be_read(trained_run, tmp_path, capsys):
    """A checkpoint_<N> whose manifest is there but cannot be read was left out of the listing and
    the count with no sign that it exists. The table now names it with the reader's error; the
    JSON list keeps its shape (the readable checkpoints) and the damaged one is named on stderr."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    (run / "checkpoints" / "checkpoint_000002" / "cairn_checkpoint.json").write_text("{not json")
    assert main(["checkpoint", "ls", str(run)]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    damaged = [line for line in lines if line.startswith("checkpoint_000002")]
    assert len(damaged) == 1 and "cannot be read" in damaged[0] and "cairn_checkpoint.json" in damaged[0]
    assert lines[-1] == (f"2 checkpoints in {run / 'checkpoints'}, and 1 that cannot be read: "
                         "checkpoint_000002")
    assert main(["checkpoint", "ls", str(run), "--json"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert [r["iteration"] for r in rows] == [1, 3]  # the list's entries as before
    assert "checkpoint_000002" in captured.err and "cannot be read" in captured.err
    # Only checkpoints with a manifest count: a save still being written (no manifest yet) is not damage.
    (run / "checkpoints" / "checkpoint_000004").mkdir()
    assert main(["checkpoint", "ls", str(run)]) == 0
    assert "checkpoint_000004" not in capsys.readouterr().out


def test_ls_of_a_folder_whose_only_checkpoint_cannot_be_read(trained_run, tmp_path, capsys):
    root = tmp_path / "checkpoints"
    root.mkdir()
    shutil.copytree(trained_run / "checkpoints" / "checkpoint_000001", root / "checkpoint_000001")
    (root / "checkpoint_000001" / "cairn_checkpoint.json").write_bytes(b"\xff\xfe")
    assert main(["checkpoint", "ls", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("checkpoint_000001") and "cannot be read" in lines[0]
    assert lines[-1] == f"no checkpoints in {root}, and 1 that cannot be read: checkpoint_000001"


@pytest.mark.parametrize(("x", "y"), [(True, 1), (False, 0), ([True, 2], [1, 2])])
def test_diff_tells_a_bool_from_a_number(ppo_algo, tmp_path, capsys, x, y):
    """``True == 1`` in Python, so a setting stored as ``true`` in one checkpoint and ``1`` in
    the other (an env_config flag an env reads with ``is True``, or as a count) was reported as
    "no differences", though the checkpoints hold different JSON and a restore differs."""
    from cairn.checkpoint import write_algorithm_checkpoint

    ppo_algo.save(tmp_path / "saved")
    for name, value in (("a", x), ("b", y)):
        state = load_algorithm_state(tmp_path / "saved")
        state["config"]["env_config"] = {"flag": value}
        write_algorithm_checkpoint(tmp_path / name, state)
    assert main(["checkpoint", "diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["settings"] == {"config.env_config.flag": [x, y]}
    assert main(["checkpoint", "diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] != "no differences"
    assert main(["checkpoint", "diff", str(tmp_path / "a"), str(tmp_path / "a"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["settings"] == {}


@pytest.mark.parametrize("action", ["verify", "upgrade", "diff"])
def test_checkpoint_tools_of_one_checkpoint_refuse_a_run_directory(trained_run, action, capsys):
    """`cairn checkpoint verify RUN` printed "RUN is not a cairn checkpoint ... 1 problem" and
    exited 1, as if a checkpoint were damaged, where info, evaluate, export and league take a run
    directory; verify, upgrade and diff act on given checkpoints, so the error (a usage error)
    names the run's newest checkpoint to pass and the command that lists the others."""
    newest = _ckpt(trained_run, 3)
    for where in (trained_run, trained_run / "checkpoints"):
        args = [str(where), str(newest)] if action == "diff" else [str(where)]
        assert main(["checkpoint", action, *args]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert f"cairn: error: {where} is a run directory, not a checkpoint" in captured.err
        takes = f"cairn checkpoint {action} takes a checkpoint, such as the run's newest: {newest};"
        assert takes in captured.err
        assert f"cairn checkpoint ls {trained_run}" in captured.err
    assert main(["checkpoint", "verify", str(newest)]) == 0  # a checkpoint itself is verified as before
    assert capsys.readouterr().out.startswith("ok: ")
