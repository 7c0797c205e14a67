"""The shapes a policy's network must output, checked by running it once on sample rows.

A network whose outputs have the wrong shape does not always fail: logits wider than a
``Discrete(n)`` action space sample actions outside it, and a value of shape ``[B, 1]``
broadcasts against PPO's ``[B]`` returns into a ``[B, B]`` loss. So every policy, when it is
built and when it is restored, runs its network on :data:`SAMPLE_BATCH` sample rows and again
on one row (:data:`SAMPLE_BATCHES`: acting on one observation is a batch of one, which a
network that squeezes every size-1 axis, ``.squeeze()``, turns into outputs without a batch axis)
and compares each output with the shape its algorithm reads (``Policy.check_model_outputs``); a
mismatch is a :class:`~cairn.errors.ConfigError` naming the network's class, the output, the
expected and the actual shape, and the fix; so is an output of a dtype numpy cannot hold
(bfloat16), which acting could not read.

The sample rows are zeros, with every action legal for a masked policy: only shapes are read.
The forward runs in eval mode, without gradients, with torch's global generator forked: it
changes nothing (no BatchNorm statistics, no dropout draws, no random state).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from cairn.errors import ConfigError
from cairn.models import ModelBase, RecurrentActorCriticModel
from cairn.policy.action_masking import MaskedActorCritic, MaskedQModel

__all__ = ["SAMPLE_BATCH", "SAMPLE_BATCHES", "SAMPLE_STEPS", "quiet_forward", "sample_rows", "unmasked",
           "network_name", "require_shape", "unpack_outputs", "check_actor_critic_outputs",
           "check_q_value_outputs"]

#: Rows in the sample batch: 5 rather than 1 or 2, so that a batch axis is not mistaken for an
#: action axis of common sizes, nor squeezed away.
SAMPLE_BATCH = 5
#: The batch sizes every check runs: :data:`SAMPLE_BATCH`, then 1 (acting on one observation).
SAMPLE_BATCHES = (SAMPLE_BATCH, 1)
#: Steps per sequence for a recurrent network's sample batch.
SAMPLE_STEPS = 3


@contextlib.contextmanager
def quiet_forward(module: nn.Module) -> Iterator[None]:
    """Run ``module`` without side effects: eval mode (restored after), no gradients, and
    torch's global generator forked (a model that draws noise leaves it as it was)."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            yield
    finally:
        for m, mode in modes:
            m.training = mode


def sample_rows(feature_size: int, mask_size: int = 0,
                batch: int = SAMPLE_BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    """``(features, mask)``: float32 zeros ``[batch, feature_size]`` and ones
    ``[batch, mask_size]`` (every action legal)."""
    return (torch.zeros(batch, feature_size), torch.ones(batch, mask_size))


def unmasked(model: nn.Module, mask: torch.Tensor) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The network inside a masked policy's model, and the extra arguments it takes (the mask
    when it asks for it); ``(model, ())`` for an unmasked one. The check reads the network's
    own outputs: masking would broadcast (or fail on) a wrong width before it could be seen."""
    if isinstance(model, (MaskedActorCritic, MaskedQModel)):
        return model.net, model.extra(mask)
    return model, ()


def network_name(net: nn.Module, model_config: Mapping[str, Any], key: str = "custom_model") -> str:
    """How an error names ``net`` (the network inside a masked policy's model): a user's class
    with its config key, the Keras builder of ``model.keras_model``, or cairn's own class."""
    if isinstance(net, (MaskedActorCritic, MaskedQModel)):
        net = net.net
    cls = type(net)
    if isinstance(net, ModelBase):
        return f"{cls.__module__}.{cls.__qualname__} (model.{key})"
    if model_config.get("keras_model") and hasattr(net, "network"):
        return f"the Keras model of model.keras_model={model_config['keras_model']!r}"
    return f"cairn's {cls.__qualname__}"


def _shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(n)) for n in shape) + "]"


