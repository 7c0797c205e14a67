"""Hooks into training: :class:`Callbacks` (``cairn.Callbacks``) and ready-made loggers
(:class:`MLflowLogger`, :class:`WandbLogger`); docs/callbacks.md."""

from cairn.callbacks.base import Callbacks, callbacks_reference, make_callbacks
from cairn.callbacks.loggers import MLflowLogger, WandbLogger

__all__ = ["Callbacks", "MLflowLogger", "WandbLogger", "callbacks_reference", "make_callbacks"]
