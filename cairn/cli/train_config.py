"""How ``cairn train`` builds its AlgorithmConfig: ``--algo``, ``--env``, ``--seed``, ``--league``,
the ``--config`` files (JSON or YAML, the form of ``AlgorithmConfig.to_dict()``) and the
``--config KEY=VALUE`` settings over them, with the command line's refusals (a file of another
algorithm, nested keys, a league with the user's own mapping) named in flag terms."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from cairn.cli.common import ArgumentsError, UsageError, is_assignment, parse_assignment
from cairn.cli.env_names import resolve_env

__all__ = ["build_config", "config_settings", "algorithm_names"]

#: Numbers with an exponent that YAML 1.2 reads as floats but PyYAML's YAML 1.1 kept as
#: strings (``1e-3``, ``1.0e3``: 1.1 wants a dot and a signed exponent), so that ``lr: 1e-3``
#: was refused as "'lr'='1e-3' is invalid: expected a number".
_YAML_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


def _load_yaml(text: str) -> Any:
    """``text`` read by PyYAML's safe loader, with plain (unquoted) numbers such as ``1e-3``
    read as floats, as YAML 1.2 (and JSON) read them."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML_EXPONENT_FLOAT, list("-+0123456789."))
    return yaml.load(text, Loader=Loader)  # a SafeLoader subclass: no Python objects


def _load_config_file(path: str) -> dict[str, Any]:
    try:
        text = Path(path).expanduser().read_text()
    except OSError as exc:
        nested = re.fullmatch(r"([A-Za-z_]\w*(?:\.\w+)+)=(.*)", path, flags=re.DOTALL)
        if nested:  # model.hidden=[8]: not a KEY=VALUE setting, so taken for a file name
            key, *inner = nested.group(1).split(".")
            value = nested.group(2)
            for name in reversed(inner):
                value = f'{{"{name}": {value}}}'
            raise UsageError(f"--config {path}: nested keys are not supported; give the dict: "
                             f"{key}='{value}'.") from None
        raise UsageError(f"--config {path}: cannot read it ({exc.strerror or exc}).") from None
    try:
        if path.endswith((".yaml", ".yml")):
            data = _load_yaml(text)
        else:
            data = json.loads(text)
    except ImportError:
        raise UsageError(
            f"--config {path}: reading YAML needs PyYAML: pip install 'cairn-rl[cli]'."
        ) from None
    except Exception as exc:  # yaml.YAMLError, json.JSONDecodeError
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        form = "YAML" if path.endswith(("yaml", "yml")) else "JSON"
        raise UsageError(f"--config {path} is not valid {form}: {first}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {path} holds a {type(data).__name__}; expected a mapping of config keys "
                         "(the form of AlgorithmConfig.to_dict()).")
    return data


