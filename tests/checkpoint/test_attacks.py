"""Hostile and broken checkpoints (tests/checkpoint/attacks/corpus.py) are refused with the right
CheckpointError subclass, without running code, within bounded memory, in under a second."""

from __future__ import annotations

import contextlib
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.algorithms.algorithm import Algorithm
from cairn.checkpoint import get_checkpoint_info
from cairn.errors import CheckpointCorruptedError, CheckpointError
from cairn.policy.policy import Policy
from tests.checkpoint.attacks import MANIFEST, base_checkpoints, copy_base, edit_json
from tests.checkpoint.attacks.corpus import ATTACKS, Attack

#: Address space a load may add to the process (the base checkpoint is a few kB; the point is
#: that a few bytes of hostile JSON cannot make the reader allocate gigabytes).
MEMORY_HEADROOM = 1 << 30
TIME_LIMIT_S = 1.0


def _vm_size() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")


@contextlib.contextmanager
def bounded_memory() -> Iterator[None]:
    """Cap the address space at its current size plus MEMORY_HEADROOM while loading."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _vm_size() + MEMORY_HEADROOM
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def load(loader: str, path: Path) -> None:
    if loader == "info":
        get_checkpoint_info(path)
    elif loader == "policy":
        Policy.from_checkpoint(path)
    else:
        Algorithm.from_checkpoint(path).stop()


@pytest.fixture
def canary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "canary"
    monkeypatch.setenv("CAIRN_CANARY", str(path))
    return path


def test_corpus_is_large_and_distinct() -> None:
    names = [a.name for a in ATTACKS]
    assert len(set(names)) == len(names)
    assert sum(a.error is not None for a in ATTACKS) >= 40


def test_base_checkpoints_load() -> None:
    """The corpus starts from checkpoints that load: each refusal is due to its change."""
    root = base_checkpoints()
    for kind, loaders in (("algo", ("info", "algo", "policy")), ("policy", ("info", "policy"))):
        for loader in loaders:
            load(loader, root / kind)


@pytest.mark.parametrize("case", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_is_refused(case: Attack, tmp_path: Path, canary: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    root = copy_base(case.base, tmp_path / "checkpoint")
    case.mutate(root, scratch)
    for loader in case.loaders:
        start = time.perf_counter()
        with bounded_memory():
            if case.error is None:
                load(loader, root)
            else:
                with pytest.raises(CheckpointError) as info:
                    load(loader, root)
        elapsed = time.perf_counter() - start
        if case.error is not None:
            assert isinstance(info.value, case.error), (
                f"{loader}: expected {case.error.__name__}, got {type(info.value).__name__}: {info.value}")
            message = str(info.value)
            assert message and "allocate" not in message, message
            for text in (str(root), *case.names) if case.names else ():
                assert text in message, f"{loader}: the message does not name {text!r}: {message}"
        assert not canary.exists(), f"{loader}: the payload ran: {canary.read_text()}"
        assert elapsed < TIME_LIMIT_S, f"{loader} took {elapsed:.2f}s"


@pytest.mark.parametrize("rel", [
    MANIFEST.replace(MANIFEST, "algorithm_state.json"), "algorithm_state.safetensors",
    f"policies/default_policy/{MANIFEST}", "policies/default_policy/policy_state.json",
    "policies/default_policy/policy_state.safetensors",
])
@pytest.mark.parametrize("change", ["bitflip", "truncate", "append"])
def test_unhashed_change_is_caught_by_hash_or_size(rel: str, change: str, tmp_path: Path) -> None:
    """The trivial path: any change to a listed file, not re-hashed, is corruption, named."""
    root = copy_base("algo", tmp_path / "checkpoint")
    data = bytearray((root / rel).read_bytes())
    if change == "bitflip":
        data[len(data) // 2] ^= 0x01
    elif change == "truncate":
        del data[-1:]
    else:
        data += b" "
    (root / rel).write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptedError, match=rel.rsplit("/", 1)[-1]):
        Algorithm.from_checkpoint(root)


@pytest.mark.parametrize("logger", ["MLflowLogger", "WandbLogger"])
def test_loading_a_checkpoint_that_names_a_logger_writes_and_connects_nothing(
        logger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading has no side effects outside the process: a logger named by a checkpoint starts
    its run at the first train() result, not when the checkpoint loads (on main, MLflowLogger
    created mlflow.db in the working directory and WandbLogger raised wandb's own error)."""
    pytest.importorskip(logger.replace("Logger", "").lower(), reason="the logger's extra")
    root = copy_base("algo", tmp_path / "checkpoint")
    edit_json(root, "algorithm_state.json",
              lambda s: s["config"].__setitem__("callbacks_class", f"cairn.callbacks.loggers:{logger}"))
    work, home = tmp_path / "cwd", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    for name in ("MLFLOW_TRACKING_URI", "WANDB_MODE", "WANDB_DIR", "WANDB_API_KEY", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    algo = Algorithm.from_checkpoint(root)
    assert type(algo.callbacks).__name__ == logger
    algo.stop()
    assert sorted(p.name for p in work.iterdir()) == [] and sorted(p.name for p in home.iterdir()) == []


@pytest.mark.slow  # the first train() of an LSTM policy in a process: about 5 s of warm-up
def test_a_refused_recurrent_state_leaves_the_algorithm_usable(tmp_path: Path) -> None:
    """The failure path of an in-place restore: an LSTM checkpoint whose in-flight state holds NaN
    is refused by restore(), and the algorithm trains on from fresh episodes with finite weights
    (on main the state loaded and the next train() made every weight NaN)."""
    import numpy as np

    from tests.checkpoint.attacks.corpus_state import _fill_array

    good = copy_base("lstm", tmp_path / "good")
    bad = copy_base("lstm", tmp_path / "bad")
    _fill_array(bad, "env_runners/0/recurrent_states/0/state/0", float("nan"))
    algo = Algorithm.from_checkpoint(good)
    try:
        with pytest.raises(CheckpointError, match=r"recurrent_states\[0\]\['state'\]") as info:
            algo.restore(bad)
        assert str(bad) in str(info.value)
        algo.train()
        weights = algo.get_policy().get_weights()
        assert all(np.isfinite(w).all() for w in weights.values())
    finally:
        algo.stop()
