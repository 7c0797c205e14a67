"""Checkpoints: the only package that reads or writes checkpoint files.

See docs/checkpoint-format.md for the normative format.
"""

from cairn.checkpoint.atomic import cleanup
from cairn.checkpoint.format import FORMAT_VERSION
from cairn.checkpoint.reader import get_checkpoint_info

__all__ = ["FORMAT_VERSION", "cleanup", "get_checkpoint_info"]
