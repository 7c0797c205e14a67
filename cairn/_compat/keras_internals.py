"""Keras' internals that cairn relies on.

Touches Keras' process-wide (per-thread) global ``SeedGenerator``: the one ``keras.random.*``
draws from when called with no ``seed`` (``keras.random.normal(shape)`` in a user's layer). It
is held in ``keras.src.backend.common.global_state`` under the name
``keras.src.random.seed_generator.GLOBAL_SEED_GENERATOR``; Keras makes it on first use, seeded
from Python's ``random``, and never saves it.

Why: a learn call of a Keras policy must draw the same noise in a rerun with the same seed and
in a restored run as in the uninterrupted one, whatever the process drew before.
:func:`seeded_global_seed_generator` installs a generator seeded by cairn for the block and
hands the caller's back after it. It is one generator a thread, made once and reseeded on
every entry (its state set to ``[seed, 0]``, all a ``SeedGenerator`` holds), as a new one
would start: making one (a Keras variable) cost more than the rest of the block. Keras' only
public way to reseed it, ``keras.utils.set_random_seed``, also reseeds Python's ``random``,
numpy's and torch's global generators (the user's), and cannot hand the old generator back.

Supported: ``keras>=3.8,<4`` (pyproject.toml). The global state and the attribute's name have
been the same from Keras 3.0 through 3.15.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from threading import local
from typing import Any

__all__ = ["global_seed_generator", "seeded_global_seed_generator"]

#: The name of the generator cairn installs (a name given, Keras counts no auto-name up for it).
_NAME = "cairn_learning_seed_generator"
#: This thread's generator (``.generator``), made on its first block.
_CAIRNS = local()


def global_seed_generator() -> Any:
    """Keras' global ``SeedGenerator`` of this thread as it stands (None before Keras made one);
    Keras must be imported."""
    from keras.src.backend.common import global_state
    from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR

    return global_state.get_global_attribute(GLOBAL_SEED_GENERATOR)


@contextmanager
def seeded_global_seed_generator(seed: int) -> Iterator[None]:
    """Keras' global ``SeedGenerator`` is one seeded with ``seed`` (``0 <= seed < 2**31``) for
    the block, and the caller's (or none, as before) after it, also when the block raises; the
    caller's generator does not move. Keras must be imported (on the torch backend). A block
    inside another one gets a new generator (reseeding the thread's would move the outer
    block's)."""
    import keras
    import torch
    from keras.src.backend.common import global_state
    from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR

    previous = global_state.get_global_attribute(GLOBAL_SEED_GENERATOR)
    generator = getattr(_CAIRNS, "generator", None)
    if generator is None or generator is previous:  # the thread's first block, or one inside a block
        generator = keras.random.SeedGenerator(seed, name=_NAME)
        if not hasattr(_CAIRNS, "generator"):
            _CAIRNS.generator = generator
    else:
        generator.state.assign(torch.tensor([seed, 0], dtype=torch.int32))  # a list: twice the time
    global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, generator)
    try:
        yield
    finally:
        global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, previous)
