"""Importing Keras on its torch backend, lazily, with errors that say how to fix the process.

Keras picks its backend once, when it is first imported, from ``KERAS_BACKEND`` (then
``~/.keras/keras.json``). cairn trains Keras models with its own torch losses and optimizers,
which needs the torch backend: there a Keras layer is a ``torch.nn.Module`` whose variables
are ``torch.nn.Parameter``\\ s. So :func:`import_keras` sets ``KERAS_BACKEND=torch`` only
when nothing else chose a backend and Keras is not imported yet, and refuses, with
:class:`~cairn.errors.FrameworkUnavailableError`, a process where Keras runs (or is set to
run) on another backend. ``import cairn`` never imports Keras.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from cairn.errors import FrameworkUnavailableError

__all__ = ["KERAS_INSTALL_HINT", "MIN_KERAS_VERSION", "builds_float32", "import_keras",
           "import_tensorflow_quietly", "keras_available"]

KERAS_INSTALL_HINT = "`pip install 'cairn-rl[keras]'` (in a cairn checkout: `pip install -e '.[keras]'`)"
#: Keras 3.8 added ``model.export(..., format="onnx")``, which cairn's ONNX export uses.
MIN_KERAS_VERSION = (3, 8)


def keras_available() -> bool:
    """Whether Keras can be imported here (without importing it)."""
    if sys.modules.get("keras") is not None:
        return True
    try:
        return importlib.util.find_spec("keras") is not None
    except (ImportError, ValueError):
        return False


def _check_backend(keras: Any, why: str) -> Any:
    backend = keras.backend.backend()
    if backend != "torch":
        raise FrameworkUnavailableError(
            f"{why}: Keras is loaded in this process with the {backend!r} backend, but cairn "
            "trains Keras models with its torch losses and optimizers, which needs Keras' torch "
            "backend. Keras chooses its backend once, when first imported: set "
            "KERAS_BACKEND=torch before anything imports keras (or leave KERAS_BACKEND unset "
            "and let cairn import it), in a fresh process."
        )
    version = tuple(int(p) for p in keras.__version__.split(".")[:2] if p.isdigit())
    if version < MIN_KERAS_VERSION:
        raise FrameworkUnavailableError(
            f"{why}: Keras {keras.__version__} is installed, cairn needs Keras >= "
            f"{'.'.join(map(str, MIN_KERAS_VERSION))}; install it with {KERAS_INSTALL_HINT}."
        )
    return keras


def import_keras(why: str = "model.framework='keras'") -> Any:
    """The ``keras`` module, on the torch backend; ``why`` starts any error message.

    Raises :class:`~cairn.errors.FrameworkUnavailableError` when Keras is not installed (or
    older than 3.8), or when it was imported, or ``KERAS_BACKEND`` asks for it to be imported,
    with another backend.
    """
    loaded = sys.modules.get("keras")
    if loaded is not None:
        return _check_backend(loaded, why)
    chosen = os.environ.get("KERAS_BACKEND")
    if chosen is not None and chosen != "torch":
        raise FrameworkUnavailableError(
            f"{why}: KERAS_BACKEND={chosen!r} is set in this process, but cairn trains Keras "
            "models on Keras' torch backend. Set KERAS_BACKEND=torch (or unset it) before "
            "starting Python. To serve a Keras policy with TensorFlow, export it: "
            "`cairn export CHECKPOINT --format saved_model --out DIR` (docs/keras.md)."
        )
    if not keras_available():
        raise FrameworkUnavailableError(
            f"{why}: Keras is not installed. Install it with {KERAS_INSTALL_HINT}; restoring "
            "or building a Keras policy needs it, torch policies do not."
        )
    os.environ.setdefault("KERAS_BACKEND", "torch")
    import keras

    return _check_backend(keras, why)


P = ParamSpec("P")
R = TypeVar("R")


def builds_float32(build: Callable[P, R]) -> Callable[P, R]:
    """``build`` (a function that makes cairn's own Keras layers) run with Keras' default dtype
    policy ``"float32"``, the process's policy restored after it (Keras keeps it per thread).

    cairn's networks are float32, as their torch twins: a process-wide policy the user set for
    their own models (``keras.config.set_dtype_policy("mixed_float16")`` or ``"float64"``) would
    otherwise reach cairn's layers, which cairn runs through each layer's ``call`` (no casts) but
    Keras and ``model.keras`` through ``Model.__call__`` (float16: the export no longer equals
    the policy), and whose float64 variables draw other initial weights than the torch network.
    A user's own model (``model.keras_model``) keeps the dtypes its builder gave it."""

    @functools.wraps(build)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        keras = import_keras()
        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy("float32")
        try:
            return build(*args, **kwargs)
        finally:
            keras.config.set_dtype_policy(previous)

    return run


#: Lines TensorFlow's C++ runtime prints to stderr while it is imported (absl logs them before
#: its logging is set up, whatever TF_CPP_MIN_LOG_LEVEL says).
_TENSORFLOW_START_UP_LINES = ("All log messages before absl::InitializeLog()", "port.cc:",
                              "cpu_feature_guard.cc:", "To enable the following instructions:")


def import_tensorflow_quietly() -> None:
    """Import TensorFlow, when it is installed and not imported yet, without its start-up lines.

    Keras' saving code imports TensorFlow whenever it is installed (even on the torch backend,
    to recognise its types), and TensorFlow's C++ runtime then writes lines about oneDNN and CPU
    instructions straight to file descriptor 2, which Python cannot filter: every first Keras
    save of a process printed them. cairn imports it first with descriptor 2 sent to a file,
    and writes back everything else that arrived there meanwhile (another thread's output is
    delayed, not lost). An import that fails is left for Keras to find.
    """
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        except Exception:  # Keras imports it (or finds it unusable) itself, and says so
            pass
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        lines = capture.read().decode(errors="replace").splitlines(keepends=True)
    kept = "".join(line for line in lines if not any(marker in line for marker in _TENSORFLOW_START_UP_LINES))
    if kept:
        os.write(2, kept.encode())
