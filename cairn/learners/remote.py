"""The DDP learners of an algorithm (``num_learners >= 1``): N Ray actors in one
``torch.distributed`` group, started at build and killed on ``stop()``.

The driver lends each policy's state for one iteration (:mod:`cairn.learners.group`): the
first update of the loan sends it (one object in Ray's store, read by every rank) with the
learn function's inputs; every rank runs the same learn function on its shard of each
minibatch; rank 0's weights come back after every update, its learned parts when the loan ends.
So checkpoints, env runners and evaluation see only the driver's policies, and a checkpoint of
N learners restores with any other number (docs/learners.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cairn.errors import CairnError, ConfigError, LearnerFailedError
from cairn.learners.actor import LearnerActor, LearnFunction
from cairn.learners.sync import LearnOutput, join_outputs
from cairn.ray_cluster import ensure_ray

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig

__all__ = ["RemoteLearners", "STARTUP_TIMEOUT_S"]

#: How long to wait for the learner actors to start and form their group.
STARTUP_TIMEOUT_S = 120.0


class RemoteLearners:
    """``config.num_learners`` learner actors, each reserving ``num_cpus_per_learner`` Ray CPUs
    and ``num_gpus_per_learner`` GPUs. Started when built; :meth:`update` starts a new group
    when an earlier one failed."""

    def __init__(self, config: AlgorithmConfig) -> None:
        self.config = config
        self.actors: list[Any] = []
        self.start()

    @property
    def num_learners(self) -> int:
        return int(self.config.num_learners)

    def start(self) -> None:
        """Start the actors and form the process group (rank 0's address is the rendezvous)."""
        ray = ensure_ray("num_learners >= 1",
                         "set config.learners(num_learners=0) to learn in this process")
        cfg = self.config
        if cfg.num_gpus_per_learner:
            # The GPUs are the cluster's, not necessarily this process's: ask Ray, not torch.
            have, need = ray.cluster_resources().get("GPU", 0.0), cfg.num_gpus_per_learner * self.num_learners
            if have < need:
                raise ConfigError(
                    f"num_learners={self.num_learners} x num_gpus_per_learner={cfg.num_gpus_per_learner:g} "
                    f"needs {need:g} GPUs, but the Ray cluster has {have:g}. Lower them, set "
                    "num_gpus_per_learner=0 to learn on CPUs, or connect to a cluster with GPUs."
                )
        device = "cuda" if cfg.num_gpus_per_learner else "cpu"  # Ray sets CUDA_VISIBLE_DEVICES
        actor_cls = ray.remote(num_cpus=cfg.num_cpus_per_learner, num_gpus=cfg.num_gpus_per_learner,
                               max_restarts=0)(LearnerActor)
        config_ref = ray.put(cfg)
        threads = max(1, int(cfg.num_cpus_per_learner))
        self.actors = [actor_cls.remote(config_ref, rank, self.num_learners, device=device,
                                        num_threads=threads)
                       for rank in range(self.num_learners)]
        try:
            address = ray.get(self.actors[0].address.remote(), timeout=STARTUP_TIMEOUT_S)
            ray.get([a.join.remote(address) for a in self.actors], timeout=STARTUP_TIMEOUT_S)
        except Exception as error:
            free = ray.available_resources().get("CPU", 0.0)
            self.stop()
            raise CairnError(
                f"{self.num_learners} learner actors (each {cfg.num_cpus_per_learner:g} CPUs, "
                f"{cfg.num_gpus_per_learner:g} GPUs) did not start and form their process group "
                f"within {STARTUP_TIMEOUT_S:g} s: {type(error).__name__}: {error}. Free Ray CPUs now: "
                f"{free:g}; another algorithm may still hold its actors (algo.stop() frees them), "
                "or start Ray with more CPUs (ray.init(num_cpus=...))."
            ) from error

    def update(self, fn: LearnFunction, policy_id: str, state: Mapping[str, Any] | None,
               inputs: Mapping[str, Any]) -> tuple[LearnOutput, dict[str, Any]]:
        """Run ``fn`` on every rank (loading the driver's ``state`` first when a loan starts:
        one object in Ray's store that every rank reads); returns the joined output
        (:func:`~cairn.learners.sync.join_outputs`: the ranks' per-row outputs in rank order, the
        whole minibatches' loss statistics) and rank 0's weights and ``num_grad_updates``.

        A rank that dies or raises: the group is shut down and LearnerFailedError names it.
        """
        import ray

        if not self.actors:
            self.start()
        state_ref = None if state is None else ray.put(dict(state))
        inputs_ref = ray.put(dict(inputs))
        refs = [a.update.remote(fn, policy_id, state_ref, inputs_ref) for a in self.actors]
        results = self._gather(refs, "an update")
        return join_outputs([output for output, _ in results]), results[0][1]

    def learned(self, policy_id: str) -> dict[str, Any]:
        """Rank 0's learned parts of ``policy_id`` (:func:`~cairn.learners.policy_sync.learned_parts`)."""
        result: dict[str, Any] = self._gather([self.actors[0].learned.remote(policy_id)],
                                              "reading its policy state")[0]
        return result

    def release(self, policy_ids: list[str]) -> None:
        """Every rank drops its copies of ``policy_ids`` (:meth:`LearnerActor.release`)."""
        if self.actors:  # none: a failed group held nothing, the next one starts empty
            self._gather([a.release.remote(policy_ids) for a in self.actors], "releasing policies")

    def _gather(self, refs: list[Any], during: str) -> list[Any]:
        import ray
        from ray.exceptions import RayActorError

        pending = {ref: rank for rank, ref in enumerate(refs)}
        results: dict[int, Any] = {}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            rank = pending.pop(ready[0])
            try:
                results[rank] = ray.get(ready[0])
            except Exception as error:
                # A peer of a dead rank fails too (its collective loses the connection): name
                # a rank whose actor died, when one did, rather than its peers.
                failures = {rank: error}
                if not isinstance(error, RayActorError):  # maybe a peer of one that is dying
                    for ref, other in pending.items():
                        try:
                            ray.get(ref, timeout=2.0)
                        except Exception as other_error:
                            failures[other] = other_error
                died = [r for r, e in sorted(failures.items()) if isinstance(e, RayActorError)]
                culprit = died[0] if died else rank
                self.stop()
                raise LearnerFailedError(
                    f"Learner rank {culprit} of {self.num_learners} failed during {during}: "
                    f"{type(failures[culprit]).__name__}: {failures[culprit]}. The learners were "
                    "shut down; the policies keep the weights of the last completed update and the "
                    "optimizer state of their last sync with the learners (docs/learners.md); call "
                    "train() again to start a new group of learners, or rebuild the algorithm "
                    "(Algorithm.from_checkpoint) with the num_learners you want."
                ) from failures[culprit]
        return [results[rank] for rank in range(len(refs))]

    def stop(self) -> None:
        """Kill the actors, which releases their CPUs and GPUs."""
        import ray

        if ray.is_initialized():
            for actor in self.actors:
                ray.kill(actor)
        self.actors = []
