"""What a policy state read from a checkpoint must hold, checked before a Policy is built.

A few bytes of JSON such as ``"hidden": [1000000000]`` or ``Discrete(2**26)`` would otherwise
allocate gigabytes before the weights are compared: :func:`check_policy_state` refuses a spec
whose network would be far larger than the weights stored for it, and a state of the wrong
shape, with ``CheckpointFormatError`` (docs/checkpoint-format.md, section 5).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

import gymnasium as gym
import numpy as np

from cairn.checkpoint.validate import array_map, require_counts, require_types
from cairn.errors import CheckpointFormatError, ConfigError
from cairn.policy.action_masking import action_mask_size, network_observation_space
from cairn.policy.custom_model import MODEL_CLASS_KEYS
from cairn.policy.encoders import encoder_description, encoder_parameter_count
from cairn.policy.filters import mean_std_state_problem
from cairn.policy.merge import deep_merge
from cairn.policy.mlp_actor_critic import DEFAULT_MODEL_CONFIG
from cairn.registry import check_reference_form, resolve_class
from cairn.space_json import space_from_json

__all__ = ["check_finite_policy_state", "check_policy_state", "finite_checked"]

_POLICY_KEYS = {
    "spec": dict, "weights": dict, "optimizer": dict, "observation_filter": dict,
    "counters": dict, "rng": dict,
}
#: Elements a network input or output may have when its model is not one of cairn's own.
_MAX_UNCHECKED_SIZE = 1 << 26
#: The policy state objects whose NaN and infinity check is done (:func:`finite_checked`).
_FINITE_CHECKED: ContextVar[tuple[Mapping[str, Any], ...]] = ContextVar("cairn_finite_checked", default=())


def check_policy_state(state: Mapping[str, Any], where: Any, *, base: type) -> None:
    """Check a loaded Policy state's structure, and that its spec fits its weights.

    ``where`` (the checkpoint, or one of its policies) starts each error message. The stored
    policy class must subclass ``base`` (:class:`~cairn.policy.policy.Policy`, passed in by
    the module that defines it, which imports this one). A target network
    (``state["target"]["weights"]``, DQN's) must have the network's names and shapes.
    """
    require_types(state, _POLICY_KEYS, where, "policy")
    require_counts(state["counters"], where, "policy")
    spec = state["spec"]
    if not isinstance(spec.get("policy_class"), str) or not isinstance(spec.get("config") or {}, dict):
        raise CheckpointFormatError(f"{where}: the policy spec needs a str policy_class and a dict config.")
    weights = array_map(state["weights"], where, "'weights'")
    target = state.get("target")
    if isinstance(target, dict) and "weights" in target:
        target_weights = array_map(target["weights"], where, "'target.weights'")
        shapes = {k: v.shape for k, v in weights.items()}
        if {k: v.shape for k, v in target_weights.items()} != shapes:
            raise CheckpointFormatError(
                f"{where}: the target network's weights differ in names or shapes from the "
                "network's own."
            )
    try:
        obs_space = space_from_json(spec.get("observation_space"))
        act_space = space_from_json(spec.get("action_space"))
    except (ValueError, TypeError, OverflowError) as exc:
        raise CheckpointFormatError(f"{where}: the policy spec's spaces are invalid: {exc}.") from None
    _check_network_fits(spec, obs_space, act_space, state, weights, where, base)
    _check_finite_numbers(state, where)


def _first_bad(array: np.ndarray, *, nan_only: bool) -> tuple[int, str] | None:
    """``(count, "value at index")`` of the NaN entries (``nan_only``) or the NaN and infinite
    ones of a float ``array``; None when there are none, or it holds no floats. A sum first: NaN
    anywhere makes it NaN (and inf or NaN it non-finite), so the usual case costs one reduction;
    a sum that overflows, or adds +inf to -inf, is checked entry by entry."""
    if not np.issubdtype(array.dtype, np.floating) or array.size == 0:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.add.reduce(array, axis=None)
    if (not np.isnan(total)) if nan_only else np.isfinite(total):
        return None
    flags = np.isnan(array) if nan_only else ~np.isfinite(array)
    if not flags.any():
        return None
    index = np.unravel_index(int(np.argmax(flags)), array.shape)
    return int(flags.sum()), f"{array[index]} at index {tuple(int(i) for i in index)}"


@contextlib.contextmanager
def finite_checked(*states: Mapping[str, Any]) -> Iterator[None]:
    """Within the block, :func:`check_finite_policy_state` passes these state objects (by
    identity) without summing their arrays again: their check is done (a checkpoint's by its
    reader, an algorithm state's policies by ``Algorithm.set_state``), or cairn made them from
    policies it keeps finite (a learner sync). So a restore checks each array once, while the
    public ``Policy.set_state(state)``/``from_state`` and ``Algorithm.set_state(state)`` keep
    a signature that a user's override can copy. A state made anew inside the block (a
    subclass's override passing ``{**state, ...}`` to ``super()``) is checked as usual."""
    token = _FINITE_CHECKED.set((*_FINITE_CHECKED.get(), *states))
    try:
        yield
    finally:
        _FINITE_CHECKED.reset(token)


def check_finite_policy_state(state: Mapping[str, Any], where: str) -> None:
    """Raise ValueError, starting with ``where``, when an in-memory policy state (a
    :meth:`Policy.get_state` tree a user or a Ray actor hands to ``set_state`` or
    ``from_state``) holds a NaN weight or a NaN or infinite optimizer slot, as
    :func:`check_policy_state` refuses them in a checkpoint; one sum per float array; nothing
    for a state that an enclosing :func:`finite_checked` names. The caller checks the structure
    (``Policy.check_state``); parts of the wrong type are left to it."""
    if any(state is checked for checked in _FINITE_CHECKED.get()):
        return
    fix = ("Fix: pass a state taken before training diverged, or build a new policy and load only "
           "the finite parts (policy.set_weights loads weights; a new policy starts with a fresh "
           "optimizer state).")
    _check_finite_numbers(state, where, error=ValueError, fix=fix, stored="")


def _check_finite_numbers(state: Mapping[str, Any], where: Any, *,
                          error: type[Exception] = CheckpointFormatError, fix: str | None = None,
                          stored: str = "stored ") -> None:
    """Refuse a NaN in a stored weight (the network's or the target network's) and a NaN or
    infinite optimizer slot (Adam's ``exp_avg_sq``, a momentum): cairn never applies a step
    that would store one, but an older version, or a file edited by hand, could. Restored,
    a NaN weight is refused only when the policy acts, blamed on training, and a NaN moment makes
    the weights NaN at the first step, refused as a loss that blames the environment. Weights may
    hold +-inf (a buffer such as an attention mask of -inf); optimizer slots may not."""
    if fix is None:
        fix = ("Fix: restore a checkpoint saved before this one (training had most likely diverged "
               "when it was written), or build a new policy and copy only the finite parts into it "
               "(cairn.checkpoint.load_policy_states / load_policy_state read the stored arrays; "
               "policy.set_weights loads weights; a new policy starts with a fresh optimizer state).")
    target = state.get("target")
    target_weights = target.get("weights") if isinstance(target, Mapping) else None
    weights = state.get("weights")
    for label, tree in (("weight", weights), ("target network weight", target_weights)):
        for name, array in (tree.items() if isinstance(tree, Mapping) else ()):
            found = _first_bad(array, nan_only=True) if isinstance(array, np.ndarray) else None
            if found is not None:
                raise error(
                    f"{where}: the {stored}{label} {name!r} holds {found[0]} NaN value(s) (first: "
                    f"{found[1]}): the policy would act on NaN outputs. {fix}")
    optimizer = state.get("optimizer")
    optimizer_state = optimizer.get("state") if isinstance(optimizer, Mapping) else None
    for index, slots in (optimizer_state.items() if isinstance(optimizer_state, Mapping) else ()):
        for name, array in (slots.items() if isinstance(slots, Mapping) else ()):
            found = _first_bad(array, nan_only=False) if isinstance(array, np.ndarray) else None
            if found is not None:
                raise error(
                    f"{where}: the {stored}optimizer state's slot {name!r} of parameter {index} (the "
                    f"network's parameters in order) holds {found[0]} NaN or infinite value(s) "
                    f"(first: {found[1]}): the first learning step from it would make the weights "
                    f"NaN. {fix}")


def _flat_size(space: gym.Space[Any]) -> int:
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.sum(space.nvec, dtype=object))  # one-hot per entry, no overflow
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        subs = space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces
        return sum(_flat_size(s) for s in subs)
    return int(gym.spaces.flatdim(space))


def _check_network_fits(spec: Mapping[str, Any], obs_space: gym.Space[Any], act_space: gym.Space[Any],
                        state: Mapping[str, Any], weights: Mapping[str, np.ndarray], where: Any,
                        base: type) -> None:
    policy_class: Any = resolve_class(spec["policy_class"], base)
    config = deep_merge(policy_class.DEFAULT_CONFIG, spec.get("config") or {})
    try:
        if action_mask_size(obs_space, act_space):  # the network reads the rest of the Dict
            obs_space = network_observation_space(obs_space)
    except ConfigError as exc:
        raise CheckpointFormatError(f"{where}: the policy spec's spaces are invalid: {exc}") from None
    obs_size = _flat_size(obs_space)
    out_size = (_flat_size(act_space) if not isinstance(act_space, gym.spaces.Box)
                else 2 * _flat_size(act_space))
    filter_state = state["observation_filter"]
    mean = filter_state.get("mean")
    if filter_state.get("name") == "MeanStdFilter" and not (
            isinstance(mean, np.ndarray) and mean.size == obs_size):
        raise CheckpointFormatError(
            f"{where}: the observation filter's statistics do not have the {_short(obs_size)} entries "
            "of the observation space."
        )
    problem = (mean_std_state_problem(filter_state, int(mean.size))
               if filter_state.get("name") == "MeanStdFilter" else None)
    if problem is not None:
        raise CheckpointFormatError(f"{where}: observation_filter: {problem}.")
    stored = sum(int(w.size) for w in weights.values())
    builtin = getattr(policy_class.make_model, "builds_config_mlp", False)
    model_section: Mapping[str, Any] = config["model"] if isinstance(config.get("model"), Mapping) else {}
    for key in MODEL_CLASS_KEYS:  # a user's network: generic checks, and its reference's form
        if model_section.get(key) is not None:
            if not isinstance(model_section[key], str):
                raise CheckpointFormatError(
                    f"{where}: model.{key} must be a str, got {model_section[key]!r:.100}.")
            if ":" in model_section[key]:
                check_reference_form(model_section[key], what=f"model.{key}")
            builtin = False
    if isinstance(config.get("model"), Mapping) and config["model"].get("keras_model"):
        # A user's Keras model (docs/keras.md): the generic checks only, and its builder's
        # reference refused here, before anything is built, if the resolver's rule forbids it.
        check_reference_form(config["model"]["keras_model"], what="model.keras_model")
        builtin = False
    if not builtin:
        if max(obs_size, out_size) > _MAX_UNCHECKED_SIZE:
            raise CheckpointFormatError(f"{where}: the policy's spaces are too large to build.")
        return
    model = config.get("model")
    hidden = model.get("hidden", DEFAULT_MODEL_CONFIG["hidden"]) if isinstance(model, Mapping) else None
    if not (isinstance(hidden, list) and all(type(h) is int and h > 0 for h in hidden)):
        raise CheckpointFormatError(
            f"{where}: model.hidden must be a list of positive ints, got {hidden!r:.100}."
        )
    # A CNN encoder's size follows from the spec as plain arithmetic (nothing is allocated),
    # so conv_filters such as [[10**9, 8, 4]] are refused like a huge hidden layer.
    try:
        encoder = encoder_description(obs_space, {**DEFAULT_MODEL_CONFIG, **(model or {})})
    except ConfigError as exc:
        raise CheckpointFormatError(f"{where}: the policy spec's model config is invalid: {exc}") from None
    # Each layer's weight matrix is a parameter of the network: the actor path alone needs
    # these many, so weights holding fewer cannot belong to this spec.
    sizes = [obs_size if encoder is None else int(encoder["output_size"]), *hidden, max(1, out_size // 2)]
    needed = encoder_parameter_count(encoder) + sum(a * b for a, b in itertools.pairwise(sizes))
    if len(hidden) + 1 > len(weights) or needed > stored:
        raise CheckpointFormatError(
            f"{where}: the stored weights ({stored} numbers in {len(weights)} arrays) cannot belong "
            f"to the network the spec describes (observation size {_short(obs_size)}, conv_filters "
            f"{(model or {}).get('conv_filters')!r:.100} on images, hidden {hidden!r:.100}, "
            f"{_short(out_size)} outputs: at least {_short(needed)} numbers). The "
            "spec's spaces or model config do not fit the weights."
        )


def _short(number: int) -> str:
    text = str(number)
    return text if len(text) <= 24 else f"{text[:8]}...({len(text)} digits)"
