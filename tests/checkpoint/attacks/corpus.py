"""The attack corpus: each case turns a copy of a real checkpoint into a hostile or broken one.

A case names the base checkpoint it starts from, the loaders that must refuse it, and the
``CheckpointError`` subclass they must raise (None: it must load, and run no code). Most cases
re-hash what they change, so that the deeper validation, not the hash check, is what is tested;
cases named ``*_unhashed`` test the hash/size check itself.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.checkpoint.format import FORMAT_VERSION
from cairn.errors import (
    CheckpointConfigError,
    CheckpointCorruptedError,
    CheckpointError,
    CheckpointFormatError,
    CheckpointNotFoundError,
    UnsafeCheckpointError,
    UnsupportedCheckpointVersionError,
)
from tests.checkpoint.attacks import (
    MANIFEST,
    POLICY_DIR,
    edit_json,
    rehash,
    safetensors_bytes,
    safetensors_parts,
    write_bytes,
    write_json,
)
from tests.checkpoint.attacks import set_at as _set
from tests.checkpoint.attacks.payload import pickle_payload, torch_payload

ALL = ("info", "algo", "policy")
STATE = ("algo", "policy")
PSTATE = f"{POLICY_DIR}/policy_state.json"
PARRAYS = f"{POLICY_DIR}/policy_state.safetensors"
ASTATE = "algorithm_state.json"
PAYLOAD_MODULE = "tests.checkpoint.attacks.payload"


@dataclass(frozen=True)
class Attack:
    name: str
    mutate: Callable[[Path, Path], None]  # (checkpoint root, a scratch dir outside it)
    error: type[CheckpointError] | None
    loaders: tuple[str, ...] = STATE
    base: str = "algo"
    #: Texts the error message must hold besides the checkpoint's path (the key at fault); a
    #: case that names some must be refused with a message naming the checkpoint too.
    names: tuple[str, ...] = ()


ATTACKS: list[Attack] = []


def attack(name: str, error: type[CheckpointError] | None, loaders: tuple[str, ...] = STATE,
           base: str = "algo", names: tuple[str, ...] = (),
           ) -> Callable[[Callable[[Path, Path], None]], Callable[[Path, Path], None]]:
    def register(fn: Callable[[Path, Path], None]) -> Callable[[Path, Path], None]:
        ATTACKS.append(Attack(name, fn, error, loaders, base, names))
        return fn
    return register


def _manifest(root: Path, fn: Callable[[Any], Any]) -> None:
    edit_json(root, MANIFEST, fn, hashed=False)


def _policy_manifest(root: Path, fn: Callable[[Any], Any]) -> None:
    edit_json(root, f"{POLICY_DIR}/{MANIFEST}", fn, hashed=False)
    rehash(root, f"{POLICY_DIR}/{MANIFEST}")


def _policy_spec(path: list[Any], value: Any) -> Callable[[Path, Path], None]:
    return lambda root, _: edit_json(root, PSTATE, _set(["spec", *path], value))


def _config(key: str, value: Any) -> Callable[[Path, Path], None]:
    return lambda root, _: edit_json(root, ASTATE, _set(["config", key], value))


def _safetensors(root: Path, fn: Callable[[dict[str, Any], bytes], bytes]) -> None:
    header, body = safetensors_parts((root / PARRAYS).read_bytes())
    write_bytes(root, PARRAYS, fn(header, body))


def _first_tensor(header: dict[str, Any]) -> str:
    return sorted((k for k in header if k != "__metadata__"),
                  key=lambda k: header[k]["data_offsets"][0])[0]


# ------------------------------------------------------------------------- pickle payloads
attack("pickle_as_safetensors", CheckpointCorruptedError)(
    lambda root, _: write_bytes(root, PARRAYS, pickle_payload()))
attack("pickle_as_state_json", CheckpointCorruptedError)(
    lambda root, _: write_bytes(root, PSTATE, pickle_payload()))
attack("pickle_as_algorithm_state", CheckpointCorruptedError, ("algo",))(
    lambda root, _: write_bytes(root, ASTATE, pickle_payload()))
attack("pickle_as_manifest", CheckpointCorruptedError, ALL)(
    lambda root, _: write_bytes(root, MANIFEST, pickle_payload(), hashed=False))
attack("torch_save_as_safetensors", CheckpointCorruptedError)(
    lambda root, _: write_bytes(root, PARRAYS, torch_payload()))
attack("pickle_as_policy_manifest", CheckpointCorruptedError)(
    lambda root, _: write_bytes(root, f"{POLICY_DIR}/{MANIFEST}", pickle_payload()))


@attack("pickle_files_listed_and_unlisted", None, ALL)
def _(root: Path, _s: Path) -> None:
    # Listed files that no state refers to, and unlisted ones, are never read.
    for rel in ("model.pkl", f"{POLICY_DIR}/model.pt", "algorithm_state.pkl"):
        (root / rel).write_bytes(pickle_payload())
    rehash(root, f"{POLICY_DIR}/model.pt")
    rehash(root, "model.pkl")


# ------------------------------------------------------------ class and callable references
def _algorithm_class(root: Path, reference: str) -> None:
    """Name ``reference`` as the algorithm's class where a writer would: state and manifest."""
    edit_json(root, ASTATE, _set(["algorithm_class"], reference))
    _manifest(root, _set(["class"], reference))


