"""Hostile and broken checkpoints (tests/checkpoint/attacks/corpus.py) are refused with the right
CheckpointError subclass, without running code, within bounded memory, in under a second."""

from __future__ import annotations

import contextlib
import importlib
import itertools
import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import cairn
from cairn.algorithms.algorithm import Algorithm
from cairn.checkpoint import get_checkpoint_info
from cairn.errors import CheckpointCorruptedError, CheckpointError, UnsafeCheckpointError
from cairn.policy.policy import Policy
from cairn.registry import resolve_reference
from tests.checkpoint.attacks import MANIFEST, base_checkpoints, copy_base, edit_json, rehash
from tests.checkpoint.attacks.corpus import ATTACKS, Attack
from tests.checkpoint.attacks.inside import (
    PLACES,
    PSTATE,
    algorithm_class,
    callbacks_class,
    env_creator,
    keras_model_in_policy_spec,
    mapping_fn,
    write_payload,
)

#: Address space a load may add to the process (the base checkpoint is a few kB; the point is
#: that a few bytes of hostile JSON cannot make the reader allocate gigabytes).
MEMORY_HEADROOM = 1 << 30
#: CPU seconds a load may use: the parsers are linear, and a few kB take milliseconds. CPU time,
#: not wall-clock: on a loaded machine a load also waits for a core, which says nothing about
#: the parser (with two busy loops on this 2-core VM, the recurrent-state cases took 0.58 s of
#: the 1 s wall-clock limit this replaces).
CPU_LIMIT_S = 1.0
#: Wall-clock seconds a load may take: it never waits on anything (a FIFO is refused without
#: being opened for reading), so only a wait, never scheduling, comes near this.
WAIT_LIMIT_S = 60.0


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
        start, start_cpu = time.perf_counter(), time.process_time()
        with bounded_memory():
            if case.error is None:
                load(loader, root)
            else:
                with pytest.raises(CheckpointError) as info:
                    load(loader, root)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        if case.error is not None:
            assert isinstance(info.value, case.error), (
                f"{loader}: expected {case.error.__name__}, got {type(info.value).__name__}: {info.value}")
            message = str(info.value)
            assert message and "allocate" not in message, message
            for text in (str(root), *case.names) if case.names else ():
                assert text in message, f"{loader}: the message does not name {text!r}: {message}"
        assert not canary.exists(), f"{loader}: the payload ran: {canary.read_text()}"
        assert cpu < CPU_LIMIT_S, f"{loader} used {cpu:.2f} s of CPU"
        assert elapsed < WAIT_LIMIT_S, f"{loader} took {elapsed:.2f} s"


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


# ---------------------------------------------- code shipped inside a checkpoint (issue 37)
_unique = itertools.count()


@pytest.fixture
def on_sys_path() -> Iterator[Callable[[Path], None]]:
    """Put directories first on sys.path for the test (as ``python -c`` or Jupyter put the
    working directory), and forget every module imported from them afterwards."""
    added: list[str] = []

    def add(directory: Path) -> None:
        added.append(str(directory))
        sys.path.insert(0, str(directory))
        importlib.invalidate_caches()

    before = set(sys.modules)
    yield add
    for entry in added:
        sys.path.remove(entry)
    for name in set(sys.modules) - before:
        module = sys.modules[name]
        if any(str(getattr(module, "__file__", None) or "").startswith(d) for d in added) or (
                any(str(p).startswith(d) for p in getattr(module, "__path__", ()) for d in added)):
            del sys.modules[name]
    importlib.invalidate_caches()


def _refused_without_running(loads: list[tuple[str, Path]], canary: Path, module: str) -> None:
    for loader, path in loads:
        with pytest.raises(CheckpointError) as info:
            load(loader, path)
        assert not canary.exists(), f"{loader} {path}: the payload ran: {canary.read_text()}"
        assert module.split(".")[0] not in sys.modules, f"{loader}: {module} was imported"
        assert isinstance(info.value, UnsafeCheckpointError), (
            f"{loader}: {type(info.value).__name__}: {info.value}")
        assert "inside the checkpoint" in str(info.value), str(info.value)


@pytest.mark.parametrize("layout", ["module", "package", "manager_root"])
@pytest.mark.parametrize(("place", "mutate", "loaders"), PLACES, ids=[p[0] for p in PLACES])
def test_code_inside_the_checkpoint_never_runs(
        layout: str, place: str, mutate: Callable[[Path, str], None], loaders: tuple[str, ...],
        tmp_path: Path, canary: Path, on_sys_path: Callable[[Path], None]) -> None:
    """`victimckpt.payload:Evil` (payload.py shipped in the checkpoint, its parent on sys.path),
    a regular package inside the checkpoint (the checkpoint itself on sys.path), or a module in
    the manager root holding the checkpoint: refused by location before import, at every place
    a checkpoint names code, by every loader (a manager root's latest included)."""
    name = f"victimckpt{next(_unique)}_{layout}"
    if layout == "module":
        root = copy_base("algo", tmp_path / name)
        write_payload(root)
        module, loads = f"{name}.payload", [(loader, root) for loader in loaders]
        on_sys_path(tmp_path)
    elif layout == "package":
        root = copy_base("algo", tmp_path / "checkpoint")
        write_payload(root, name, package=True)
        module, loads = name, [(loader, root) for loader in loaders]
        on_sys_path(root)
    else:
        manager_root = tmp_path / name
        manager_root.mkdir()
        root = copy_base("algo", manager_root / "checkpoint_000001")
        write_payload(manager_root)
        module = f"{name}.payload"
        loads = [("algo", manager_root)] + [(loader, root) for loader in loaders]
        on_sys_path(tmp_path)
    mutate(root, module)
    _refused_without_running(loads, canary, module)


