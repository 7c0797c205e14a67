"""LearnerGroup: who runs an algorithm's learn functions (RLlib's name).

- ``num_learners=0`` on the CPU: the learn function runs on the driver's policy itself.
- ``num_learners=0`` with ``num_gpus_per_learner > 0``: on device copies of the driver's
  policies (:class:`~cairn.learners.actor.LearnerActor` in this process); the driver's
  policies stay on the CPU, where the env runners act with them.
- ``num_learners=N >= 1``: on N DDP Ray actors (:class:`~cairn.learners.remote.RemoteLearners`).

In the last two cases the updated policy state comes back into the driver's policy after each
learn call, so the driver's policies are always the authoritative ones (checkpoints, env
runners, evaluation).
"""

from __future__ import annotations

from typing import Any

import torch

from cairn.learners.actor import LearnerActor, LearnFunction
from cairn.learners.device import learner_device
from cairn.learners.remote import RemoteLearners
from cairn.learners.sync import LOCAL_SYNC, LearnOutput
from cairn.policy.policy import Policy

__all__ = ["LearnerGroup"]


class LearnerGroup:
    """The learners of one algorithm, per ``config.learners(...)``.

    Build it once the policies exist; :meth:`stop` releases remote learners' resources.
    """

    def __init__(self, config: Any) -> None:
        #: The in-process learner's device (the CPU with remote learners, whose GPUs are the
        #: Ray cluster's: RemoteLearners checks them).
        self.device = learner_device(config) if not config.num_learners else torch.device("cpu")
        self.remote: RemoteLearners | None = None
        self.device_learner: LearnerActor | None = None
        if config.num_learners:  # Keras and recurrent policies were refused by config.validate()
            self.remote = RemoteLearners(config)
        elif self.device.type != "cpu":
            self.device_learner = LearnerActor(config, device=str(self.device))
        self.config = config

    @property
    def num_remote_learners(self) -> int:
        """The DDP learner actors (0: learning in this process)."""
        return len(self.remote.actors) if self.remote is not None else 0

    def remote_actors(self) -> list[Any]:
        """The learner actors' handles, by rank (empty without remote learners)."""
        return list(self.remote.actors) if self.remote is not None else []

    def update(self, fn: LearnFunction, policy_id: str, policy: Policy, **inputs: Any) -> LearnOutput:
        """Run learn function ``fn(config, policy, sync, **inputs)`` on ``policy``, wherever the
        config says; ``policy`` holds the result afterwards."""
        if self.remote is not None:
            return self.remote.update(fn, policy_id, policy, inputs)
        if self.device_learner is not None:
            output, state = self.device_learner.update(fn, policy_id, policy.get_state(), inputs)
            if state is not None:  # rank 0, which a learner alone is
                policy.set_state(state)
            return output
        return fn(self.config, policy, LOCAL_SYNC, **inputs)

    def stop(self) -> None:
        """Kill remote learners (releasing their CPUs and GPUs)."""
        if self.remote is not None:
            self.remote.stop()
