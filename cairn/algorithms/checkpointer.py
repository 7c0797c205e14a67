"""The Algorithm's checkpointing component: one object, created and owned by each Algorithm,
that saves it (blocking, or in the background), restores it in place, and restores one
component of a checkpoint into it.

It talks to its algorithm through
:class:`~cairn.algorithms.save_restore.CheckpointedAlgorithm` alone (the state protocol,
the policies and the config), so it neither imports the Algorithm class nor
reaches into the rest of its surface; the layout of the state is the Algorithm's own
(``get_state``, checked by :mod:`cairn.algorithms.state`). All it holds is per algorithm:
the background writer (:class:`~cairn.algorithms.async_save.BackgroundSaver`). An incremental
save keeps no memory at all: what it reuses is proven by content against the earlier
checkpoint's manifests (:mod:`cairn.checkpoint.incremental`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from cairn.algorithms.async_save import BackgroundSaver
from cairn.algorithms.component_restore import restore_policy_component
from cairn.algorithms.save_restore import CheckpointedAlgorithm, prepare_algorithm_save, restore_algorithm

__all__ = ["AlgorithmCheckpointer"]


class AlgorithmCheckpointer:
    """Saves and restores one algorithm (:meth:`Algorithm.save
    <cairn.algorithms.algorithm.Algorithm.save>`, ``restore``, ``restore_from_path``)."""

    def __init__(self, algorithm: CheckpointedAlgorithm) -> None:
        self._algorithm = algorithm
        self._saver = BackgroundSaver()  # save(blocking=False)'s writer thread

    def save(self, path: str | os.PathLike[str], *, blocking: bool,
             storage_options: Mapping[str, Any] | None, previous: str | os.PathLike[str] | None,
             metadata: Mapping[str, Any] | None,
             committed: Callable[[str], None]) -> str | Future[str]:
        """Write a checkpoint at ``path`` (the arguments are :meth:`Algorithm.save
        <cairn.algorithms.algorithm.Algorithm.save>`'s) and call ``committed(location)`` once it
        is committed; return the location, or with ``blocking=False`` its Future (the state is
        snapshotted before this returns)."""
        self._saver.wait()  # one write at a time; raises an earlier background failure
        # Warnings about the config point at the caller of Algorithm.save (past this and it).
        write = prepare_algorithm_save(self._algorithm, path, snapshot=not blocking,
                                       storage_options=storage_options, previous=previous,
                                       metadata=metadata, stacklevel=4)

        def write_and_report() -> str:
            location = write()
            committed(location)
            return location

        if blocking:
            return write_and_report()
        return self._saver.submit(write_and_report, os.fspath(path))

    def restore(self, checkpoint: Any, *, storage_options: Mapping[str, Any] | None = None) -> None:
        """Load a checkpoint of this algorithm into it, in place
        (:func:`~cairn.algorithms.save_restore.restore_algorithm`)."""
        restore_algorithm(self._algorithm, checkpoint, storage_options=storage_options)

    def restore_component(self, path: Any, component: str | None, *,
                          storage_options: Mapping[str, Any] | None = None) -> None:
        """Load ``component`` of the checkpoint ``path`` into the algorithm in place: None is
        the whole checkpoint (:meth:`restore`), else one policy's state or weights
        (:func:`~cairn.algorithms.component_restore.restore_policy_component`)."""
        if component is None:
            self.restore(path, storage_options=storage_options)
        else:
            restore_policy_component(self._algorithm.policies, path, component,
                                     storage_options=storage_options)

    def flush(self) -> None:
        """Wait for a background write in flight and stop the writer thread; raise a failure
        of it that no ``save()`` raised yet."""
        self._saver.flush()
