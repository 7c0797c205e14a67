"""Modules renamed to say what they hold (issue 38 item 6) keep their old paths for the names the
docs gave users: the same objects, and nothing else."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(("old", "new", "documented"), [
    ("cairn.algorithms.checkpointing", "cairn.algorithms.save_restore", ["save_algorithm"]),
    ("cairn.policy.model", "cairn.policy.mlp_actor_critic", ["policy_encoder_description"]),
])
def test_the_old_path_gives_the_documented_names(old: str, new: str, documented: list[str]) -> None:
    old_module, new_module = importlib.import_module(old), importlib.import_module(new)
    assert old_module.__all__ == documented
    for name in documented:
        assert getattr(old_module, name) is getattr(new_module, name)
