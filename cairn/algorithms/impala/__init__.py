"""IMPALA and APPO (Espeholt et al. 2018; Luo et al. 2020): actor-critic learning from
fragments of experience with V-trace's off-policy correction (docs/impala.md).

The pieces: :mod:`~cairn.algorithms.impala.vtrace` (V-trace, pure), :mod:`~cairn.algorithms.impala.loss`
(the losses, pure), :mod:`~cairn.algorithms.impala.learn` (the learn function),
:mod:`~cairn.algorithms.impala.fragments` (fragments tagged with a weights version),
:mod:`~cairn.algorithms.impala.recurrent` (recurrent policies, learnt over PPO's
:class:`~cairn.algorithms.ppo.recurrent.Sequences`), :mod:`~cairn.algorithms.impala.appo_policy` (APPO's
target network) and
:mod:`~cairn.algorithms.impala.impala` (the algorithms).
"""

from cairn.algorithms.impala.appo_policy import APPOPolicy
from cairn.algorithms.impala.config import APPOConfig, IMPALAConfig
from cairn.algorithms.impala.fragments import Fragment
from cairn.algorithms.impala.impala import APPO, IMPALA

__all__ = ["APPO", "APPOConfig", "APPOPolicy", "Fragment", "IMPALA", "IMPALAConfig"]