def _policy_class(root: Path, reference: str) -> None:
    edit_json(root, PSTATE, _set(["spec", "policy_class"], reference))
    _policy_manifest(root, _set(["class"], reference))


for _name, _ref in [("stdlib_os_system", "os:system"), ("builtins_eval", "builtins:eval"),
                    ("subprocess_popen", "subprocess:Popen"), ("numpy_not_algorithm", "numpy:ndarray"),
                    ("function_not_class", f"{PAYLOAD_MODULE}:write_canary"),
                    ("foreign_class", f"{PAYLOAD_MODULE}:EvilNotPolicy"),
                    ("cairn_wrong_base", "cairn.policy.policy:Policy"),
                    ("malformed_reference", "os.system()")]:
    attack(f"algorithm_class_{_name}", UnsafeCheckpointError, ("algo",))(
        lambda root, _, ref=_ref: _algorithm_class(root, ref))
# Nothing unsafe happens when the named module or class does not exist: a CheckpointConfigError.
for _name, _ref in [("missing_module", "no_such_package_cairn:Thing"),
                    ("missing_class", "cairn.algorithms:NoSuchAlgorithm")]:
    attack(f"algorithm_class_{_name}", CheckpointConfigError, ("algo",))(
        lambda root, _, ref=_ref: _algorithm_class(root, ref))

for _name, _ref in [("foreign_class", f"{PAYLOAD_MODULE}:EvilNotPolicy"),
                    ("function", f"{PAYLOAD_MODULE}:write_canary"),
                    ("stdlib", "pickle:loads"), ("cairn_wrong_base", "PPO")]:
    attack(f"policy_class_{_name}", UnsafeCheckpointError)(lambda root, _, ref=_ref: _policy_class(root, ref))

attack("config_algo_class_stdlib", UnsafeCheckpointError, ("algo",))(_config("algo_class", "os:system"))
attack("callable_env_stdlib", UnsafeCheckpointError, ("algo",))(
    _config("env", {"__callable__": "builtins:exec", "name": "exec"}))
attack("callable_mapping_fn_stdlib", UnsafeCheckpointError, ("algo",))(
    _config("policy_mapping_fn", {"__callable__": "os:system", "name": "system"}))
attack("callable_env_is_class", UnsafeCheckpointError, ("algo",))(
    _config("env", {"__callable__": f"{PAYLOAD_MODULE}:EvilNotPolicy", "name": "x"}))
