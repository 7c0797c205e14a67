"""Code shipped inside a hostile checkpoint (issue 37 item 1): a ``payload.py`` (or a package)
whose top-level code writes the canary file named by ``$CAIRN_CANARY`` the moment it is
imported, and a reference to it at every place a checkpoint names code.

The directory holding the checkpoint is put on ``sys.path`` by the tests (``python -c``, Jupyter
or a script beside the checkpoint do it in real life), so that the reference *can* be imported:
the resolver must refuse it by its location, before importing it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.checkpoint.attacks import POLICY_DIR, edit_json, rehash
from tests.checkpoint.attacks import set_at as _set

PSTATE = f"{POLICY_DIR}/policy_state.json"
ASTATE = "algorithm_state.json"

#: Importing it writes the canary; so does using anything in it.
PAYLOAD_SOURCE = '''\
import os
from pathlib import Path
Path(os.environ["CAIRN_CANARY"]).write_text(f"PWNED {__file__}: ran as pid {os.getpid()}")


class Evil:
    pass


def evil(*args, **kwargs):
    return None
'''


def write_payload(directory: Path, module: str = "payload", *, package: bool = False) -> None:
    """``directory/<module>.py``, or with ``package`` ``directory/<module>/__init__.py``."""
    if package:
        (directory / module).mkdir()
        (directory / module / "__init__.py").write_text(PAYLOAD_SOURCE)
    else:
        (directory / f"{module}.py").write_text(PAYLOAD_SOURCE)


def _manifest(root: Path, rel: str, reference: str) -> None:
    edit_json(root, rel, _set(["class"], reference), hashed=False)
    if rel != "cairn_checkpoint.json":
        rehash(root, rel)


def algorithm_class(root: Path, module: str) -> None:
    edit_json(root, ASTATE, _set(["algorithm_class"], f"{module}:Evil"))
    _manifest(root, "cairn_checkpoint.json", f"{module}:Evil")


def policy_class(root: Path, module: str) -> None:
    edit_json(root, PSTATE, _set(["spec", "policy_class"], f"{module}:Evil"))
    _manifest(root, f"{POLICY_DIR}/cairn_checkpoint.json", f"{module}:Evil")


def callbacks_class(root: Path, module: str) -> None:
    edit_json(root, ASTATE, _set(["config", "callbacks_class"], f"{module}:Evil"))


def custom_model_in_policy_spec(root: Path, module: str) -> None:
    edit_json(root, PSTATE, _set(["spec", "config", "model", "custom_model"], f"{module}:Evil"))


def custom_model_in_config(root: Path, module: str) -> None:
    edit_json(root, ASTATE, _set(["config", "model", "custom_model"], f"{module}:Evil"))
    custom_model_in_policy_spec(root, module)


def keras_model_in_policy_spec(root: Path, module: str) -> None:
    model = {"framework": "keras", "keras_model": f"{module}:evil"}
    edit_json(root, PSTATE, _set(["spec", "config", "model"], model))


def env_creator(root: Path, module: str) -> None:
    edit_json(root, ASTATE, _set(["config", "env"], {"__callable__": f"{module}:evil", "name": "evil"}))


def mapping_fn(root: Path, module: str) -> None:
    edit_json(root, ASTATE, _set(["config", "policy_mapping_fn"],
                                 {"__callable__": f"{module}:evil", "name": "evil"}))


#: (place, how to name the payload there, the loaders that resolve that place)
PLACES: list[tuple[str, Callable[[Path, str], None], tuple[str, ...]]] = [
    ("algorithm_class", algorithm_class, ("algo",)),
    ("policy_class", policy_class, ("algo", "policy")),
    ("callbacks_class", callbacks_class, ("algo",)),
    ("custom_model_in_policy_spec", custom_model_in_policy_spec, ("algo", "policy")),
    ("custom_model_in_config", custom_model_in_config, ("algo",)),
    ("keras_model_in_policy_spec", keras_model_in_policy_spec, ("algo", "policy")),
    ("env_creator", env_creator, ("algo",)),
    ("policy_mapping_fn", mapping_fn, ("algo",)),
]