@pytest.mark.parametrize(("reference", "place"), [
    ("test.support:Evil", algorithm_class), ("test.support:Evil", callbacks_class),
    ("__hello__:main", keras_model_in_policy_spec), ("__hello__:main", env_creator),
    ("__phello__.spam:main", mapping_fn),
])
def test_standard_library_outside_its_name_list_is_refused_before_import(
        reference: str, place: Callable[[Path, str], None], tmp_path: Path) -> None:
    """``test`` and ``__hello__`` are not in sys.stdlib_module_names: refused by location (the
    stdlib directory, frozen modules), and never imported (``__hello__.main`` would print)."""
    module, _, function = reference.partition(":")
    if module in sys.modules:
        pytest.skip(f"{module} was imported before this test")
    root = copy_base("algo", tmp_path / "checkpoint")
    edit = place.__name__
    place(root, module)
    if function != "Evil":  # the places name '<module>:evil' for functions
        (root / "algorithm_state.json").write_text(
            (root / "algorithm_state.json").read_text().replace(f"{module}:evil", reference))
        (root / PSTATE).write_text((root / PSTATE).read_text().replace(f"{module}:evil", reference))
        rehash(root, "algorithm_state.json")
        rehash(root, PSTATE)
    with pytest.raises(UnsafeCheckpointError, match="standard library"):
        load("algo", root)
    assert module not in sys.modules and module.split(".")[0] not in sys.modules, edit
    with pytest.raises(UnsafeCheckpointError, match="standard library"):  # from a config too
        resolve_reference(reference, what="x", base=None if function != "Evil" else object)
    assert module.split(".")[0] not in sys.modules


def test_namespace_package_is_refused_before_import(
        tmp_path: Path, canary: Path, on_sys_path: Callable[[Path], None]) -> None:
    """A directory without __init__.py, anywhere on sys.path, is a namespace package: refused
    for a checkpoint's reference before anything in it is imported."""
    name = f"nspkg{next(_unique)}"
    (tmp_path / "elsewhere" / name).mkdir(parents=True)
    write_payload(tmp_path / "elsewhere" / name)
    on_sys_path(tmp_path / "elsewhere")
    root = copy_base("algo", tmp_path / "checkpoint")
    callbacks_class(root, f"{name}.payload")
    with pytest.raises(UnsafeCheckpointError, match="namespace package"):
        load("algo", root)
    assert not canary.exists() and name not in sys.modules


def test_cli_never_suggests_importing_from_inside_a_checkpoint(
        tmp_path: Path, canary: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run by the ``cairn`` script (the working directory, which holds the checkpoint, is not
    on sys.path), the load fails with "module not found"; the CLI's fix must not be
    ``--import victimckpt.payload``, which would import the payload from the checkpoint."""
    from cairn.cli.env_names import restore_hint

    name = f"victimckpt{next(_unique)}"
    root = copy_base("algo", tmp_path / name)
    write_payload(root)
    algorithm_class(root, f"{name}.payload")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError) as info:
        Algorithm.from_checkpoint(root)
    hint = restore_hint(info.value) or ""
    assert f"--import {name}" not in hint and "hostile" in hint, hint
    assert not canary.exists()


_STRICT_MODULE = '''\
import os
from pathlib import Path
import cairn
Path(os.environ["CAIRN_CANARY"]).write_text("imported")


class TrustedCallbacks(cairn.Callbacks):
    pass
'''


@pytest.mark.parametrize("trusted", [None, [], ["numpy"], "env"])
def test_strict_mode_imports_only_named_modules(
        trusted: Any, tmp_path: Path, canary: Path, on_sys_path: Callable[[Path], None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """cairn.trust_modules([...]) (or $CAIRN_TRUSTED_MODULES): a checkpoint may make cairn
    import only the modules named; an installed, regular third-party module is refused before
    import unless named. None: the default mode imports it."""
    name = f"usercallbacks{next(_unique)}"
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / f"{name}.py").write_text(_STRICT_MODULE)
    on_sys_path(tmp_path / "site")
    root = copy_base("algo", tmp_path / "checkpoint")
    callbacks_class(root, name)
    (root / "algorithm_state.json").write_text(
        (root / "algorithm_state.json").read_text().replace(f"{name}:Evil", f"{name}:TrustedCallbacks"))
    rehash(root, "algorithm_state.json")
    try:
        if trusted == "env":
            monkeypatch.setenv("CAIRN_TRUSTED_MODULES", "numpy")
        elif trusted is not None:
            cairn.trust_modules(trusted)
        if trusted is None:
            load("algo", root)
            assert canary.exists()  # the default mode: an installed module is imported
            return
        with pytest.raises(UnsafeCheckpointError, match="strict mode"):
            load("algo", root)
        assert not canary.exists() and name not in sys.modules
        cairn.trust_modules(["numpy", name])
        load("algo", root)
        assert canary.exists()
    finally:
        cairn.trust_modules(None)