attack("gym_env_id_imports_module", UnsafeCheckpointError, ("algo",))(
    _config("env", f"{PAYLOAD_MODULE}:Evil-v0"))
attack("config_key_holds_foreign_callable", CheckpointFormatError, ("algo",))(
    _config("lr", {"__callable__": f"{PAYLOAD_MODULE}:write_canary", "name": "x"}))

# A Keras model builder is called as builder(obs_size, num_outputs, model_config): the security
# probe's references (issue 25) would print, replace a file descriptor, open a console or a
# browser, or import a module with side effects; a class is no builder either.
for _name, _ref in [("print", "builtins:print"), ("os_dup2", "os:dup2"), ("code_interact", "code:interact"),
                    ("webbrowser_open", "webbrowser:open"), ("antigravity", "antigravity:x"),
                    ("this", "this:x"), ("foreign_class", f"{PAYLOAD_MODULE}:EvilNotPolicy")]:
    _keras = {"framework": "keras", "keras_model": _ref}
    attack(f"keras_model_{_name}_in_policy_spec", UnsafeCheckpointError)(
        _policy_spec(["config", "model"], _keras))
    attack(f"keras_model_{_name}_in_config_model", UnsafeCheckpointError, ("algo",))(
        lambda root, _, keras=_keras: (_config("model", keras)(root, _),
                                       _policy_spec(["config", "model"], keras)(root, _)))

# A user's model class (cairn.models) and the callbacks class: a stdlib reference, a function
# or a foreign class is refused. (The base checkpoints are PPO's, which resolve custom_model
# only: SAC's critic key, custom_q_model, is refused there by its form, stdlib, before import.)
for _name, _ref in [("print", "builtins:print"), ("os_system", "os:system"), ("this", "this:x"),
                    ("function", f"{PAYLOAD_MODULE}:write_canary"),
                    ("foreign_class", f"{PAYLOAD_MODULE}:EvilNotPolicy")]:
    stdlib = ":" in _ref and not _ref.startswith(PAYLOAD_MODULE)
    for _key in ("custom_model", "custom_q_model") if stdlib else ("custom_model",):
        attack(f"{_key}_{_name}_in_policy_spec", UnsafeCheckpointError)(
            _policy_spec(["config", "model", _key], _ref))
        attack(f"{_key}_{_name}_in_config_model", UnsafeCheckpointError, ("algo",))(
            lambda root, _, key=_key, ref=_ref: (
                edit_json(root, ASTATE, _set(["config", "model", key], ref)),
                _policy_spec(["config", "model", key], ref)(root, _)))
    attack(f"callbacks_class_{_name}", UnsafeCheckpointError, ("algo",))(_config("callbacks_class", _ref))

# --------------------------------------------------------- the manifest's class and counters
attack("manifest_class_stdlib", UnsafeCheckpointError, ALL)(
    lambda root, _: _manifest(root, _set(["class"], "os:system")))
attack("manifest_class_malformed", UnsafeCheckpointError, ALL)(
    lambda root, _: _manifest(root, _set(["class"], "os.system()")))
attack("manifest_class_differs_from_state", CheckpointFormatError, ("algo",))(
    lambda root, _: _manifest(root, _set(["class"], "DQN")))
attack("policy_manifest_class_differs_from_state", CheckpointFormatError)(
    lambda root, _: _policy_manifest(root, _set(["class"], "DQNPolicy")))
for _name, _path, _value in [("iteration_huge", ["iteration"], 10**300),
                             ("iteration_negative", ["iteration"], -7),
                             ("iteration_float", ["iteration"], 1.5),
                             ("env_steps_negative", ["counters", "num_env_steps_sampled_lifetime"], -1)]:
    attack(f"algorithm_{_name}", CheckpointFormatError, ("algo",))(
        lambda root, _, p=_path, v=_value: edit_json(root, ASTATE, _set(p, v)))