def require_shape(value: Any, expected: Sequence[int], *, network: str, output: str, reads: str,
                  fix: str, rows: int = SAMPLE_BATCH) -> None:
    """ConfigError unless ``value`` is a tensor of shape ``expected``. ``reads`` says what the
    algorithm reads (``"[batch, num_outputs=2] for Discrete(2)"``); ``fix`` how to fix it;
    ``rows`` the sample observations the network ran on (one: the message says to keep the
    batch axis)."""
    if not isinstance(value, torch.Tensor):
        found = f"a {type(value).__name__}, not a tensor"
    elif tuple(value.shape) == tuple(expected):
        _require_numpy_dtype(value, network=network, output=output)
        return
    else:
        found = f"shape {_shape(value.shape)}"
    one_row = (" On one observation (how a policy acts on one) the batch axis must stay: squeeze a "
               "named axis (.squeeze(-1)), never every size-1 axis (.squeeze()).") if rows == 1 else ""
    raise ConfigError(
        f"{network} returned {output} of {found}, expected {_shape(expected)}: the policy reads "
        f"{reads} (checked on {rows} sample observation{'s' if rows != 1 else ''}). Fix: {fix}{one_row}")


def _require_numpy_dtype(value: torch.Tensor, *, network: str, output: str) -> None:
    """ConfigError unless numpy can hold ``value``'s dtype: acting reads every output as numpy,
    so a bfloat16 output (a Keras model under ``keras.config.set_dtype_policy("mixed_bfloat16")``)
    built and then failed on the first action with torch's "unsupported ScalarType BFloat16"."""
    try:
        torch.empty(0, dtype=value.dtype).numpy()
    except TypeError:
        pass
    else:
        return
    keras = sys.modules.get("keras")
    policy = keras.config.dtype_policy().name if keras is not None and hasattr(keras, "config") else None
    under = f" (Keras' dtype policy is {policy!r})" if policy not in (None, "float32") else ""
    raise ConfigError(
        f"{network} returned {output} of dtype {value.dtype}{under}, which numpy cannot hold: the "
        "policy acts on its outputs as numpy arrays. Fix: return float32 outputs (a Keras model: "
        "give its output layers dtype='float32', or use keras.config.set_dtype_policy("
        "'mixed_float16') or 'float32'; a torch model: .float() its outputs).")


def unpack_outputs(value: Any, count: int, *, network: str, call: str, names: str) -> Sequence[Any]:
    """``value`` when it is a tuple or list of ``count`` outputs, else ConfigError."""
    if isinstance(value, (tuple, list)) and len(value) == count:
        return value
    found = f"{len(value)} values" if isinstance(value, (tuple, list)) else f"a {type(value).__name__}"
    raise ConfigError(f"{network}: {call} returned {found}, expected a tuple of {count} outputs, {names}. "
                      "Fix: return them as a tuple, in that order.")


def check_actor_critic_outputs(model: nn.Module, *, feature_size: int, mask_size: int, num_outputs: int,
                               action_space: gym.Space[Any], model_config: Mapping[str, Any]) -> None:
    """PPO's network: ``forward``, ``action_inputs`` and ``value`` give action inputs
    ``[B, num_outputs]`` and values ``[B]``; a recurrent one ``[B, T, num_outputs]``, ``[B, T]``
    and a state out in the layout of its state in (:func:`_check_recurrent_outputs`)."""
    name = network_name(model, model_config)
    for batch in SAMPLE_BATCHES:
        _check_actor_critic_batch(model, batch, name=name, feature_size=feature_size, mask_size=mask_size,
                                  num_outputs=num_outputs, action_space=action_space)


