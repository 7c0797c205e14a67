"""The ``model`` keys of recurrent policies (RLlib's names) and their checks: ``use_lstm``,
``lstm_cell_size``, ``max_seq_len`` (docs/ppo.md, "Recurrent policies")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.errors import ConfigError

__all__ = ["RECURRENT_MODEL_KEYS", "RECURRENT_DEFAULTS", "check_recurrent_settings", "recurrent_settings"]

#: The optional ``model`` keys of a recurrent policy and their defaults (RLlib's).
RECURRENT_DEFAULTS: dict[str, Any] = {"use_lstm": False, "lstm_cell_size": 256, "max_seq_len": 20}
RECURRENT_MODEL_KEYS = tuple(RECURRENT_DEFAULTS)


def recurrent_settings(model: Mapping[str, Any]) -> dict[str, Any]:
    """``use_lstm``, ``lstm_cell_size`` and ``max_seq_len`` of a ``model`` config, defaults filled."""
    return {key: model.get(key, default) for key, default in RECURRENT_DEFAULTS.items()}


def check_recurrent_settings(model: Mapping[str, Any]) -> None:
    """Raise :class:`~cairn.errors.ConfigError` for invalid recurrent keys of ``model``, or
    ``use_lstm`` combined with what it does not support."""
    settings = recurrent_settings(model)
    if not isinstance(settings["use_lstm"], bool):
        raise ConfigError(f"Config 'model.use_lstm' must be True or False, got {settings['use_lstm']!r}.")
    for key, high in (("lstm_cell_size", 65536), ("max_seq_len", 100_000)):
        value = settings[key]
        if not (isinstance(value, int) and not isinstance(value, bool) and 0 < value <= high):
            raise ConfigError(f"Config 'model.{key}' must be an int in [1, {high}], got {value!r}.")
    if not settings["use_lstm"]:
        return
    if model.get("custom_model") is not None:
        raise ConfigError(
            f"Config 'model.use_lstm'=True with model.custom_model={model['custom_model']!r:.100}: "
            "use_lstm wraps the built-in network only. A network of your own with memory subclasses "
            "cairn.models.RecurrentActorCriticModel instead (docs/models.md); drop use_lstm.")
    if model.get("framework", "torch") != "torch":
        raise ConfigError(
            f"Config 'model.use_lstm'=True with model.framework={model['framework']!r}: recurrent "
            "policies are torch networks only; set framework='torch'.")