for _name, _value in [("negative", -10**18), ("huge", 1 << 63), ("bool", True)]:
    attack(f"global_timestep_{_name}", CheckpointFormatError)(
        lambda root, _, v=_value: edit_json(root, PSTATE, _set(["counters", "global_timestep"], v)))

# ------------------------------------------------------------------- paths out of the folder
for _name, _path in [("dotdot", "../outside.json"), ("absolute", "/etc/passwd"),
                     ("drive_letter", "C:/Windows/win.ini"), ("nul_byte", "algorithm_state.json\x00.x"),
                     ("backslash", "policies\\..\\..\\x"), ("dot_component", "./algorithm_state.json"),
                     ("empty", ""), ("inner_dotdot", "policies/../../x.json"),
                     ("trailing_slash", "policies/")]:
    attack(f"manifest_path_{_name}", UnsafeCheckpointError, ALL)(
        lambda root, _, p=_path: _manifest(
            root, lambda m: m["files"].__setitem__(p, {"size": 1, "hash": "0"})))


@attack("state_file_escapes", UnsafeCheckpointError, ALL)
def _(root: Path, scratch: Path) -> None:
    def fn(m: Any) -> None:
        m["state_file"] = "../outside/algorithm_state.json"
        m["files"]["../outside/algorithm_state.json"] = m["files"]["algorithm_state.json"]
    _manifest(root, fn)


attack("policy_manifest_path_escapes", UnsafeCheckpointError)(
    lambda root, _: _policy_manifest(
        root, lambda m: m["files"].__setitem__("../../../../x", {"size": 0, "hash": ""})))


# -------------------------------------------------------------- links and special files
def _replace_with_link(root: Path, rel: str, scratch: Path) -> None:
    target = scratch / "outside" / Path(rel).name
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(root / rel, target)  # same bytes and hash: only the link is wrong
    os.symlink(target, root / rel)


attack("symlink_state_file", UnsafeCheckpointError)(lambda root, s: _replace_with_link(root, PSTATE, s))
attack("symlink_arrays_file", UnsafeCheckpointError)(lambda root, s: _replace_with_link(root, PARRAYS, s))
attack("symlink_policy_dir", UnsafeCheckpointError)(lambda root, s: _replace_with_link(root, POLICY_DIR, s))
attack("symlink_policies_dir", UnsafeCheckpointError)(lambda root, s: _replace_with_link(root, "policies", s))
attack("symlink_manifest", UnsafeCheckpointError, ALL)(lambda root, s: _replace_with_link(root, MANIFEST, s))


@attack("symlink_to_etc_passwd", UnsafeCheckpointError)
def _(root: Path, _s: Path) -> None:
    (root / PSTATE).unlink()
    os.symlink("/etc/passwd", root / PSTATE)


@attack("fifo_as_state_file", CheckpointCorruptedError)
def _(root: Path, _s: Path) -> None:
    (root / PSTATE).unlink()
    os.mkfifo(root / PSTATE)  # opening it for reading would block forever


@attack("directory_as_state_file", CheckpointCorruptedError)
def _(root: Path, _s: Path) -> None:
    (root / PSTATE).unlink()
    (root / PSTATE).mkdir()


# ------------------------------------------------------------------------------ policy IDs
for _name, _ids, _error in [
        ("dotdot", ["../evil"], UnsafeCheckpointError), ("slash", ["a/b"], UnsafeCheckpointError),
        ("reserved_device", ["CON"], UnsafeCheckpointError),
        ("reserved_ext", ["lpt1.txt"], UnsafeCheckpointError),
        ("leading_dot", [".hidden"], UnsafeCheckpointError), ("nul", ["a\x00b"], UnsafeCheckpointError),
        ("empty", [""], UnsafeCheckpointError), ("too_long", ["p" * 65], UnsafeCheckpointError),
        ("not_str", [5], UnsafeCheckpointError), ("not_list", "default_policy", CheckpointFormatError),
        ("duplicate", ["default_policy", "default_policy"], CheckpointFormatError),
        ("case_collision", ["default_policy", "Default_Policy"], CheckpointFormatError),
        ("ghost", ["default_policy", "ghost"], CheckpointFormatError)]:
    attack(f"policy_id_{_name}", _error, ALL)(
        lambda root, _, ids=_ids: _manifest(root, _set(["policy_ids"], ids)))

