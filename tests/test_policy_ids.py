import pytest

import cairn
from cairn.errors import ConfigError
from cairn.policy_ids import check_policy_ids


@pytest.mark.parametrize("pid", ["default_policy", "p0", "attacker-v2", "a.b", "A_1", "x" * 64, "CONSOLE", "COM0"])
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
