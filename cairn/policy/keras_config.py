"""The model settings that choose a policy's framework, checked without importing Keras.

``model={"framework": "keras"}`` (or ``config.framework("keras")``) builds the policy's
networks as Keras 3 models run on Keras' torch backend (docs/keras.md);
``model={"keras_model": "package.module:builder"}`` names a function that builds the Keras
model itself. Both keys are optional: a model config without them is a torch network, and a
torch policy's stored config does not change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cairn.errors import ConfigError

__all__ = ["FRAMEWORKS", "FRAMEWORK_MODEL_KEYS", "check_framework_settings", "model_framework", "uses_keras"]

#: The values of ``model["framework"]`` (and ``config.framework(...)``).
FRAMEWORKS = ("torch", "keras")
#: Optional ``model`` keys (no default: absent means a torch network).
FRAMEWORK_MODEL_KEYS = ("framework", "keras_model")

_REFERENCE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def check_framework_settings(model: Mapping[str, Any]) -> None:
    """Raise ConfigError for an invalid ``framework`` or ``keras_model`` in a model config."""
    framework = model.get("framework", "torch")
    if framework not in FRAMEWORKS:
        raise ConfigError(
            f"Config 'model.framework'={framework!r} is not supported; choose one of "
            f"{list(FRAMEWORKS)} (e.g. config.framework('keras'))."
        )
    reference = model.get("keras_model")
    if reference is None:
        return
    if not isinstance(reference, str) or not _REFERENCE.match(reference):
        raise ConfigError(
            f"Config 'model.keras_model'={reference!r} is invalid: expected an import path "
            "'package.module:builder' of a function building the Keras model (callables are "
            "stored by import path, so that a checkpoint can name it)."
        )
    if framework != "keras":
        raise ConfigError(
            f"Config 'model.keras_model'={reference!r} needs model.framework='keras' (got "
            f"{framework!r}): set config.framework('keras') or model={{'framework': 'keras', ...}}."
        )


def model_framework(model: Mapping[str, Any] | None) -> str:
    """``"keras"`` or ``"torch"`` for a (merged or partial) model config."""
    return str((model or {}).get("framework", "torch"))


def uses_keras(policy_config: Mapping[str, Any]) -> bool:
    """Whether a policy config (with its ``model`` section) builds Keras networks."""
    model = policy_config.get("model")
    return isinstance(model, Mapping) and model_framework(model) == "keras"