attack("component_name_escapes", UnsafeCheckpointError, ALL)(
    lambda root, _: _manifest(root, _set(["components"], ["../../x"])))
attack("state_policy_ids_disagree", CheckpointFormatError, ("algo",))(
    lambda root, _: edit_json(root, ASTATE, _set(["policy_ids"], ["other"])))

# ---------------------------------------------------------------------------- safetensors
attack("safetensors_truncated_unhashed", CheckpointCorruptedError)(
    lambda root, _: (root / PARRAYS).write_bytes((root / PARRAYS).read_bytes()[:-7]))
attack("safetensors_bitflip_unhashed", CheckpointCorruptedError)(
    lambda root, _: (root / PARRAYS).write_bytes(_flip((root / PARRAYS).read_bytes(), -3)))
attack("safetensors_truncated", CheckpointCorruptedError)(
    lambda root, _: write_bytes(root, PARRAYS, (root / PARRAYS).read_bytes()[:-7]))
attack("safetensors_shorter_than_8", CheckpointCorruptedError)(
    lambda root, _: write_bytes(root, PARRAYS, b"\x01\x00"))
attack("safetensors_header_bitflip", CheckpointCorruptedError)(
    lambda root, _: write_bytes(root, PARRAYS, _flip((root / PARRAYS).read_bytes(), 8)))
attack("safetensors_header_len_huge", CheckpointCorruptedError)(
    lambda root, _: write_bytes(root, PARRAYS,
                                struct.pack("<Q", 1 << 62) + (root / PARRAYS).read_bytes()[8:]))
attack("safetensors_header_len_past_end", CheckpointCorruptedError)(
    lambda root, _: write_bytes(root, PARRAYS, struct.pack("<Q", 99_000_000) + b"{}"))
attack("safetensors_header_not_object", CheckpointCorruptedError)(
    lambda root, _: write_bytes(root, PARRAYS, safetensors_bytes([], b"")))  # type: ignore[arg-type]


def _flip(data: bytes, index: int) -> bytes:
    out = bytearray(data)
    out[index] ^= 0xFF
    return bytes(out)


def _huge_shape(header: dict[str, Any], body: bytes) -> bytes:
    name = _first_tensor(header)
    header[name]["shape"] = [1 << 40, 1 << 20]
    header[name]["data_offsets"] = [0, 1 << 62]
    return safetensors_bytes(header, body)


def _overlap(header: dict[str, Any], body: bytes) -> bytes:
    names = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    a, b = header[names[0]], header[names[1]]
    size = b["data_offsets"][1] - b["data_offsets"][0]
    b["data_offsets"] = [a["data_offsets"][0], a["data_offsets"][0] + size]
    return safetensors_bytes(header, body)


def _gap(header: dict[str, Any], body: bytes) -> bytes:
    return safetensors_bytes(header, body + b"\0" * 8)


def _dtype(value: Any) -> Callable[[dict[str, Any], bytes], bytes]:
    def fn(header: dict[str, Any], body: bytes) -> bytes:
        header[_first_tensor(header)]["dtype"] = value
        return safetensors_bytes(header, body)
    return fn


def _shape_mismatch(header: dict[str, Any], body: bytes) -> bytes:
    header[_first_tensor(header)]["shape"].append(3)
    return safetensors_bytes(header, body)


def _negative_offset(header: dict[str, Any], body: bytes) -> bytes:
    header[_first_tensor(header)]["data_offsets"][0] = -8
    return safetensors_bytes(header, body)


