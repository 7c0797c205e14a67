"""One test per CheckpointError class: each names the file or value and what to do."""

import json
import shutil
from pathlib import Path

import pytest

import cairn
from cairn.checkpoint.safetensors_io import new_hasher
from cairn.errors import (
    CheckpointCorruptedError,
    CheckpointError,
    CheckpointFormatError,
    CheckpointNotFoundError,
    MissingCallableError,
    UnknownPolicyIdError,
    UnsafeCheckpointError,
    UnsupportedCheckpointVersionError,
)


@pytest.fixture
def ckpt(ppo_algo, tmp_path):
    return Path(ppo_algo.save(tmp_path / "c"))


def _rewrite_manifest(path: Path, **changes):
    manifest = json.loads((path / "cairn_checkpoint.json").read_text())
    manifest.update(changes)
    (path / "cairn_checkpoint.json").write_text(json.dumps(manifest))


def _rehash(path: Path, name: str):
    manifest = json.loads((path / "cairn_checkpoint.json").read_text())
    data = (path / name).read_bytes()
    h = new_hasher()
    h.update(data)
    manifest["files"][name] = {"size": len(data), "hash": h.hexdigest()}
    (path / "cairn_checkpoint.json").write_text(json.dumps(manifest))


def test_all_errors_are_checkpoint_errors():
    for cls in (CheckpointNotFoundError, CheckpointCorruptedError, CheckpointFormatError,
                UnsupportedCheckpointVersionError, UnsafeCheckpointError, UnknownPolicyIdError,
                MissingCallableError):
        assert issubclass(cls, CheckpointError)


def test_not_found(tmp_path, ckpt):
    with pytest.raises(CheckpointNotFoundError, match="not a directory"):
        cairn.Algorithm.from_checkpoint(tmp_path / "nope")
    (ckpt / "cairn_checkpoint.json").unlink()
    with pytest.raises(CheckpointNotFoundError, match="no cairn_checkpoint.json"):
        cairn.get_checkpoint_info(ckpt)


def test_a_folder_of_checkpoints_names_the_newest_to_pass(ppo_algo, tmp_path):
    """Algorithm.from_checkpoint of a cairn train run directory (or get_checkpoint_info of a
    CheckpointManager root) said only "no cairn_checkpoint.json. Pass the directory that
    Algorithm.save() ... wrote": a newcomer who passed the run folder learnt nothing of the
    checkpoints inside it."""
    root = tmp_path / "run" / "checkpoints"
    for iteration in (2, 10):  # numeric order, not the names' order, picks the newest
        ppo_algo.save(root / f"checkpoint_{iteration:06d}")
    (root / "checkpoint_000011").mkdir()  # a save in progress (no manifest) is no checkpoint yet
    newest = root / "checkpoint_000010"
    # from_checkpoint takes a manager root (its latest checkpoint), not the run folder above it;
    # get_checkpoint_info reads one checkpoint's manifest, so a manager root is refused there.
    for where, read in ((tmp_path / "run", cairn.Algorithm.from_checkpoint),
                        (tmp_path / "run", cairn.Policy.from_checkpoint), (root, cairn.get_checkpoint_info)):
        with pytest.raises(CheckpointNotFoundError) as info:
            read(where)
        message = str(info.value)
        assert message.startswith(f"{where} is not a cairn checkpoint: it has no cairn_checkpoint.json.")
        assert f"It holds checkpoints: pass one of them, such as the newest, {newest}." in message
    with pytest.raises(CheckpointNotFoundError) as info:  # an empty folder: nothing to suggest
        cairn.get_checkpoint_info(tmp_path)
    assert "It holds checkpoints" not in str(info.value)


def test_missing_file(ckpt):
    (ckpt / "algorithm_state.safetensors").unlink()
    with pytest.raises(CheckpointNotFoundError, match="algorithm_state.safetensors"):
        cairn.Algorithm.from_checkpoint(ckpt)


def test_wrong_size_and_hash(ckpt, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(ckpt, other)
    with open(ckpt / "algorithm_state.json", "ab") as f:
        f.write(b" ")
    with pytest.raises(CheckpointCorruptedError, match="algorithm_state.json has .* bytes"):
        cairn.Algorithm.from_checkpoint(ckpt)
    target = other / "policies/default_policy/policy_state.safetensors"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptedError, match="does not match its hash"):
        cairn.Algorithm.from_checkpoint(other)


