"""Scripted opponents by name: ``random_legal``, a function or a class through the one resolver,
and bad names refused with the spec and the fix."""

from __future__ import annotations

import numpy as np
import pytest

from cairn.core import ScriptedOpponent
from cairn.env_runner.scripted_opponents import RANDOM_LEGAL, random_legal, resolve_opponent
from cairn.envs.connect_four import connect_four_heuristic
from cairn.errors import ConfigError, EnvError, UnsafeCheckpointError

HERE = __name__


class FirstLegal:
    """A scripted opponent class: the lowest legal action; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, observation, action_mask, rng):
        self.calls += 1
        return int(np.flatnonzero(action_mask)[0])


class NeedsArguments:
    def __init__(self, depth: int) -> None:
        self.depth = depth

    def __call__(self, observation, action_mask, rng):
        return 0


class NotCallable:
    pass


def test_random_legal_is_uniform_over_the_legal_actions_only():
    mask = np.array([0, 1, 0, 1, 1, 0, 0], np.int8)
    rng = np.random.default_rng(0)
    drawn = np.array([random_legal(np.zeros(3), mask, rng) for _ in range(3000)])
    assert set(drawn.tolist()) == {1, 3, 4}
    counts = np.bincount(drawn, minlength=7)[[1, 3, 4]]
    assert counts.min() > 900  # 1000 expected each; 900 is > 3 standard deviations away
    with pytest.raises(ConfigError, match="needs an action mask"):
        random_legal(np.zeros(3), None, rng)
    with pytest.raises(EnvError, match="allows no action"):
        random_legal(np.zeros(3), np.zeros(7, np.int8), rng)


def test_names_resolve_to_functions_and_fresh_instances():
    assert resolve_opponent(RANDOM_LEGAL) is random_legal
    assert resolve_opponent("cairn.envs.connect_four:connect_four_heuristic") is connect_four_heuristic
    first, second = resolve_opponent(f"{HERE}:FirstLegal"), resolve_opponent(f"{HERE}:FirstLegal")
    assert isinstance(first, FirstLegal) and first is not second
    assert isinstance(first, ScriptedOpponent)
    assert first(np.zeros(3), np.array([0, 0, 1]), np.random.default_rng(0)) == 2


@pytest.mark.parametrize("spec, match", [
    ("randm_legal", r"Unknown opponent 'randm_legal': expected 'random_legal' or 'package.module:"),
    ("my module:fn", r"Unknown opponent 'my module:fn'"),
    ("cairn_no_such_module:play", r"opponent 'cairn_no_such_module:play'.*No module named.*Fix:"),
    ("cairn.envs.connect_four:no_such_player", r"'cairn.envs.connect_four:no_such_player'.*Fix:"),
    (f"{HERE}:NeedsArguments", r"NeedsArguments, which could not be built with no arguments.*Fix:"),
])
def test_a_bad_spec_is_a_config_error_naming_it_and_the_fix(spec, match):
    with pytest.raises(ConfigError, match=match):
        resolve_opponent(spec)


def test_a_misspelt_random_legal_is_named_as_the_fix():
    with pytest.raises(ConfigError, match=r"Did you mean 'random_legal'\?"):
        resolve_opponent("random_legl")
    with pytest.raises(ConfigError) as info:  # nothing is guessed for a name far from it
        resolve_opponent("heuristic")
    assert "Did you mean" not in str(info.value)


@pytest.mark.parametrize("spec", [
    "os:system",  # the standard library is refused before anything is imported
    "numpy:argmax",  # not a function defined in the module it names
    f"{HERE}:NotCallable",  # a class whose instances cannot play
    "cairn.envs:connect_four_heuristic",  # imported into cairn.envs, defined elsewhere
])
def test_the_one_resolver_s_refusals_hold_for_opponents(spec):
    with pytest.raises(UnsafeCheckpointError, match=f"scripted opponent reference '{spec}'"):
        resolve_opponent(spec)