for _name, _fn in [("huge_shape", _huge_shape), ("overlapping_offsets", _overlap),
                   ("trailing_bytes", _gap), ("object_dtype", _dtype("O")), ("dtype_not_str", _dtype([1])),
                   ("shape_mismatch", _shape_mismatch), ("negative_offset", _negative_offset)]:
    attack(f"safetensors_{_name}", CheckpointCorruptedError)(lambda root, _, fn=_fn: _safetensors(root, fn))


@attack("manifest_size_huge", CheckpointCorruptedError)
def _(root: Path, _s: Path) -> None:
    # A size the reader must compare with the file before allocating anything.
    _policy_manifest(root, _set(["files", "policy_state.safetensors", "size"], 1 << 62))


@attack("array_reference_missing", CheckpointFormatError)
def _(root: Path, _s: Path) -> None:
    edit_json(root, PSTATE, _set(["weights", "value_head.bias"], {"__array__": "no_such_array"}))


# -------------------------------------------------------------------------------- JSON
def _iteration(root: Path, replacement: bytes) -> bytes:
    """The algorithm state's JSON with its ``"iteration": 1`` (compact or indented) replaced."""
    data = (root / ASTATE).read_bytes()
    new = re.sub(rb'"iteration": ?1(?=[,}\n])', lambda _: replacement, data, count=1)
    assert new != data, "the attack did not apply"
    return new


attack("json_float_overflow", CheckpointCorruptedError, ("algo",))(
    lambda root, _: write_bytes(root, ASTATE, _iteration(root, b'"iteration": 1e999')))
attack("json_int_5000_digits", CheckpointCorruptedError, ("algo",))(
    lambda root, _: write_bytes(root, ASTATE, _iteration(root, b'"iteration": ' + b"9" * 5000)))
attack("json_nan_token", CheckpointCorruptedError, ("algo",))(
    lambda root, _: write_bytes(root, ASTATE, _iteration(root, b'"iteration": NaN')))
attack("json_deep_nesting", CheckpointCorruptedError, ("algo",))(
    lambda root, _: write_bytes(root, ASTATE, b"[" * 200_000 + b"]" * 200_000))
attack("json_tree_too_deep", CheckpointFormatError, ("algo",))(
    lambda root, _: edit_json(root, ASTATE, _set(["extra"], _nested(80))))
attack("json_invalid_utf8", CheckpointCorruptedError, ALL)(
    lambda root, _: write_bytes(root, MANIFEST, b'{"format": "\xff\xfe"}', hashed=False))
attack("manifest_over_16mib", CheckpointCorruptedError, ALL)(
    lambda root, _: write_bytes(root, MANIFEST, (root / MANIFEST).read_bytes() + b" " * (16 << 20),
                                hashed=False))
attack("manifest_not_object", CheckpointFormatError, ALL)(
    lambda root, _: write_json(root / MANIFEST, ["cairn-checkpoint"]))
attack("manifest_wrong_format_name", CheckpointFormatError, ALL)(
    lambda root, _: _manifest(root, _set(["format"], "pytorch-lightning")))
attack("manifest_files_is_list", CheckpointFormatError, ALL)(
    lambda root, _: _manifest(root, _set(["files"], [])))
attack("manifest_size_is_float", CheckpointFormatError, ALL)(
    lambda root, _: _manifest(root, _set(["files", "algorithm_state.json", "size"], 10.0)))
attack("manifest_version_is_int", CheckpointFormatError, ALL)(
    lambda root, _: _manifest(root, _set(["format_version"], 1)))
attack("manifest_type_unknown", CheckpointFormatError, ALL)(
    lambda root, _: _manifest(root, _set(["type"], "Model")))
attack("manifest_hash_algorithm", CheckpointFormatError, ALL)(
    lambda root, _: _manifest(root, _set(["hash_algorithm"], "md5")))
attack("manifest_missing_state_file", CheckpointFormatError, ALL)(
    lambda root, _: _manifest(root, lambda m: m.pop("state_file")))
