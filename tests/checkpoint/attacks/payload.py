"""What a malicious checkpoint would like cairn to run. Importing this module is harmless;
calling or instantiating anything here writes the canary file named by ``$CAIRN_CANARY``, so a
test that finds the file proves code ran."""

from __future__ import annotations

import os
import pickle
from pathlib import Path


def canary_path() -> Path:
    return Path(os.environ.get("CAIRN_CANARY", "/nonexistent/cairn-canary"))


def write_canary(*args: object, **kwargs: object) -> None:
    """A module-level function: the kind of callable reference cairn resolves."""
    canary_path().write_text(f"code ran: {args!r} {kwargs!r}")


class EvilNotPolicy:
    """A class that is not a Policy/Algorithm subclass and writes the canary when used."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        write_canary(*args)

    def __init_subclass__(cls, **kwargs: object) -> None:
        write_canary()


class _Reduce:
    def __init__(self, fn: object, args: tuple[object, ...]) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return self.fn, self.args


def pickle_payload() -> bytes:
    """Pickle bytes that, when unpickled, create the canary file (via os.system)."""
    return pickle.dumps(_Reduce(os.system, (f"touch {canary_path()}",)), protocol=2)


def torch_payload() -> bytes:
    """A ``torch.save`` zip file whose pickle creates the canary when loaded with
    ``weights_only=False``."""
    import io

    import torch

    buffer = io.BytesIO()
    torch.save({"weights": _Reduce(os.system, (f"touch {canary_path()}",))}, buffer)
    return buffer.getvalue()
