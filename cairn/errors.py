"""The exception hierarchy of cairn, and the warnings it gives.

Every error cairn raises on purpose derives from :class:`CairnError`. Messages state what was
found, what was expected, and how to fix it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "CairnError",
    "ConfigError",
    "RestoredSettingError",
    "EnvError",
    "EpisodeHistoryError",
    "ObservationSpaceError",
    "ActionMaskError",
    "PolicyOutputError",
    "NonFiniteLossError",
    "NonFiniteSampleError",
    "ExportError",
    "FrameworkUnavailableError",
    "EnvRunnerFailedError",
    "LearnerFailedError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "CheckpointCorruptedError",
    "CheckpointFormatError",
    "UnsupportedCheckpointVersionError",
    "UnsafeCheckpointError",
    "UnknownPolicyIdError",
    "UnknownComponentError",
    "MissingCallableError",
    "UnsupportedCheckpointLocationError",
    "CheckpointClassMismatchError",
    "CheckpointConfigError",
    "CheckpointEnvError",
    "BackgroundSaveError",
    "CheckpointStorageError",
    "StorageNotFoundError",
    "StoragePermissionError",
    "StorageBackendMissingError",
    "UncommittedCheckpointError",
    "ImageObservationWarning",
    "LoggerWarning",
    "ReplayBufferNotRestoredWarning",
    "StorageCleanupWarning",
]


class CairnError(Exception):
    """Root of every error raised by cairn."""


class ConfigError(CairnError, ValueError):
    """An invalid configuration value, raised by ``validate()``/``build()`` before any work."""


class RestoredSettingError(ConfigError):
    """A restore's config (``config_overrides`` included) sets something a restored policy
    cannot take: a setting it was built with (its network's structure, its observation filter),
    which its stored state keeps. Raised before anything changes, instead of a config that
    describes a policy the algorithm does not have.

    ``setting`` is the setting's name (``"model.hidden"``), ``given`` the config's value and
    ``stored`` the restored policy's.
    """

    def __init__(self, message: str, *, setting: str, given: object, stored: object) -> None:
        super().__init__(message)
        self.setting, self.given, self.stored = setting, given, stored


class EnvError(CairnError):
    """An environment could not be created or does not follow the expected API."""


class EpisodeHistoryError(CairnError, IndexError):
    """An episode getter (``episode.get_rewards(...)`` in a callback) asked for steps the episode
    no longer keeps: beyond ``Callbacks.episode_history_steps``, or from before the env runner's
    state was restored (the history is not checkpointed)."""


class ObservationSpaceError(CairnError, ValueError):
    """Observations given to a policy do not fit its observation space (shape, rank or type)."""


class ActionMaskError(CairnError, ValueError):
    """An observation's ``action_mask`` leaves no legal action (all zeros) where a policy must
    act. ``rows`` are the batch rows at fault; env runners re-raise it naming the agent and step."""

    def __init__(self, message: str, rows: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.rows = tuple(rows)


class PolicyOutputError(CairnError, ValueError):
    """A policy's network gave action-distribution inputs (logits, mean and log-std) that
    define no distribution (NaN, ``+inf``, or every logit of a (sub-)action ``-inf``) for the
    observations it must act on: typically weights that diverged in training. ``rows`` are the
    batch rows at fault."""

    def __init__(self, message: str, rows: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.rows = tuple(rows)


class NonFiniteLossError(CairnError, FloatingPointError):
    """A learn step's loss, or its gradient, was NaN or infinite, so the step was not applied:
    the optimizer did not step, and the policy's weights and optimizer state are those the step
    started from (updates completed before it stay). ``policy_id`` names the policy (None until
    the learner that ran the step fills it in), ``stat`` the quantity (``"loss"``,
    ``"gradient norm"``: the global L2 norm of the gradients the optimizer would have applied)
    and ``value`` its value; ``parameters`` names the parameters whose gradient holds a NaN or
    infinite entry (empty for a loss, or where only the norm overflowed float32). ``detail``,
    where the learner found what made a loss non-finite (a log-probability of ``-inf``), says it
    in place of the list of likely causes."""

    def __init__(self, stat: str, value: float, policy_id: str | None = None, *,
                 parameters: Sequence[object] = (), detail: str | None = None) -> None:
        # ``parameters``: the tensors at fault, until with_policy_id names them (then their
        # names); kept out of ``args`` and dropped once named, so no tensor travels with the error.
        self._tensors: tuple[object, ...] = tuple(parameters)
        self.parameters: tuple[str, ...] = tuple(
            f"parameter #{i} of shape {tuple(getattr(t, 'shape', ()))}" for i, t in enumerate(self._tensors))
        self.stat, self.value, self.policy_id, self.detail = stat, value, policy_id, detail
        super().__init__(self._message())

    def with_policy_id(self, policy_id: str,
                       named_parameters: Iterable[tuple[str, object]] = ()) -> NonFiniteLossError:
        """This error, naming ``policy_id`` (the learner that ran the step knows it) and, from
        ``named_parameters`` (the policy's networks' ``named_parameters()``), the parameters at
        fault."""
        self.policy_id = policy_id
        if self._tensors:
            names = {id(tensor): name for name, tensor in named_parameters}
            self.parameters = tuple(names.get(id(t), described)
                                    for t, described in zip(self._tensors, self.parameters, strict=True))
            self._tensors = ()
        self.args = (self._message(),)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # Across processes (a DDP learner's error): the names and values, no tensor.
        return (_rebuild_non_finite_loss_error,
                (self.stat, self.value, self.policy_id, self.parameters, self.detail))

    def _message(self) -> str:
        who = "a policy" if self.policy_id is None else f"policy {self.policy_id!r}"
        if self.detail is not None:
            return (f"The {self.stat} of a learn step of {who} is {self.value} (not finite), so the step was "
                    "not applied: its weights and optimizer state are those before this step (steps "
                    f"completed earlier in the call stay). {self.detail}")
        if self.stat == "loss" or self.stat.startswith("loss "):
            return (
                f"The {self.stat} of a learn step of {who} is {self.value} (not finite), so the step was "
                "not applied: its weights and optimizer state are those before this step (steps "
                "completed earlier in the call stay). Likely causes: a NaN or infinite observation or "
                "reward from the environment (with observation_filter='NoFilter' and no reward "
                "normalisation nothing checks them before learning), a network whose outputs overflow, "
                "or a learning rate so high that the values diverge. Fix: make the environment return "
                "finite numbers (check np.isfinite on its observations and rewards), or scale them "
                "(config.env_runners(observation_filter='MeanStdFilter') refuses non-finite ones when "
                "sampling); lower the learning rate or set config.training(grad_clip=...).")
        where = (f"NaN or infinite entries in the gradients of {', '.join(self.parameters)}"
                 if self.parameters else "every entry finite, but their norm overflowed float32")
        return (
            f"The {self.stat} of a learn step of {who} is {self.value} (not finite; {where}), so the "
            "step was not applied: its weights and optimizer state are those before this step (steps "
            "completed earlier in the call stay). The loss was finite: the gradient is not. Likely "
            "causes: a term of the model or loss whose derivative is not finite where it is evaluated "
            "(sqrt or log at 0, a division by a value that reaches 0), gradients that overflow "
            "(observations of huge magnitude, unscaled), or weights that diverged. Fix: check the model "
            "(torch.autograd.detect_anomaly() names the operation), scale the observations "
            "(config.env_runners(observation_filter='MeanStdFilter')), lower the learning rate, or set "
            "config.training(grad_clip=...) so that large gradients are scaled down before they "
            "overflow.")


def _rebuild_non_finite_loss_error(stat: str, value: float, policy_id: str | None,
                                   parameters: tuple[str, ...],
                                   detail: str | None = None) -> NonFiniteLossError:
    error = NonFiniteLossError(stat, value, policy_id, detail=detail)
    error.parameters = tuple(parameters)
    error.args = (error._message(),)
    return error


class NonFiniteSampleError(CairnError, ValueError):
    """A sampled row bound for a replay buffer holds a NaN or infinite reward or observation:
    stored, it would make the target of every minibatch that replays it NaN, update after
    update. ``policy_id``, ``column`` (``"rewards"``, ``"obs"``, ``"next_obs"``) and ``rows``
    (the batch rows at fault) say where."""

    def __init__(self, message: str, *, policy_id: str, column: str, rows: tuple[int, ...]) -> None:
        super().__init__(message)
        self.policy_id, self.column, self.rows = policy_id, column, tuple(rows)


class ExportError(CairnError):
    """A policy's model could not be exported to a native format."""


class FrameworkUnavailableError(CairnError, ImportError):
    """The model framework a config or checkpoint names cannot run in this process: Keras is
    not installed or too old, or it was (or is about to be) loaded with a backend other than
    torch (``KERAS_BACKEND``). The message says what to install or change (docs/keras.md)."""


class EnvRunnerFailedError(CairnError):
    """A remote env runner died, raised or timed out, and the fault-tolerance settings
    (``config.fault_tolerance(...)``) neither restart it nor let training go on without it."""


class LearnerFailedError(CairnError):
    """A DDP learner actor (``num_learners >= 1``) died or raised during an update. The
    message names its rank and the Ray error (chained). Learners are not restarted in place:
    the group is shut down, the driver's policies keep their weights from before the failed
    update, and the next ``train()`` starts a new group from them (docs/learners.md)."""


class CheckpointError(CairnError):
    """Base class of every checkpoint reading or writing failure."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The checkpoint directory, its manifest, or a file the manifest lists does not exist."""


class CheckpointCorruptedError(CheckpointError):
    """A file's size or content hash differs from the manifest, or a file cannot be parsed."""


class CheckpointFormatError(CheckpointError):
    """The directory is not a cairn checkpoint, or its manifest or state has the wrong structure."""


class UnsupportedCheckpointVersionError(CheckpointError):
    """The checkpoint's format version is newer than this cairn can read."""


class UnsafeCheckpointError(CheckpointError):
    """The checkpoint asks for something cairn refuses to do on load (e.g. import arbitrary code)."""


class UnknownPolicyIdError(CheckpointError, KeyError):
    """A requested policy ID is not in the checkpoint."""

    def __str__(self) -> str:  # KeyError would wrap the message in quotes.
        return str(self.args[0]) if self.args else ""


class UnknownComponentError(CheckpointError, KeyError):
    """A requested component (``"policies/<pid>"``, ``"policies/<pid>/weights"``) is not in the
    checkpoint, or is not a component name at all; the message lists the checkpoint's own."""

    def __str__(self) -> str:  # KeyError would wrap the message in quotes.
        return str(self.args[0]) if self.args else ""


class MissingCallableError(CheckpointError):
    """The checkpoint recorded a callable it could not store; pass it to the restore call."""


class UnsupportedCheckpointLocationError(CheckpointError, ValueError):
    """A checkpoint location cairn cannot use yet: a URL whose scheme is not ``file``, or a
    ``file://`` URL that names another host."""


class CheckpointClassMismatchError(CheckpointError, TypeError):
    """The checkpoint holds a class that is not the one asked for (``PPO.from_checkpoint`` of
    a DQN checkpoint); the message names both and the call that loads it."""


class CheckpointConfigError(CheckpointFormatError, ConfigError):
    """The config stored in a checkpoint (with any overrides passed to the restore) is invalid.

    Both ``except CheckpointError`` and ``except ConfigError`` catch it.
    """


class CheckpointEnvError(CheckpointFormatError, EnvError):
    """The environment named by a checkpoint's config cannot be created in this process.

    Both ``except CheckpointError`` and ``except EnvError`` catch it.
    """


class CheckpointStorageError(CheckpointError):
    """The storage of a checkpoint location failed (an object store's bucket, credentials,
    permissions, network); the message names the URL and the cause."""


class StorageNotFoundError(CheckpointStorageError, CheckpointNotFoundError):
    """The bucket (or container) of a checkpoint URL does not exist."""


class StoragePermissionError(CheckpointStorageError, PermissionError):
    """No credentials were found for a checkpoint URL, or they may not do what was asked."""


class StorageBackendMissingError(CheckpointStorageError, ImportError):
    """The fsspec backend of a URL scheme is not installed; the message gives the
    ``pip install`` command (``cairn-rl[s3]`` for ``s3://``, ``cairn-rl[gcs]`` for ``gs://``)."""


class UncommittedCheckpointError(CheckpointNotFoundError):
    """An object-store prefix holds checkpoint files but no committed manifest: a save there
    was interrupted (or is still running), so nothing there may be loaded."""


class BackgroundSaveError(CheckpointError):
    """A background save (``save(blocking=False)``) failed; raised by the next ``save()`` or
    ``stop()``, with the original error as ``__cause__``. Its checkpoint was not written."""


class ImageObservationWarning(UserWarning):
    """A policy flattens image observations into an MLP, which rarely learns from pixels.

    Filter it (``warnings.simplefilter("ignore", ImageObservationWarning)``) when the
    flattening is on purpose.
    """


class LoggerWarning(UserWarning):
    """A logger (``MLflowLogger``, ``WandbLogger``) or an ``on_checkpoint_saved`` hook failed
    after the fact it reports: training, or the save, succeeded and goes on. The message names
    the logger or hook and the error. Make it an error with the logger's ``strict = True``
    (docs/callbacks.md), or ``warnings.simplefilter("error", LoggerWarning)``.
    """


class StorageCleanupWarning(UserWarning):
    """A save committed (its URL loads the new checkpoint), but deleting what it left behind
    failed: on an object store, objects that no manifest lists or the stage of a replacement;
    on any store, a checkpoint that a ``CheckpointManager``'s retention no longer keeps
    (docs/storage.md). The message names them, what they hold now and who deletes them (the
    next save there, or a ``CheckpointManager`` started on its root).
    """


class ReplayBufferNotRestoredWarning(UserWarning):
    """An off-policy algorithm (DQN, SAC) was restored from a state without its replay buffers
    (saved without ``config.checkpointing(store_replay_buffer=True)``), or with buffers of
    n-step returns summed with another ``gamma`` than its config's, which it leaves out:
    training goes on from empty buffers, so it does not repeat the original run exactly.

    Acting, evaluating and exporting never read the buffers; filter it
    (``warnings.simplefilter("ignore", ReplayBufferNotRestoredWarning)``) when the restored
    algorithm will not train. ``cairn evaluate`` does.
    """