def _check_actor_critic_batch(model: nn.Module, batch: int, *, name: str, feature_size: int, mask_size: int,
                              num_outputs: int, action_space: gym.Space[Any]) -> None:
    features, mask = sample_rows(feature_size, mask_size, batch)
    net, extra = unmasked(model, mask)
    inputs_fix = (f"return action inputs of shape [batch, num_outputs] (num_outputs={num_outputs}, the "
                  "constructor's third argument: the logits of Discrete(n), sum(nvec) for MultiDiscrete, "
                  "2 * size for a Box's mean and log-std).")
    value_fix = "return values of shape [batch] (a [batch, 1] value head needs .squeeze(-1))."
    reads = f"[batch, num_outputs={num_outputs}] for {action_space}"
    with quiet_forward(net):
        if isinstance(net, RecurrentActorCriticModel):
            _check_recurrent_outputs(net, features, num_outputs=num_outputs, action_space=action_space,
                                     name=name, inputs_fix=inputs_fix)
            return
        if type(net).forward is not nn.Module.forward:  # a policy's own module may only act
            inputs, value = unpack_outputs(net(features, *extra), 2, network=name, call="forward(obs)",
                                           names="(action_inputs [batch, num_outputs], value [batch])")
            require_shape(inputs, (batch, num_outputs), network=name, output="action_inputs", reads=reads,
                          fix=inputs_fix, rows=batch)
            require_shape(value, (batch,), network=name, output="value", reads="[batch]", fix=value_fix,
                          rows=batch)
        # Acting reads action_inputs and PPO's bootstrap value(): a class may override either.
        for method, expected, method_reads, fix in (
                ("action_inputs", (batch, num_outputs), reads, inputs_fix),
                ("value", (batch,), "[batch]", value_fix)):
            if hasattr(net, method):
                require_shape(getattr(net, method)(features, *extra), expected, network=name,
                              output=f"{method}(obs)", reads=method_reads, fix=fix, rows=batch)


def _check_recurrent_outputs(net: RecurrentActorCriticModel, features: torch.Tensor, *, num_outputs: int,
                             action_space: gym.Space[Any], name: str, inputs_fix: str) -> None:
    batch, steps = features.shape[0], SAMPLE_STEPS
    initial = net.get_initial_state()
    if not isinstance(initial, (list, tuple)) or not all(isinstance(s, torch.Tensor) for s in initial):
        raise ConfigError(f"{name}: get_initial_state() returned {type(initial).__name__}, expected a list "
                          "of unbatched tensors (e.g. [h, c] of [cell_size] each).")
    state = [s.unsqueeze(0).repeat(batch, *([1] * s.dim())) for s in initial]
    obs = features.unsqueeze(1).repeat(1, steps, 1)
    inputs, value, state_out = unpack_outputs(
        net(obs, state), 3, network=name, call="forward(obs, state)",
        names="(action_inputs [batch, T, num_outputs], value [batch, T], state_out)")
    require_shape(inputs, (batch, steps, num_outputs), network=name, output="action_inputs",
                  reads=f"[batch, T, num_outputs={num_outputs}] for {action_space}",
                  fix=inputs_fix.replace("[batch, num_outputs]", "[batch, T, num_outputs]"), rows=batch)
    require_shape(value, (batch, steps), network=name, output="value", reads="[batch, T]",
                  fix="return values of shape [batch, T] (a [batch, T, 1] value head needs .squeeze(-1)).",
                  rows=batch)
    outs = unpack_outputs(state_out, len(state), network=name, call="forward(obs, state)'s state_out",
                    names="one tensor per component of get_initial_state()")
    for k, (out, s) in enumerate(zip(outs, state)):
        require_shape(out, tuple(s.shape), network=name, output=f"state_out[{k}]",
                      reads=f"[batch, *get_initial_state()[{k}].shape]",
                      fix="return the state after the last step in the layout of the state passed in.",
                      rows=batch)


def check_q_value_outputs(model: nn.Module, *, feature_size: int, mask_size: int, num_actions: int,
                          action_space: gym.Space[Any], model_config: Mapping[str, Any]) -> None:
    """DQN's network: ``forward`` gives Q-values ``[B, num_actions]``."""
    name = network_name(model, model_config)
    for batch in SAMPLE_BATCHES:
        features, mask = sample_rows(feature_size, mask_size, batch)
        net, extra = unmasked(model, mask)
        with quiet_forward(net):
            q_values = net(features, *extra)
        require_shape(q_values, (batch, num_actions), network=name, output="q_values",
                      reads=f"[batch, num_actions={num_actions}] for {action_space}",
                      fix=f"return one Q-value per action, [batch, num_outputs] (num_outputs={num_actions}, "
                          "the constructor's third argument).", rows=batch)