attack("algorithm_counters_wrong_type", CheckpointFormatError, ("algo",))(
    lambda root, _: edit_json(root, ASTATE, _set(["counters"], "lots")))
attack("algorithm_iteration_wrong_type", CheckpointFormatError, ("algo",))(
    lambda root, _: edit_json(root, ASTATE, _set(["iteration"], "1")))
attack("algorithm_rng_garbage", CheckpointFormatError, ("algo",))(
    lambda root, _: edit_json(root, ASTATE, _set(["rng", "state"], {"state": "x", "inc": []})))
attack("algorithm_config_unknown_key", CheckpointFormatError, ("algo",))(_config("no_such_option", 1))
attack("algorithm_config_bad_value", CheckpointFormatError, ("algo",))(_config("gamma", "high"))
attack("algorithm_env_unknown", CheckpointFormatError, ("algo",))(_config("env", "NoSuchEnv-v99"))
attack("policy_weights_is_list", CheckpointFormatError)(
    lambda root, _: edit_json(root, PSTATE, _set(["weights"], [])))
attack("policy_counters_float_inf", CheckpointFormatError)(
    lambda root, _: edit_json(root, PSTATE, _set(["counters", "global_timestep"], {"__float__": "inf"})))
attack("policy_torch_rng_wrong_size", CheckpointFormatError)(
    lambda root, _: edit_json(root, PSTATE, _set(["rng", "torch"], {"__array__": "value_head.bias"})))
attack("policy_optimizer_bad_index", CheckpointFormatError)(
    lambda root, _: edit_json(root, PSTATE, lambda s: s["optimizer"]["state"].__setitem__("99", {})))
attack("policy_filter_unknown", CheckpointFormatError)(
    lambda root, _: edit_json(root, PSTATE, _set(["observation_filter"], {"name": "EvalFilter"})))


def _nested(depth: int) -> Any:
    node: Any = 0
    for _ in range(depth):
        node = {"a": node}
    return node


# ------------------------------------------------------------- spaces against the weights
def _tuple_nest(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "Discrete", "n": 2, "start": 0}
    for _ in range(depth):
        node = {"type": "Tuple", "spaces": [node]}
    return node


def _box(n: int) -> dict[str, Any]:
    return {"type": "Box", "shape": [n], "dtype": "float32", "low": [-1.0] * n, "high": [1.0] * n}


attack("observation_space_wider", CheckpointFormatError)(_policy_spec(["observation_space"], _box(5)))
attack("observation_space_narrower", CheckpointFormatError)(_policy_spec(["observation_space"], _box(3)))
attack("action_space_more_actions", CheckpointFormatError)(
    _policy_spec(["action_space"], {"type": "Discrete", "n": 3, "start": 0}))
attack("action_space_box", CheckpointFormatError)(_policy_spec(["action_space"], _box(2)))
attack("observation_discrete_2pow26", CheckpointFormatError)(
    _policy_spec(["observation_space"], {"type": "Discrete", "n": 1 << 26, "start": 0}))
attack("observation_multidiscrete_huge", CheckpointFormatError)(
    _policy_spec(["observation_space"], {"type": "MultiDiscrete", "nvec": [1 << 26] * 64, "start": [0] * 64,
                                         "shape": [64], "dtype": "int64"}))
attack("observation_box_over_limit", CheckpointFormatError)(
    _policy_spec(["observation_space"], {"type": "Box", "shape": [1 << 14, 1 << 14], "dtype": "float32",
                                         "low": [], "high": []}))
attack("space_nested_too_deep", CheckpointFormatError)(
    _policy_spec(["observation_space"], _tuple_nest(40)))
attack("space_unknown_type", CheckpointFormatError)(
    _policy_spec(["observation_space"], {"type": "Graph", "node_space": None}))
attack("space_object_dtype", CheckpointFormatError)(
    _policy_spec(["observation_space"], {**_box(4), "dtype": "object"}))
