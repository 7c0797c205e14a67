"""The old path of :mod:`cairn.algorithms.save_restore`, kept for users: docs/storage.md told them
to ``from cairn.algorithms.checkpointing import save_algorithm`` before the module was renamed to
say what it holds (issue 38 item 6). New code imports from :mod:`cairn.algorithms.save_restore`."""

from cairn.algorithms.save_restore import save_algorithm

__all__ = ["save_algorithm"]
