import pytest

from cairn.checkpoint.migrations import MIGRATIONS, MigrationRegistry, migrate, register_migration
from cairn.errors import CheckpointFormatError, UnsupportedCheckpointVersionError


def test_chain_applies_one_step_at_a_time():
    registry: MigrationRegistry = {}
    calls = []

    @register_migration("Policy", "1", "2", registry=registry)
    def one_to_two(state):
        calls.append("1->2")
        new = dict(state)
        new["renamed"] = new.pop("old")
        return new

    @register_migration("Policy", "2", "3", registry=registry)
    def two_to_three(state):
        calls.append("2->3")
        return {**state, "v3": True}

    out = migrate("Policy", {"old": 1}, "1", target="3", registry=registry)
    assert out == {"renamed": 1, "v3": True}
    assert calls == ["1->2", "2->3"]
    assert migrate("Policy", {"x": 1}, "3", target="3", registry=registry) == {"x": 1}


def test_missing_step_and_newer_versions_fail():
    registry: MigrationRegistry = {}
    with pytest.raises(UnsupportedCheckpointVersionError, match="No migration"):
        migrate("Algorithm", {}, "1", target="2", registry=registry)
    with pytest.raises(UnsupportedCheckpointVersionError, match="newer"):
        migrate("Algorithm", {}, "5", target="1", registry=registry)
    with pytest.raises(CheckpointFormatError):
        migrate("Algorithm", {}, "v1", target="1", registry=registry)


def test_only_single_steps_register():
    with pytest.raises(ValueError, match="one version at a time"):
        register_migration("Policy", "1", "3", registry={})


def test_version_2_changed_no_state_tree():
    """Format version 2 added an optional manifest key (``metadata``): 1 -> 2 is the identity
    for every kind, components included (through the ``"component"`` kind)."""
    from_1 = {key for key in MIGRATIONS if key[1] == "1"}
    assert from_1 == {("Algorithm", "1"), ("Policy", "1"), ("component", "1")}
    for kind in ("Algorithm", "Policy", "component:replay_buffer"):
        assert migrate(kind, {"a": 1}, "1") == {"a": 1}
    assert migrate("Algorithm", {"a": 1}, "2") == {"a": 1}
