import pytest

import cairn
from cairn.errors import ConfigError, UnknownPolicyIdError
from cairn.policy_ids import check_policy_ids, normalize_policy_ids
from tests.helpers import small_ma_ppo


@pytest.mark.parametrize(
    "pid", ["default_policy", "p0", "attacker-v2", "a.b", "A_1", "x" * 64, "CONSOLE", "COM0"])
def test_valid_ids(pid):
    assert cairn.validate_policy_id(pid)
    assert cairn.validate_policy_id(pid, error=True)


@pytest.mark.parametrize(
    "pid",
    ["", "x" * 65, "../evil", "a/b", "a\\b", ".hidden", "-flag", "end.", "sp ace", "nul\x00",
     "CON", "con", "Nul.txt", "COM1", "lpt9.log", "é", 3, None, b"bytes"],
)
def test_invalid_ids(pid):
    assert not cairn.validate_policy_id(pid)
    with pytest.raises(ConfigError, match="policy ID"):
        cairn.validate_policy_id(pid, error=True)


def test_case_collision():
    with pytest.raises(ConfigError, match="differ only in case"):
        check_policy_ids(["Attacker", "attacker"])
    check_policy_ids(["a", "b"])


@pytest.mark.parametrize(
    ("given", "expected"),
    [(None, None), ("p1", ["p1"]), (["p0", "p1"], ["p0", "p1"]), (("p1", "p0", "p1"), ["p1", "p0"]),
     ({"p1", "p0"}, ["p0", "p1"]), (frozenset({"p2"}), ["p2"]), ([], [])],
)
def test_normalize_policy_ids(given, expected):
    assert normalize_policy_ids(given) == expected


@pytest.mark.parametrize("given", [3, b"p1", {"p1": 1}, ["p0", 1], object()])
def test_normalize_policy_ids_refuses_other_types(given):
    with pytest.raises(ConfigError, match="policy_ids must"):
        normalize_policy_ids(given)


@pytest.fixture(scope="module")
def ma_checkpoint(tmp_path_factory):
    algo = small_ma_ppo(2).build()
    path = algo.save(tmp_path_factory.mktemp("ma") / "c")
    algo.stop()
    return path


def test_a_str_is_one_policy_id_in_every_restore(ma_checkpoint):
    to_p1 = {"policy_mapping_fn": lambda aid, **kw: "p1"}
    algo = cairn.Algorithm.from_checkpoint(ma_checkpoint, policy_ids="p1", **to_p1)
    assert set(algo.policies) == {"p1"}
    state = algo.get_state()
    assert set(cairn.Algorithm.from_state(state, policy_ids="p1", **to_p1).policies) == {"p1"}
    assert set(cairn.Policy.from_checkpoint(ma_checkpoint, policy_ids="p1")) == {"p1"}
    with pytest.raises(UnknownPolicyIdError, match=r"\['p9'\]"):
        cairn.Algorithm.from_checkpoint(ma_checkpoint, policy_ids="p9")


def test_restore_with_policy_ids_of_another_type_says_what_to_pass(ma_checkpoint):
    for restore in (cairn.Algorithm.from_checkpoint, cairn.Policy.from_checkpoint):
        with pytest.raises(ConfigError, match=r"got int 1; pass e.g. policy_ids=\['p0'\]"):
            restore(ma_checkpoint, policy_ids=1)
