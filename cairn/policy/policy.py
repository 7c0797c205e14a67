"""Policy: maps observations to actions, and carries everything needed to keep learning."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

import gymnasium as gym
import numpy as np
import torch

from cairn.alignment import aligned
from cairn.errors import ConfigError, ExportError
from cairn.policy.distributions import ActionDistribution, distribution_for
from cairn.policy.filters import MeanStdFilter, NoFilter, make_filter
from cairn.policy.merge import deep_merge
from cairn.policy.model import (
    DEFAULT_MODEL_CONFIG,
    ActorCriticMLP,
    builds_config_mlp,
    check_model_config,
    warn_if_image_observations,
)
from cairn.policy.optimizer_state import (
    check_optimizer_tree,
    optimizer_state_from_tree,
    optimizer_state_to_tree,
)
from cairn.policy.spec import PolicySpec
from cairn.policy.state_check import check_policy_state
from cairn.registry import class_reference, native_model_writer, register_class, resolve_class
from cairn.rng import make_rng
from cairn.spaces import ObservationPreprocessor, check_action_space, space_from_json

if TYPE_CHECKING:
    from cairn.checkpoint.paths import CheckpointLike
    from cairn.checkpoint.writer import NativeFiles
    from cairn.policy.export_graph import ExportGraph

__all__ = ["Policy"]


@register_class
class Policy:
    """A PyTorch actor-critic policy for one observation space and one action space.

    A Policy is enough to act (``compute_actions``) and enough to continue training: it owns its
    network, optimizer, observation filter, random generator and counters, and describes itself
    as data through :attr:`spec`.

    Args:
        observation_space: Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple.
        action_space: Discrete, MultiDiscrete or Box.
        config: Policy settings merged over :attr:`DEFAULT_CONFIG`: ``model`` (``hidden``,
            ``activation``, ``vf_share_layers``, ``log_std_init``), ``lr``, and
            ``observation_filter`` (``"NoFilter"`` or ``"MeanStdFilter"``).
        seed: Seeds weight initialisation and action sampling. None: nondeterministic.

    >>> import gymnasium as gym
    >>> policy = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    >>> policy.compute_single_action([0.0, 0.1, 0.0, -0.1], explore=False) in (0, 1)
    True
    """

    #: Arrays that ``from_state(copy=False)`` hands to ``_setup``/``set_state`` as storage.
    _adopted_weights: Mapping[str, np.ndarray] | None = None

    DEFAULT_CONFIG: dict[str, Any] = {
        "model": DEFAULT_MODEL_CONFIG,
        "lr": 3e-4,
        "observation_filter": "NoFilter",
    }

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: Mapping[str, Any] | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        self._setup(observation_space, action_space, config, seed=seed, init_weights=True)

    # ----------------------------------------------------------------------------------- build
    def _setup(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: Mapping[str, Any] | None,
        *,
        seed: int | None,
        init_weights: bool,
    ) -> None:
        try:
            check_action_space(action_space)
            self.preprocessor = ObservationPreprocessor(observation_space)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        self.config: dict[str, Any] = deep_merge(self.DEFAULT_CONFIG, config or {})
        check_model_config(self.config["model"])
        self.observation_space = observation_space
        self.action_space = action_space
        # Only a new policy warns: a restored one was warned about when it was first made.
        if init_weights and getattr(self.make_model, "builds_config_mlp", False):
            warn_if_image_observations(observation_space, stacklevel=3)
        self.dist: ActionDistribution = distribution_for(action_space)
        # torch's generator initialises weights; numpy's samples actions in the sampling loop.
        self.generator = torch.Generator()
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed) % (2**63))
        self.np_random = np.random.default_rng(None if seed is None else [int(seed) % (2**63), 7])
        # Restoring skips random initialisation: parameters are created uninitialised (meta
        # device, then empty CPU storage) and filled from the saved state right after.
        with torch.device("meta") if not init_weights else contextlib.nullcontext():
            # Any: subclasses bring their own module types with their own methods.
            self.model: Any = self.make_model()
        adopted = self._adopted_weights
        if init_weights:
            self.init_weights()
        elif adopted is not None:
            self._adopt_weights(adopted)
        else:
            self.model.to_empty(device="cpu")
        # The default optimizer is built on first use (see the optimizer property); an
        # overridden make_optimizer is built now, as its parameter grouping is its own.
        self._optimizer: torch.optim.Optimizer | None = None
        self._pending_optimizer_state: Mapping[str, Any] | None = None
        if type(self).make_optimizer is not Policy.make_optimizer:
            self._optimizer = self.make_optimizer()
        try:
            self.observation_filter: NoFilter | MeanStdFilter = make_filter(
                self.config["observation_filter"], self.preprocessor.size
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        self.global_timestep = 0
        self.num_grad_updates = 0

    @builds_config_mlp
    def make_model(self) -> torch.nn.Module:
        """Build the network (override in subclasses for other architectures)."""
        model_cfg = deep_merge(DEFAULT_MODEL_CONFIG, self.config["model"])
        return ActorCriticMLP(
            self.preprocessor.size,
            self.dist.num_inputs,
            hidden=list(model_cfg["hidden"]),
            activation=model_cfg["activation"],
            vf_share_layers=bool(model_cfg["vf_share_layers"]),
            free_log_std=isinstance(self.action_space, gym.spaces.Box),
            log_std_init=float(model_cfg["log_std_init"]),
        )

    def init_weights(self) -> None:
        """Randomly initialise the network from the policy's own generator."""
        reset = getattr(self.model, "reset_parameters", None)
        if reset is not None:
            reset(self.generator)

    def make_optimizer(self) -> torch.optim.Optimizer:
        """Adam over all parameters (override for other optimizers).

        The fused implementation updates each parameter in one kernel: for small networks the
        per-operator overhead of the default implementation dominates the update.
        """
        return torch.optim.Adam(self.model.parameters(), lr=float(self.config["lr"]), eps=1e-5, fused=True)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer, with any restored state loaded.

        Built on first use: constructing a torch optimizer imports ``torch._dynamo`` (about a
        second), which a policy restored only to act never needs. A restored optimizer state
        is checked against the network when it is restored, and loaded here.
        """
        if self._optimizer is None:
            optimizer = self.make_optimizer()
            pending, self._pending_optimizer_state = self._pending_optimizer_state, None
            if pending is not None:  # owned by this policy: its arrays become the state
                optimizer_state_from_tree(optimizer, pending, copy=False)
            for group in optimizer.param_groups:  # the config's lr wins (it may be overridden)
                group["lr"] = float(self.config["lr"])
            self._optimizer = optimizer
        return self._optimizer

    @optimizer.setter
    def optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        self._optimizer, self._pending_optimizer_state = optimizer, None

    def set_learning_rate(self, lr: float) -> None:
        """Set ``config["lr"]`` and the optimizer's learning rate (now, or when it is built)."""
        self.config["lr"] = float(lr)
        if self._optimizer is not None:
            for group in self._optimizer.param_groups:
                group["lr"] = float(lr)

    def _optimizer_tree(self, *, copy: bool) -> dict[str, Any]:
        """The optimizer's state tree, without building an optimizer that was never used."""
        pending = self._pending_optimizer_state
        if self._optimizer is None and pending is not None:
            return _copy_optimizer_tree(pending) if copy else dict(pending)
        return optimizer_state_to_tree(self.optimizer, copy=copy)

    @property
    def spec(self) -> PolicySpec:
        """This policy as data: class, spaces and config."""
        return PolicySpec(type(self), self.observation_space, self.action_space, self.config)

    @classmethod
    def from_spec(cls, spec: PolicySpec, *, seed: int | None = None) -> Policy:
        """Build a new policy from a complete spec (class, both spaces and config)."""
        policy_class = spec.policy_class or cls
        if isinstance(policy_class, str):
            policy_class = resolve_class(policy_class, Policy)
        if spec.observation_space is None or spec.action_space is None:
            raise ConfigError(
                "PolicySpec needs observation_space and action_space to build a policy on its own."
            )
        return policy_class(spec.observation_space, spec.action_space, spec.config, seed=seed)

    # ------------------------------------------------------------------------------------- act
    def process_observations(self, obs_batch: Sequence[Any] | np.ndarray, *, update: bool) -> np.ndarray:
        """Raw observations -> the float32 network inputs (flattened, one-hot, filtered).

        ``update=True`` also feeds them to the observation filter's running statistics.
        """
        processed = self.preprocessor(obs_batch)
        if update:
            self.observation_filter.update(processed)
        return self.observation_filter.apply(processed)

    def compute_action_inputs(self, processed_obs: np.ndarray) -> np.ndarray:
        """The action distribution's inputs (logits, or mean and log-std) for processed obs."""
        fast = getattr(self.model, "numpy_action_inputs", None)
        if fast is not None:
            return fast(processed_obs)  # type: ignore[no-any-return]
        with torch.inference_mode():
            return self.model.action_inputs(torch.from_numpy(processed_obs)).numpy()  # type: ignore[no-any-return]

    def compute_raw_actions(self, processed_obs: np.ndarray, *, explore: bool) -> np.ndarray:
        """Processed observations -> raw actions (category indices / unclipped samples)."""
        inputs = self.compute_action_inputs(processed_obs)
        if explore:
            return self.dist.sample_numpy(inputs, self.np_random)
        return self.dist.deterministic_numpy(inputs)

    def compute_actions(self, obs_batch: Sequence[Any] | np.ndarray, *, explore: bool = True) -> np.ndarray:
        """Actions for a batch of raw observations, ready for the environment.

        Returns an array whose first dimension is the batch; each entry lies in the action space
        (Box actions are clipped to its bounds). Raises
        :class:`~cairn.errors.ObservationSpaceError` for observations that do not fit the
        observation space (e.g. rows of the wrong shape, or one observation instead of a batch).
        """
        processed = self.process_observations(obs_batch, update=False)
        return self.dist.to_env(self.compute_raw_actions(processed, explore=explore))

    def compute_single_action(self, obs: Any, *, explore: bool = True) -> Any:
        """The action for one raw observation (an int for Discrete spaces).

        Raises :class:`~cairn.errors.ObservationSpaceError` when ``obs`` does not fit the
        observation space.
        """
        action = self.compute_actions([obs], explore=explore)[0]
        if isinstance(self.action_space, gym.spaces.Discrete):
            return int(action)
        return action

    # --------------------------------------------------------------------------------- weights
    def get_weights(self) -> dict[str, np.ndarray]:
        """A copy of the network's parameters and buffers as numpy arrays."""
        return {k: v.detach().numpy().copy() for k, v in self.model.state_dict().items()}

    def _adopt_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Make the given arrays the parameters' storage (no allocation, no copy)."""
        own = self._check_weights(weights)
        tensors = {}
        for name, value in weights.items():
            # Misaligned storage would change what MKL computes (see cairn.alignment).
            tensor = torch.from_numpy(aligned(np.asarray(value)))
            tensors[name] = tensor if tensor.dtype == own[name].dtype else tensor.to(own[name].dtype)
        self.model.load_state_dict(tensors, assign=True)

    def _check_weights(self, weights: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """Check names and shapes against the network; return its state dict."""
        own = self.model.state_dict()
        missing, unexpected = set(own) - set(weights), set(weights) - set(own)
        if missing or unexpected:
            raise ValueError(
                f"Weights do not fit this policy's network: missing {sorted(missing)}, "
                f"unexpected {sorted(unexpected)}."
            )
        for name, tensor in own.items():
            value = weights[name]
            if tuple(np.shape(value)) != tuple(tensor.shape):
                raise ValueError(
                    f"Weight {name!r} has shape {tuple(np.shape(value))}, but this policy's "
                    f"network expects {tuple(tensor.shape)}; were the spaces or model config "
                    "changed?"
                )
        return own

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Load parameters produced by :meth:`get_weights` (names and shapes must match)."""
        for name, tensor in self._check_weights(weights).items():
            value = np.asarray(weights[name])
            with torch.no_grad():
                tensor.copy_(torch.from_numpy(np.ascontiguousarray(value)))

    # ----------------------------------------------------------------------------------- state
    def get_state(self, *, copy: bool = True) -> dict[str, Any]:
        """The whole policy as a tree of JSON values and numpy arrays.

        ``copy=True`` returns a snapshot that later training does not change; ``copy=False``
        may return views of the live weight and optimizer arrays, for a caller that writes them
        at once (a checkpoint save). Subclasses extend it (``super().get_state(copy=copy)``).
        """
        weights = {
            k: (v.detach().numpy().copy() if copy else v.detach().numpy())
            for k, v in self.model.state_dict().items()
        }
        return {
            "spec": self.spec.to_dict(),
            "weights": weights,
            "optimizer": self._optimizer_tree(copy=copy),
            "observation_filter": self.observation_filter.get_state(),
            "counters": {
                "global_timestep": self.global_timestep,
                "num_grad_updates": self.num_grad_updates,
            },
            "exploration": self.get_exploration_state(),
            "rng": {
                "torch": self.generator.get_state().numpy().copy(),
                "numpy": self.np_random.bit_generator.state,
            },
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a state from :meth:`get_state` into this policy (same spaces and model)."""
        adopted = self._adopted_weights
        if adopted is not state["weights"]:
            self.set_weights(state["weights"])
        if self._optimizer is None:
            check_optimizer_tree(state["optimizer"], list(self.model.parameters()), num_groups=1)
            tree = state["optimizer"]
            self._pending_optimizer_state = tree if adopted is not None else _copy_optimizer_tree(tree)
        else:
            optimizer_state_from_tree(self._optimizer, state["optimizer"], copy=adopted is None)
            self.set_learning_rate(float(self.config["lr"]))  # the config's lr wins
        filter_state = state["observation_filter"]
        if filter_state.get("name") != self.observation_filter.name:
            raise ValueError(
                f"State has observation filter {filter_state.get('name')!r}, this policy uses "
                f"{self.observation_filter.name!r}."
            )
        self.observation_filter.set_state(filter_state)
        counters = state["counters"]
        self.global_timestep = int(counters["global_timestep"])
        self.num_grad_updates = int(counters["num_grad_updates"])
        self.set_exploration_state(state.get("exploration") or {})
        rng = np.asarray(state["rng"]["torch"], dtype=np.uint8)
        self.generator.set_state(torch.from_numpy(rng.copy()))
        self.np_random = make_rng(state["rng"]["numpy"])

    def get_exploration_state(self) -> dict[str, Any]:
        """Exploration state beyond the random generator (e.g. an epsilon schedule)."""
        return {}

    def set_exploration_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_exploration_state`."""

    @classmethod
    def from_state(cls, state: Mapping[str, Any], *, copy: bool = True) -> Policy:
        """Rebuild a policy from :meth:`get_state` alone, without running random init.

        The class named in the state must be a subclass of :class:`Policy`. With
        ``copy=False`` the policy takes the state's arrays as its own storage instead of copying
        them (the checkpoint reader does this with the buffers it just read); the caller must
        not use those arrays afterwards.
        """
        spec = state["spec"]
        policy_class = resolve_class(spec["policy_class"], Policy)
        policy = policy_class.__new__(policy_class)
        policy._adopted_weights = None if copy else state["weights"]
        try:
            policy._setup(
                space_from_json(spec["observation_space"]),
                space_from_json(spec["action_space"]),
                spec.get("config") or {},
                seed=0,
                init_weights=False,
            )
            policy.set_state(state)
        finally:
            policy._adopted_weights = None
        return policy

    # ------------------------------------------------------------------------------ checkpoint
    def export_checkpoint(
        self, export_dir: str | os.PathLike[str], *, export_native_model_files: bool = False
    ) -> None:
        """Write this policy alone as a Policy checkpoint directory (atomically).

        With ``export_native_model_files=True`` the checkpoint also gets ``model/`` (a torch
        program, and ONNX when the ``onnx`` extra is installed), as Algorithm checkpoints do with
        ``config.checkpointing(export_native_model_files=True)``.
        """
        from cairn.checkpoint import save_location, write_policy_checkpoint

        target = save_location(export_dir)  # refused before any state is gathered
        native_files = self._native_files_writer() if export_native_model_files else None
        write_policy_checkpoint(target, self.get_state(copy=False), native_files=native_files)

    def _native_files_writer(self) -> NativeFiles:
        """The callback that writes this policy's ``model/`` into a checkpoint directory.

        cairn.export (a layer above this one) installs the writer in the registry when it is
        imported; ``import cairn`` imports it.
        """
        writer = native_model_writer()
        if writer is None:
            raise ExportError(
                "export_native_model_files=True: no native model writer is registered; "
                "cairn.export registers one when it is imported (`import cairn` does). Import "
                "cairn.export first, or pass export_native_model_files=False."
            )
        return functools.partial(writer, self)

    def export_graph(self) -> ExportGraph:
        """The export hook: this policy's observation-to-output path as one torch module.

        ``cairn.export`` traces the returned graph into a torch program and ONNX, writes its
        outputs into ``signature.json`` and checks the files against ``graph.reference``
        (this policy's own ``compute_actions``, action inputs and value). This builds the
        actor-critic graph (:func:`cairn.policy.export_graph.actor_critic_export_graph`);
        a policy with another network or action path overrides it.
        """
        from cairn.policy.export_graph import actor_critic_export_graph

        return actor_critic_export_graph(self)

    def export_model(self, export_dir: str | os.PathLike[str], *, onnx: int | None = None) -> None:
        """Write the observation-to-action path in a native format that loads without cairn.

        Without ``onnx``: a ``torch.export`` program plus safetensors weights; with
        ``onnx=<opset>``: ``model.onnx``. Both come with ``signature.json``. Raises
        :class:`~cairn.errors.ExportError` when the model cannot be exported.
        """
        from cairn.policy.export_graph import model_exporter

        model_exporter()(self, export_dir, onnx=onnx)  # cairn.export.export_model, registered

    @overload
    @classmethod
    def from_checkpoint(cls, checkpoint: CheckpointLike, *,
                        policy_ids: str | Sequence[str]) -> dict[str, Policy]: ...

    @overload
    @classmethod
    def from_checkpoint(cls, checkpoint: CheckpointLike, *,
                        policy_ids: None = None) -> Policy | dict[str, Policy]: ...

    @classmethod
    def from_checkpoint(
        cls, checkpoint: CheckpointLike, *, policy_ids: str | Sequence[str] | None = None
    ) -> Policy | dict[str, Policy]:
        """Load the policy of a Policy checkpoint, or the policies of an Algorithm checkpoint.

        * a Policy checkpoint (``export_checkpoint``) gives a :class:`Policy`;
        * an Algorithm checkpoint gives ``{policy_id: Policy}``: all its policies, or only
          ``policy_ids`` (a list, or one ID as a str), reading only their files.

        The return type depends on the directory, so type checkers see ``Policy | dict``
        without ``policy_ids``; with ``policy_ids`` they see ``dict[str, Policy]``, and
        :meth:`from_policy_checkpoint` is typed ``-> Policy``. Each state is checked
        (:func:`cairn.policy.state_check.check_policy_state`) before a policy is built from it.
        The class stored in the checkpoint is built (it must subclass :class:`Policy`).
        """
        from cairn.checkpoint import get_checkpoint_info, load_policy_states

        if policy_ids is None and get_checkpoint_info(checkpoint)["type"] == "Policy":
            return cls.from_policy_checkpoint(checkpoint)
        states = load_policy_states(checkpoint, policy_ids=policy_ids)
        return {pid: _policy_from_checkpoint_state(state, f"{checkpoint} (policy {pid!r})")
                for pid, state in states.items()}

    @classmethod
    def from_policy_checkpoint(cls, checkpoint: CheckpointLike) -> Policy:
        """Load a Policy checkpoint (written by :meth:`export_checkpoint`); an Algorithm
        checkpoint is refused with ``CheckpointFormatError`` (use :meth:`from_checkpoint`)."""
        from cairn.checkpoint import load_policy_state

        return _policy_from_checkpoint_state(load_policy_state(checkpoint), checkpoint)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(observation_space={self.observation_space}, "
            f"action_space={self.action_space})"
        )

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """The network's parameters (for optimizers and gradient clipping)."""
        return self.model.parameters()

    @property
    def policy_class_reference(self) -> str:
        """The reference stored in checkpoints for this policy's class."""
        return class_reference(type(self))


def _policy_from_checkpoint_state(state: Mapping[str, Any], where: Any) -> Policy:
    """Check a state tree the checkpoint reader returned, and build its policy from it."""
    from cairn.checkpoint import restoring

    check_policy_state(state, where, base=Policy)
    with restoring(where):
        # The arrays were read into buffers nobody else holds: adopt them, don't copy.
        return Policy.from_state(state, copy=False)
    raise AssertionError("unreachable")  # restoring() re-raises every error it catches


def _copy_optimizer_tree(tree: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an optimizer state tree whose arrays are aligned and owned by nobody else."""
    return {
        "state": {key: {name: aligned(v, copy=True) if isinstance(v, np.ndarray) else v
                        for name, v in slots.items()}
                  for key, slots in tree["state"].items()},
        "param_groups": [dict(group) for group in tree["param_groups"]],
    }