attack("model_hidden_huge", CheckpointFormatError)(
    _policy_spec(["config", "model", "hidden"], [1_000_000_000]))
attack("model_hidden_many_layers", CheckpointFormatError)(
    _policy_spec(["config", "model", "hidden"], [64] * 100_000))
attack("model_hidden_not_ints", CheckpointFormatError)(_policy_spec(["config", "model", "hidden"], ["64"]))
attack("model_activation_unknown", CheckpointFormatError)(
    _policy_spec(["config", "model", "activation"], "os.system"))
attack("filter_stats_wrong_size", CheckpointFormatError)(
    _policy_spec(["config", "observation_filter"], "MeanStdFilter"))
attack("target_weights_wrong_shapes", CheckpointFormatError)(
    lambda root, _: edit_json(root, PSTATE,
                              _set(["target"], {"weights": {"x": {"__array__": "value_head.bias"}}})))

# ------------------------------------------------------------------------------ versions
_NEWER = str(int(FORMAT_VERSION) + 1)  # the first version this cairn does not read
attack("format_version_newer", UnsupportedCheckpointVersionError, ALL)(
    lambda root, _: _manifest(root, _set(["format_version"], _NEWER)))
attack("format_version_far_future", UnsupportedCheckpointVersionError, ALL)(
    lambda root, _: _manifest(root, _set(["format_version"], "999999")))
attack("format_version_not_decimal", CheckpointFormatError, ALL)(
    lambda root, _: _manifest(root, _set(["format_version"], "1.0")))
attack("format_version_older_unknown", UnsupportedCheckpointVersionError, ("algo",))(
    lambda root, _: _manifest(root, _set(["format_version"], "0")))
attack("policy_manifest_version_newer", UnsupportedCheckpointVersionError)(
    lambda root, _: _policy_manifest(root, _set(["format_version"], str(int(_NEWER) + 1))))
attack("policy_checkpoint_version_newer", UnsupportedCheckpointVersionError, ("info", "policy"), "policy")(
    lambda root, _: _manifest(root, _set(["format_version"], _NEWER)))
attack("policy_checkpoint_type_algorithm", CheckpointFormatError, ("policy",), "policy")(
    lambda root, _: _manifest(root, _set(["type"], "Algorithm")))
attack("algorithm_type_says_policy", CheckpointFormatError, ("algo",))(
    lambda root, _: _manifest(root, _set(["type"], "Policy")))

# ----------------------------------------------------------------- missing and extra files
attack("missing_manifest", CheckpointNotFoundError, ALL)(lambda root, _: (root / MANIFEST).unlink())
attack("missing_algorithm_state", CheckpointNotFoundError, ("algo",))(
    lambda root, _: (root / ASTATE).unlink())
attack("missing_policy_arrays", CheckpointNotFoundError)(lambda root, _: (root / PARRAYS).unlink())
attack("missing_policy_dir", CheckpointNotFoundError)(
    lambda root, _: __import__("shutil").rmtree(root / POLICY_DIR))
attack("missing_listed_policy_manifest_entry", CheckpointFormatError, ALL)(
    lambda root, _: _manifest(root, lambda m: m["files"].pop(f"{POLICY_DIR}/{MANIFEST}")))
attack("missing_checkpoint_dir", CheckpointNotFoundError, ALL)(
    lambda root, _: __import__("shutil").rmtree(root))
attack("extra_unlisted_files", None, ALL)(
    lambda root, _: (root / POLICY_DIR / "evil.json").write_text('{"spec": "x"}'))
attack("policy_checkpoint_pickle_model_file", None, ("info", "policy"), "policy")(
    lambda root, _: (root / "model.pt").write_bytes(torch_payload()))


# Restored state checked before use (issue 37, item 7): its own module, which registers here.
from tests.checkpoint.attacks import corpus_state  # noqa: E402,F401