def config_settings(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """(from the --config files, from the KEY=VALUE settings)."""
    from_files: dict[str, Any] = {}
    assignments: dict[str, Any] = {}
    for item in args.config:
        if is_assignment(item):
            key, value = parse_assignment(item)
            assignments[key] = value
        else:
            from_files.update(_load_config_file(item))
    return from_files, assignments


def algorithm_names() -> list[str]:
    """The names ``--algo`` takes: every algorithm class (a subclass of ``Algorithm``, imported
    by now) registered under a short name (``cairn.register_class``), sorted."""
    from cairn.algorithms.algorithm import Algorithm
    from cairn.errors import ConfigError
    from cairn.registry import class_reference

    names, pending = set(), list(Algorithm.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        try:
            reference = class_reference(cls)
        except ConfigError:  # a class defined inside a function (tests): no name to give
            continue
        if ":" not in reference:  # registered: its short name resolves back to it
            names.add(reference)
    return sorted(names)


def _update_settings(data: dict[str, Any], settings: dict[str, Any], defaults: Any) -> None:
    """Set ``settings`` (a --config file's or the KEY=VALUE ones) over the config dict ``data``:
    a dict-valued training setting (``model``, ``replay_buffer_config``) is merged into the
    current value, as ``training()`` and a resume's ``config_overrides`` merge it (replaced, a
    partial ``replay_buffer_config`` of SAC lost its capacity of 1,000,000 for the buffer's
    50,000); every other setting replaces it."""
    from cairn.config.checks import merge_setting

    merged = defaults.merged_fields()
    for key, value in settings.items():
        if key in merged and isinstance(value, dict) and isinstance(data.get(key), dict):
            value = merge_setting(data[key], value)
        data[key] = value


def _check_files_fit(args: argparse.Namespace, from_files: dict[str, Any], defaults: Any) -> None:
    """Refuse ``--config`` files of another algorithm than ``--algo`` names when they hold keys
    its config does not take (``--algo PPO --config DQN_RUN/config.json``): the config's own
    "Unknown config key 'double_q'" said neither that the file is a DQN config nor the fix."""
    file_algo = from_files.get("algo_class")
    unknown = sorted(set(from_files) - set(defaults.FIELDS) - {"algo_class"})
    if args.algo is None or not isinstance(file_algo, str) or file_algo == defaults.algo_class_name \
            or not unknown:
        return
    files = [item for item in args.config if not is_assignment(item)]
    named = [f for f in files if _load_config_file(f).get("algo_class") == file_algo][-1:] or files
    shown = ", ".join(repr(key) for key in unknown[:3]) + (", ..." if len(unknown) > 3 else "")
    raise UsageError(f"--config {named[0]} is a {file_algo} config (algo_class {file_algo!r}), and --algo "
                     f"{args.algo} takes no {shown}: leave out --algo to train {file_algo} as the file "
                     f"says, or give --algo {args.algo} a file of its own settings.")


def build_config(args: argparse.Namespace) -> Any:
    from cairn.algorithms.algorithm import Algorithm
    from cairn.errors import CairnError
    from cairn.registry import resolve_class

    from_files, assignments = config_settings(args)
    algo_name = args.algo or from_files.get("algo_class")
    if algo_name is None:
        raise ArgumentsError("--algo is required (or a --config file with 'algo_class', or --resume RUN).")
    try:
        algo_cls = resolve_class(algo_name, Algorithm)
    except CairnError:
        from cairn.config.checks import suggest

        names = algorithm_names()
        raise UsageError(f"unknown --algo {algo_name!r}; the registered algorithms are {', '.join(names)}."
                         f"{suggest(algo_name, names)} An algorithm of your own: "
                         "--algo package.module:ClassName, or a "
                         "name that a module registers (cairn.register_class) and --import names.") from None
    defaults = algo_cls.config_class()
    _check_files_fit(args, from_files, defaults)
    data = defaults.to_dict()
    _update_settings(data, from_files, defaults)
    data["algo_class"] = algo_cls.config_class().algo_class_name
    env, env_config = (None, {}) if args.env is None else resolve_env(args.env)
    if env is not None:
        data["env"] = env if isinstance(env, str) else None  # a creator function goes in below
    elif data.get("env") is None:
        raise ArgumentsError("--env is required (or a --config file with 'env').")
    if "store_replay_buffer" in data and "store_replay_buffer" not in {**from_files, **assignments}:
        data["store_replay_buffer"] = True  # a run's checkpoints resume exactly (--resume, Ctrl-C)
    _update_settings(data, assignments, defaults)
    if env_config:  # the PettingZoo module --env named, beside --config env_config=... settings
        data["env_config"] = {**(data.get("env_config") or {}), **env_config}
    if args.seed is not None:
        data["seed"] = args.seed
    config = algo_cls.config_class().from_dict(data, callables={"env": env} if callable(env) else None)
    if config.league_config is not None:
        # league_config from --config (or a resumed run's config.json): those settings, and the
        # one default policy named main as config.league() does.
        config.league(**config.league_config)
    elif getattr(args, "league", False):
        # --league: the defaults (main, snapshots every 10 iterations, PFSP) and a random legal
        # player as fixed opponent, drawn in training and played by evaluations.
        config.league(opponents={"random_legal": "random_legal"})
        _check_league_flag(config, assignments)
    return config


def _check_league_flag(config: Any, assignments: dict[str, Any]) -> None:
    """Refuse ``--league`` with ``--config`` settings that the league cannot train with, in the
    command line's terms (the build's ConfigError names its fix in Python: ``multi_agent(...)``,
    ``config.league(...)``)."""
    where = "--config" if "policy_mapping_fn" in assignments else "a --config file's"
    if config.policy_mapping_fn is not None:
        mapping = json.dumps(config.policy_mapping_fn, default=str)
        raise UsageError(f"--league with {where} policy_mapping_fn={mapping}: the league maps the game's "
                         "agents to main and its opponents itself; leave out --league or the --config "
                         "policy_mapping_fn setting.")
    main = config.league_config["main"]
    if main not in config.policies:
        raise UsageError(f"--league trains the policy {main!r}, which --config policies="
                         f"{json.dumps(sorted(config.policies))} leaves out; leave out the policies setting "
                         f"or --league, or name {main!r} among the policies.")