def test_bad_json(ckpt):
    (ckpt / "algorithm_state.json").write_text("{not json")
    _rehash(ckpt, "algorithm_state.json")
    with pytest.raises(CheckpointCorruptedError, match="not valid JSON"):
        cairn.Algorithm.from_checkpoint(ckpt)


def test_unknown_format(ckpt):
    _rewrite_manifest(ckpt, format="someone-elses-format")
    with pytest.raises(CheckpointFormatError, match="someone-elses-format"):
        cairn.get_checkpoint_info(ckpt)


def test_newer_version(ckpt):
    _rewrite_manifest(ckpt, format_version=str(int(cairn.checkpoint.FORMAT_VERSION) + 1))
    with pytest.raises(UnsupportedCheckpointVersionError, match="Upgrade cairn"):
        cairn.Algorithm.from_checkpoint(ckpt)


def test_wrong_kind(ckpt, ppo_algo, tmp_path):
    ppo_algo.get_policy().export_checkpoint(tmp_path / "pol")
    with pytest.raises(CheckpointFormatError, match="Policy.from_checkpoint"):
        cairn.Algorithm.from_checkpoint(tmp_path / "pol")
    with pytest.raises(CheckpointFormatError, match="is a Policy checkpoint, but an Algorithm checkpoint is"):
        cairn.Algorithm.from_checkpoint(tmp_path / "pol")  # not "a Algorithm"


def test_unsafe_class_reference(ckpt):
    _rewrite_manifest(ckpt)  # keep manifest valid; tamper with the state's class reference
    state = json.loads((ckpt / "algorithm_state.json").read_text())
    state["algorithm_class"] = "os:system"
    (ckpt / "algorithm_state.json").write_text(json.dumps(state))
    _rehash(ckpt, "algorithm_state.json")
    with pytest.raises(UnsafeCheckpointError, match="os:system"):
        cairn.Algorithm.from_checkpoint(ckpt)


def test_unsafe_path(ckpt):
    manifest = json.loads((ckpt / "cairn_checkpoint.json").read_text())
    manifest["files"]["../outside.json"] = {"size": 1, "hash": "00"}
    (ckpt / "cairn_checkpoint.json").write_text(json.dumps(manifest))
    with pytest.raises(UnsafeCheckpointError, match="escapes"):
        cairn.get_checkpoint_info(ckpt)


def test_unknown_policy_id_error(ckpt):
    with pytest.raises(UnknownPolicyIdError, match="'ghost'.*default_policy"):
        cairn.Algorithm.from_checkpoint(ckpt, policy_ids=["ghost"])


def test_missing_callable(tmp_path):
    algo = cairn.PPOConfig().environment(lambda cfg: __import__("gymnasium").make("CartPole-v1")).training(
        train_batch_size=64, minibatch_size=32).build()
    with pytest.warns(UserWarning, match="'env'"):
        path = algo.save(tmp_path / "c")
    with pytest.raises(MissingCallableError, match="config_overrides=\\{'env'"):
        cairn.Algorithm.from_checkpoint(path)
    import gymnasium as gym

    restored = cairn.Algorithm.from_checkpoint(
        path, config_overrides={"env": lambda cfg: gym.make("CartPole-v1")})
    assert restored.iteration == 0


def test_a_stored_config_without_policies_is_a_config_error(ckpt):
    # Found by the fuzzer: this escaped from the config as a bare StopIteration.
    from cairn.errors import CheckpointConfigError
    from tests.checkpoint.attacks import rehash

    state = json.loads((ckpt / "algorithm_state.json").read_text())
    state["config"]["policies"] = {}
    (ckpt / "algorithm_state.json").write_text(json.dumps(state))
    rehash(ckpt, "algorithm_state.json")
    with pytest.raises(CheckpointConfigError, match="policies is empty"):
        cairn.Algorithm.from_checkpoint(ckpt)


def test_an_unstorable_mapping_warns_that_main_functions_are_not_storable_either(tmp_path):
    """Issue 25, item 12: the warning said "define it at module level", but a module-level
    function of the script run as __main__ is not storable either."""
    from tests.helpers import small_ma_ppo

    algo = small_ma_ppo(2).multi_agent(policy_mapping_fn=lambda agent_id, **kw: f"p{agent_id[-1]}").build()
    try:
        with pytest.warns(UserWarning, match="policy_mapping_fn.*no import path") as record:
            algo.save(tmp_path / "c")
    finally:
        algo.stop()
    message = str(record[0].message)
    assert "policy_mapping_fn=..." in message and "not the script run as __main__" in message
    assert record[0].filename == __file__  # shown at the caller's line
