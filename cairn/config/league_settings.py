"""The settings of a league (``config.league(...)``, docs/league.md): checked, with their
defaults, as the JSON dict the config stores under ``"league"``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.errors import ConfigError
from cairn.policy_ids import validate_policy_id

__all__ = ["LEAGUE_DEFAULTS", "MATCHMAKING_KINDS", "DrawnMapping", "check_league", "league_settings",
           "stored_as_named"]

#: How the opponent of each game is drawn (cairn.league.matchmaking).
MATCHMAKING_KINDS = ("pfsp", "uniform", "latest")

#: Every league setting with its default; ``config.league()`` fills in the ones not given.
LEAGUE_DEFAULTS: dict[str, Any] = {
    "main": "main",
    "snapshot_every_iterations": None,
    "snapshot_win_rate": None,
    "max_snapshots": None,
    "matchmaking": "pfsp",
    "self_play_fraction": 0.2,
    "opponents": {},
    "evaluation_games": 20,
    "win_rate_window": 100,
}

class DrawnMapping:
    """Base of the policy mapping a league installs (``cairn.league.LeagueMapping``): the config
    allows it beside ``league_config`` (a user's mapping there is a ConfigError) and stores
    None for it (the league is rebuilt from ``league_config``). Defined here so that the config
    layer needs no import of the league."""

    def __call__(self, agent_id: Any, **kwargs: Any) -> str:
        raise NotImplementedError

    def continue_from(self, worker_index: int, num_env_steps_sampled: int) -> None:
        """Called by a remote env runner before each sample with where it stands (its worker
        index and the env steps it sampled so far), so that a copy there draws that sample's
        games from a stream of that position: a runner recreated after a fault, brought to
        its last position, then draws on instead of repeating its predecessor's draws."""


#: Used when neither snapshot rule is given (the CLI's ``--league`` default too).
DEFAULT_SNAPSHOT_EVERY = 10


_OPPONENTS_EXPECTED = '{name: "random_legal" | "module:function"} (a dict of strings)'


def _fail(key: str, value: Any, expected: str) -> None:
    raise ConfigError(f"Config league {key}={value!r} is invalid: expected {expected}.")


def _positive_int_or_none(key: str, value: Any) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        _fail(key, value, "an int >= 1 or None")


def _fraction(key: str, value: Any, *, low_open: bool) -> None:
    if (not isinstance(value, (int, float)) or isinstance(value, bool)
            or not (0.0 < value <= 1.0 if low_open else 0.0 <= value <= 1.0)):
        _fail(key, value, "a number in (0, 1]" if low_open else "a number in [0, 1]")


def league_settings(**given: Any) -> dict[str, Any]:
    """The full settings dict: ``given`` over :data:`LEAGUE_DEFAULTS`, checked
    (:func:`check_league`); with neither snapshot rule, snapshots every 10 iterations."""
    unknown = sorted(set(given) - set(LEAGUE_DEFAULTS))
    if unknown:
        raise ConfigError(f"Unknown league setting {unknown[0]!r}; allowed: {sorted(LEAGUE_DEFAULTS)}.")
    settings = {**LEAGUE_DEFAULTS, **given}
    if settings["snapshot_every_iterations"] is None and settings["snapshot_win_rate"] is None:
        settings["snapshot_every_iterations"] = DEFAULT_SNAPSHOT_EVERY
    opponents = settings["opponents"]
    if opponents is not None and not isinstance(opponents, Mapping):
        _fail("opponents", opponents, _OPPONENTS_EXPECTED)  # dict() would take a list of pairs
    settings["opponents"] = dict(opponents or {})
    fraction = settings["self_play_fraction"]
    if isinstance(fraction, int) and not isinstance(fraction, bool):
        settings["self_play_fraction"] = float(fraction)
    check_league("league", settings)
    return settings


def stored_as_named(settings: Mapping[str, Any]) -> dict[str, Any]:
    """What a later ``config.league(...)`` call keeps of ``settings``, a complete dict that no
    call on this config made (read by ``from_dict``, from a checkpoint, or set as a whole):
    every setting as if named, except the default snapshot rule. ``snapshot_every_iterations``
    equal to :data:`DEFAULT_SNAPSHOT_EVERY` with no ``snapshot_win_rate`` is what
    :func:`league_settings` fills in when no call names a rule, so it counts as not named: a
    later ``league(snapshot_win_rate=p)`` replaces it, as on the config the dict came from.
    (The dict cannot tell it from a named 10; name both rules in that call to keep both.)"""
    named = dict(settings)
    if named["snapshot_every_iterations"] == DEFAULT_SNAPSHOT_EVERY and named["snapshot_win_rate"] is None:
        del named["snapshot_every_iterations"]
    return named


def _incomplete(value: Any) -> str:
    """The end of :func:`check_league`'s message for a dict without every key (or with others):
    which keys, that only ``config.league(...)`` fills in defaults, and the whole dict to give
    (its keys over the defaults) when that dict is valid."""
    if not isinstance(value, Mapping):
        return "."
    missing = sorted(set(LEAGUE_DEFAULTS) - set(value))
    unknown = sorted(map(str, set(value) - set(LEAGUE_DEFAULTS)))
    said = "; ".join(part for part in (f"missing {missing}" if missing else "",
                                       f"unknown {unknown}" if unknown else "") if part)
    try:
        whole, wrong = league_settings(**{str(k): v for k, v in value.items()}), ""
    except ConfigError as exc:  # a wrong value is named too: the whole dict would be refused for it next
        whole, wrong = None, "" if unknown else f" ({str(exc).rstrip('.')})"
    fix = (f" Fix: give the whole dict: with the defaults for the settings left out, {whole!r}"
           if whole is not None else f" Fix: give every key of {sorted(LEAGUE_DEFAULTS)} and no other{wrong}")
    fix += ("; overriding a checkpoint's, start from its own (the league_config of the config in "
            "its algorithm_state.json)")
    return (f" ({said}). A dict given as a whole (--config league_config=..., config_overrides, "
            "from_dict) is taken as it is: only config.league(...) fills in the defaults of the "
            f"settings left out.{fix}.")


def check_league(key: str, value: Any) -> None:
    """The Field check of ``"league"``: None (no league) or a complete settings dict."""
    if value is None:
        return
    if not isinstance(value, Mapping) or set(value) != set(LEAGUE_DEFAULTS):
        raise ConfigError(f"Config {key!r}={value!r:.200} is invalid: expected None or the dict "
                          f"config.league(...) makes, with the keys {sorted(LEAGUE_DEFAULTS)}"
                          f"{_incomplete(value)}")
    main = value["main"]
    if not isinstance(main, str) or not validate_policy_id(main):
        _fail("main", main, "a policy ID (letters, digits, '_', '-', '.')")
    _positive_int_or_none("snapshot_every_iterations", value["snapshot_every_iterations"])
    if value["snapshot_win_rate"] is not None:
        _fraction("snapshot_win_rate", value["snapshot_win_rate"], low_open=True)
    if value["snapshot_every_iterations"] is None and value["snapshot_win_rate"] is None:
        raise ConfigError("Config league has no snapshot rule: give snapshot_every_iterations=K "
                          "and/or snapshot_win_rate=p.")
    _positive_int_or_none("max_snapshots", value["max_snapshots"])
    if value["matchmaking"] not in MATCHMAKING_KINDS:
        _fail("matchmaking", value["matchmaking"], f"one of {list(MATCHMAKING_KINDS)}")
    _fraction("self_play_fraction", value["self_play_fraction"], low_open=False)
    opponents = value["opponents"]
    if not isinstance(opponents, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in opponents.items()):
        _fail("opponents", opponents, _OPPONENTS_EXPECTED)
    for name in opponents:
        if not validate_policy_id(name) or name == main:
            _fail("opponents", opponents, f"names that are valid policy IDs other than main {main!r}")
    for name in ("evaluation_games", "win_rate_window"):
        number = value[name]
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            _fail(name, number, "an int >= 1")
