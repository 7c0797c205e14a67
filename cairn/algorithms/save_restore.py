"""An Algorithm's checkpoint entry points, apart from its class body.

The checkpoint layer stores and reads state trees; this module turns an algorithm into one and
back. :func:`prepare_algorithm_save` hands ``get_state()`` to the writer with callbacks that
write native model files (cairn.export); :func:`algorithm_from_checkpoint` reads a tree, checks
that it describes an algorithm and its policies (:func:`check_algorithm_state`,
:func:`~cairn.policy.state_check.check_policy_state`, and :func:`check_env_reference`), and
hands it to the builder; :func:`from_state_inputs` says what that builds.
``export_policy_checkpoint`` and ``export_policy_model`` write one policy on its own, through
the policy's :meth:`~cairn.policy.policy.Policy.export_checkpoint` and
:meth:`~cairn.policy.policy.Policy.export_model`.

None of it knows the Algorithm class: a live algorithm is a :class:`CheckpointedAlgorithm`,
and a class is only checked against the one a checkpoint names. The Algorithm's own
checkpointing component (:class:`~cairn.algorithms.checkpointer.AlgorithmCheckpointer`) calls
these.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, cast

from cairn.algorithms.state import check_algorithm_state
from cairn.checkpoint import (
    CheckpointClassMismatchError,
    NativeFiles,
    get_checkpoint_info,
    load_algorithm_state,
    restoring,
    write_algorithm_checkpoint,
)
from cairn.checkpoint.manager import resolve_checkpoint
from cairn.checkpoint.manifest import check_metadata
from cairn.checkpoint.paths import CheckpointLike
from cairn.checkpoint.reference_scope import loading_checkpoint
from cairn.checkpoint.storage import check_save_location, resolve_storage
from cairn.config.algorithm_config import AlgorithmConfig, PolicyMapping
from cairn.config.checks import check_env
from cairn.config.restore import restored_config
from cairn.core import AlgorithmLike, Stateful
from cairn.errors import (
    CheckpointEnvError,
    ConfigError,
    UnsafeCheckpointError,
)
from cairn.policy.config_overrides import with_model_classes
from cairn.policy.files import native_files_writer
from cairn.policy.keras_config import uses_keras
from cairn.policy.policy import Policy
from cairn.policy.state_check import finite_checked
from cairn.policy_ids import check_policy_ids
from cairn.registry import (
    CALLABLE_KEY,
    resolve_class,
    warn_main_module_references,
)

__all__ = [
    "CheckpointedAlgorithm",
    "algorithm_from_checkpoint",
    "restore_algorithm",
    "check_algorithm_state",
    "check_env_known",
    "check_env_reference",
    "from_state_inputs",
    "prepare_algorithm_save",
    "save_algorithm",
]

Built = TypeVar("Built")


class CheckpointedAlgorithm(Stateful, Protocol):
    """What saving and restoring need of a live algorithm: its state tree (``get_state``, which
    gathers the learners' state first, and ``set_state``), its policies (native model files,
    component restores) and its config (whether to export native model files).
    :class:`~cairn.algorithms.algorithm.Algorithm` is one."""

    @property
    def config(self) -> AlgorithmConfig:
        """The algorithm's current config."""
        ...

    @property
    def policies(self) -> Mapping[str, Policy]:
        """The live policies by ID."""
        ...

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_state` output in place (``Policy.set_state``'s finite check)."""
        ...


def save_algorithm(algo: CheckpointedAlgorithm, path: str | os.PathLike[str], *,
                   storage_options: Mapping[str, Any] | None = None,
                   previous: str | os.PathLike[str] | None = None,
                   metadata: Mapping[str, Any] | None = None) -> str:
    """Write ``algo`` as an Algorithm checkpoint at ``path`` (atomically, or committed by its
    manifest on an object store); return the location written. The same as
    ``prepare_algorithm_save(algo, path, snapshot=False, ...)()``.

    Args:
        path: A local path, a ``file://`` URL, or an object-store URL (``s3://``, ``gs://``,
            ``memory://``; docs/storage.md).
        storage_options: Options of the URL's fsspec file system (e.g. s3fs's ``key``,
            ``secret``, ``client_kwargs={"endpoint_url": ...}``).
        previous: An earlier checkpoint on the same store: a policy's files that would be the
            same bytes as there (proven by hashing the state as it would be written) are linked
            or copied server-side from it instead of written (incremental save;
            :func:`cairn.checkpoint.write_algorithm_checkpoint`).
        metadata: JSON data (a dict) stored in the manifest, which
            ``cairn.get_checkpoint_info(path)["metadata"]`` returns.
    """
    return prepare_algorithm_save(algo, path, snapshot=False, storage_options=storage_options,
                                  previous=previous, metadata=metadata)()


def prepare_algorithm_save(algo: CheckpointedAlgorithm, path: str | os.PathLike[str], *,
                           snapshot: bool, storage_options: Mapping[str, Any] | None = None,
                           previous: str | os.PathLike[str] | None = None,
                           metadata: Mapping[str, Any] | None = None,
                           stacklevel: int = 3) -> Callable[[], str]:
    """Behind :meth:`Algorithm.save <cairn.algorithms.algorithm.Algorithm.save>`: check
    the target, gather ``algo``'s state, and return the call that writes it (and returns the
    location).

    ``snapshot=False``: the state holds views of live arrays; call the result at once.
    ``snapshot=True``: the state is a copy (``get_state(copy=True)``), and native model files
    are exported from policies rebuilt from it, so that the call may run later, in another
    thread, while training goes on (``save(blocking=False)``).
    ``storage_options``, ``previous`` and ``metadata`` are as in :func:`save_algorithm`.
    ``stacklevel``: the frame the warnings about unstorable config values point at, as
    ``warnings.warn`` counts from here (3: the caller of the function that called this one).
    """
    # Refused before any state is gathered.
    metadata = check_metadata(metadata)  # a copy: later changes by the caller do not reach it
    target = check_save_location(path, storage_options=storage_options)
    check_policy_ids(algo.policies)
    native: dict[str, NativeFiles] = {}
    full = bool(algo.config.export_native_model_files)
    # A Keras policy's checkpoint always holds model/model.keras (docs/keras.md).
    wanted = [pid for pid, policy in algo.policies.items() if full or uses_keras(policy.config)]
    # Resolved here, in the caller's thread: fsspec file systems are made per thread, and files
    # are copied server-side only between locations of one of them.
    earlier = None if previous is None else resolve_storage(previous, storage_options=storage_options)
    state = algo.get_state(copy=snapshot)
    _warn_unstorable(state["config"], stacklevel=stacklevel + 1)
    warn_main_module_references(state["config"], when="save()", stacklevel=stacklevel)
    if wanted:
        policies = ({pid: Policy.from_state(state["policies"][pid]) for pid in wanted}
                    if snapshot else {pid: algo.policies[pid] for pid in wanted})
        # The same route as Policy.export_checkpoint's (cairn.registry.NATIVE_MODEL_WRITER).
        native = {pid: native_files_writer(policy, full=full) for pid, policy in policies.items()}

    def write() -> str:
        return write_algorithm_checkpoint(target, state, policy_native_files=native,
                                          storage_options=storage_options, previous=earlier,
                                          metadata=metadata)

    return write


def _warn_unstorable(config: Mapping[str, Any], *, stacklevel: int) -> None:
    """Warn (at the caller of ``save``) about config callables the checkpoint cannot store."""
    for key, value in config.items():
        if isinstance(value, Mapping) and CALLABLE_KEY in value and value[CALLABLE_KEY] is None:
            arg = ("policy_mapping_fn=..." if key == "policy_mapping_fn"
                   else f"config_overrides={{{key!r}: ...}}")
            warnings.warn(
                f"Config {key!r} is {value.get('name')!r}, which has no import path (lambda, "
                f"closure or __main__ function) and is not stored in the checkpoint; restoring it "
                f"will require {arg}. To store it, define it at module level in a module that is "
                f"imported by name (not the script run as __main__: another process cannot import "
                f"that), e.g. in my_project/envs.py.",
                stacklevel=stacklevel,
            )


def check_env_reference(config: Mapping[str, Any], where: Any) -> None:
    """Refuse an env ID that would make Gymnasium import a module (``"module:Env-v0"``)."""
    env = config.get("env")
    if isinstance(env, str) and ":" in env:
        raise UnsafeCheckpointError(
            f"{where}: the stored env {env!r:.100} names a module for gymnasium to import; a "
            "checkpoint never imports modules for environments. Import it yourself and pass "
            "config_overrides={'env': ...}."
        )


def check_env_known(config: Mapping[str, Any], where: Any) -> None:
    """Name the fix for a stored env name this process does not know (typically a
    ``cairn.register_env`` name of the run that saved the checkpoint)."""
    env = config.get("env")
    if isinstance(env, str):
        try:
            check_env(env)
        except ConfigError:
            raise CheckpointEnvError(
                f"{where}: the checkpoint's environment {env!r:.100} is neither registered with "
                "cairn.register_env in this process nor a Gymnasium ID. Register it first "
                f"(cairn.register_env({env!r:.100}, creator), or import the module that does), "
                "or pass config_overrides={'env': creator}."
            ) from None


def stored_algorithm_class(reference: str, expected: type, where: Any, call: str) -> type[Any]:
    """The algorithm class a checkpoint names (``reference``), which ``expected.<call>`` builds
    only when it is ``expected`` or a subclass: ``Algorithm.from_checkpoint`` builds every
    algorithm, ``PPO.from_checkpoint`` only PPO. A name that is no algorithm at all (not an
    :class:`~cairn.core.AlgorithmLike`) is refused by the resolver, before this check."""
    stored = resolve_class(reference, cast("type[Any]", AlgorithmLike))
    if not issubclass(stored, expected):
        raise _class_mismatch(where, stored, f"{expected.__name__}.{call} builds only "
                                             f"{expected.__name__} algorithms (or subclasses)")
    return stored


def _check_stored_class(expected: type, checkpoint: CheckpointLike,
                        storage_options: Mapping[str, Any] | None) -> None:
    """Refuse, from the manifest alone, a checkpoint of an algorithm that is not ``expected``
    (or a subclass of it), before any array is read."""
    info = get_checkpoint_info(checkpoint, storage_options=storage_options)
    if info["type"] != "Algorithm":
        return  # load_algorithm_state names the wrong checkpoint type
    stored_algorithm_class(info["class"], expected, checkpoint, "from_checkpoint")


def _class_mismatch(checkpoint: CheckpointLike, stored: type, refusal: str) -> CheckpointClassMismatchError:
    """The error for a checkpoint of ``stored`` where ``refusal`` says why it does not fit,
    naming the calls that do build it."""
    package = sys.modules.get("cairn")  # imported: it is the package this module is in
    own = f"cairn.{stored.__name__}" if getattr(package, stored.__name__, None) is stored else (
        f"{stored.__module__}.{stored.__qualname__}")
    return CheckpointClassMismatchError(
        f"{checkpoint} is a {stored.__name__} checkpoint, but {refusal}. Use "
        f"cairn.Algorithm.from_checkpoint(...), which builds the stored class, or "
        f"{own}.from_checkpoint(...)."
    )


def algorithm_from_checkpoint(
    cls: type,
    checkpoint: CheckpointLike,
    *,
    build: Callable[[Mapping[str, Any]], Built],
    policy_ids: str | Sequence[str] | None,
    config_overrides: Mapping[str, Any] | None,
    storage_options: Mapping[str, Any] | None = None,
) -> Built:
    """Behind :meth:`Algorithm.from_checkpoint
    <cairn.algorithms.algorithm.Algorithm.from_checkpoint>`: read the tree, check it, and
    return ``build(state)`` (``cls.from_state(state, ..., copy=False)``: the arrays were read
    into buffers nobody else holds, so the policies adopt them).

    ``checkpoint`` is a directory, a ``file://`` URL or an object-store URL (``s3://``,
    ``gs://``, ``memory://``; ``storage_options`` for its fsspec file system, docs/storage.md).
    ``policy_ids`` (a list of IDs, or one ID as a str) restores only those policies and reads
    only their files; ``config_overrides`` as in :func:`from_state_inputs` (an ``env`` there
    replaces the stored one, which is then not checked).

    ``Algorithm.from_checkpoint`` (``cls`` is the class it is called on) builds whatever
    algorithm the checkpoint holds; a subclass builds only its own kind (or a subclass of it):
    ``PPO.from_checkpoint`` of a DQN checkpoint raises
    :class:`~cairn.checkpoint.CheckpointClassMismatchError`.

    A :class:`~cairn.checkpoint.manager.CheckpointManager` root means its latest checkpoint.
    """
    # References are resolved as a checkpoint's: never code from inside it (docs/security.md).
    with loading_checkpoint(checkpoint, storage_options):
        checkpoint = resolve_checkpoint(checkpoint, storage_options=storage_options)
        _check_stored_class(cls, checkpoint, storage_options)
        state = load_algorithm_state(checkpoint, policy_ids=policy_ids, storage_options=storage_options)
        check_algorithm_state(state, checkpoint)
        if "env" not in (config_overrides or {}):
            check_env_reference(state["config"], checkpoint)
            check_env_known(state["config"], checkpoint)
        with restoring(checkpoint), finite_checked(*state["policies"].values()):  # check_algorithm_state did
            return build(state)
    raise AssertionError("unreachable")  # restoring() re-raises every error it catches


def restore_algorithm(algo: CheckpointedAlgorithm, checkpoint: CheckpointLike, *,
                      storage_options: Mapping[str, Any] | None = None) -> None:
    """Behind :meth:`Algorithm.restore <cairn.algorithms.algorithm.Algorithm.restore>`:
    read the tree (a path or a URL, ``storage_options`` as in :func:`algorithm_from_checkpoint`),
    check it, and load it into ``algo`` in place. A checkpoint of another algorithm (neither
    ``algo``'s class nor a subclass or base of it) is refused with
    :class:`~cairn.checkpoint.CheckpointClassMismatchError` before anything changes."""
    with loading_checkpoint(checkpoint, storage_options):
        state = load_algorithm_state(checkpoint, storage_options=storage_options)
        check_algorithm_state(state, checkpoint)
        stored, own = resolve_class(state["algorithm_class"], cast("type[Any]", AlgorithmLike)), type(algo)
        if not (issubclass(stored, own) or issubclass(own, stored)):
            raise _class_mismatch(checkpoint, stored, f"this algorithm is a {own.__name__}, and restore() "
                                                      f"loads only a checkpoint of its own algorithm")
        with restoring(checkpoint), finite_checked(*state["policies"].values()):  # check_algorithm_state did
            algo.set_state(state)


def from_state_inputs(
    cls: type,
    state: Mapping[str, Any],
    *,
    policy_ids: str | Sequence[str] | None,
    policy_mapping_fn: PolicyMapping | None,
    policies_to_train: Sequence[str] | None,
    config_overrides: Mapping[str, Any] | None,
) -> tuple[type[Any], AlgorithmConfig, dict[str, Any]]:
    """Behind :meth:`Algorithm.from_state <cairn.algorithms.algorithm.Algorithm.from_state>`:
    the stored class, the restored config and the kept policies' states, which it builds the
    algorithm from (then giving it the rest of the state). No config or class is needed besides
    the state.

    Args:
        cls: The class ``from_state`` is called on: ``Algorithm`` builds every algorithm, a
            subclass only its own kind (else CheckpointClassMismatchError).
        policy_ids: Keep only these policies (a str is one policy ID).
        policy_mapping_fn: New agent -> policy mapping (needed when agents were mapped to a
            dropped policy, or when the stored one was a lambda).
        policies_to_train: New list of learning policies.
        config_overrides: Flat config keys as in ``config.to_dict()``, e.g.
            ``{"num_env_runners": 0, "lr": 1e-4}``. A dict for a dict-valued training
            setting (``model``, DQN's ``replay_buffer_config``) is merged into the stored
            one, as ``config.training()`` merges it: ``{"model": {"hidden": [32]}}`` keeps
            the stored activation. Other values replace the stored ones.
    """
    algo_cls = stored_algorithm_class(state["algorithm_class"], cls, "This state", "from_state")
    config = restored_config(state, policy_ids, policy_mapping_fn, policies_to_train,
                             config_overrides)
    policy_states = _with_model_references(
        {pid: s for pid, s in state["policies"].items() if pid in config.policies},
        (config_overrides or {}).get("model"))
    return algo_cls, config, policy_states


def _with_model_references(policy_states: Mapping[str, Any], model: Any) -> dict[str, Any]:
    """``policy_states`` with the model classes named by ``config_overrides["model"]``
    (``custom_model``, ``custom_q_model``, ``keras_model``) put into each policy that names one
    (:func:`~cairn.policy.config_overrides.with_model_classes`, the rule
    ``Policy.from_checkpoint`` follows too). Other model keys stay as stored (a restored policy
    refuses another one in ``follow_config``). The states are not changed.
    """
    if not isinstance(model, Mapping):
        return dict(policy_states)
    replaced: dict[str, Any] = {}
    for pid, policy_state in policy_states.items():
        spec = policy_state["spec"]
        stored = spec["config"].get("model") or {}
        built = with_model_classes(stored, model)
        replaced[pid] = (policy_state if built == stored else
                         {**policy_state, "spec": {**spec, "config": {**spec["config"], "model": built}}})
    return replaced
