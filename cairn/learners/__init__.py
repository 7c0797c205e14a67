"""Learners: who runs the gradient updates, on which device, in how many processes.

``num_learners=0`` learns in the driver's process; ``num_learners=N >= 1`` runs N Ray actors
that form a ``torch.distributed`` group and split every minibatch (DDP). The learn functions
of PPO, DQN and SAC take a :class:`~cairn.learners.sync.GradientSync` and run unchanged in
both places (docs/learners.md).
"""

from cairn.learners.actor import LearnFunction
from cairn.learners.device import learner_device
from cairn.learners.group import LearnerGroup
from cairn.learners.remote import RemoteLearners
from cairn.learners.sync import LOCAL_SYNC, DistributedGradientSync, GradientSync, LearnOutput

__all__ = ["LOCAL_SYNC", "DistributedGradientSync", "GradientSync", "LearnFunction", "LearnOutput",
           "LearnerGroup", "RemoteLearners", "learner_device"]
