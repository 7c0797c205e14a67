"""The learner's device: the CPU, or the accelerator torch reports (``cuda:0``, else ``mps``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from cairn.errors import ConfigError

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig

__all__ = ["learner_device", "accelerator_report"]


def accelerator_report() -> str:
    """What torch says about accelerators here, for error messages."""
    mps = getattr(torch.backends, "mps", None)
    mps_available = bool(mps is not None and mps.is_available())
    return (f"torch {torch.__version__} reports torch.cuda.is_available()={torch.cuda.is_available()} "
            f"(torch.version.cuda={torch.version.cuda}, device_count={torch.cuda.device_count()}) "
            f"and torch.backends.mps.is_available()={mps_available}")


def learner_device(config: AlgorithmConfig) -> torch.device:
    """The device of the learner that ``config`` asks for (``build()`` checks it).

    ``num_gpus_per_learner=0``: the CPU. Otherwise ``cuda:0`` where torch sees a CUDA device,
    else ``mps`` where that is the accelerator (Apple silicon); ConfigError where torch sees
    neither, naming what torch reports.
    """
    if not config.num_gpus_per_learner:
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", 0)
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    raise ConfigError(
        f"Config 'num_gpus_per_learner'={config.num_gpus_per_learner!r} asks for a GPU, but "
        f"{accelerator_report()}. Set config.learners(num_gpus_per_learner=0) to learn on the CPU "
        "(restoring a GPU run's checkpoint here: Algorithm.from_checkpoint(path, config_overrides="
        "{'num_gpus_per_learner': 0})), or install a torch build for your accelerator "
        "(https://pytorch.org/get-started)."
    )
