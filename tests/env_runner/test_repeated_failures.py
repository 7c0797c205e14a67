"""What counts as "the same error without progress" (cairn.env_runner.repeated_failures): the
rule that stops a remote runner with a deterministic error from being recreated forever.
Without Ray: the Ray tests are in tests/ray/test_repeated_failures.py."""

from __future__ import annotations

import pytest

from cairn.env_runner.repeated_failures import ErrorSignature, RepeatedFailures, error_signature


class UserError(ValueError):
    pass


def test_the_signature_is_the_type_by_module_and_name_and_the_message() -> None:
    assert error_signature(RuntimeError("boom")) == ErrorSignature("RuntimeError", "boom")
    assert str(error_signature(RuntimeError("boom"))) == "RuntimeError: boom"
    mine = error_signature(UserError("boom"))
    assert mine == ErrorSignature(f"{__name__}.UserError", "boom")
    # Same message, another type (even a subclass): not the same error.
    assert mine != error_signature(ValueError("boom"))
    assert error_signature(RuntimeError("boom at step 3")) != error_signature(RuntimeError("boom at step 4"))


def test_the_same_error_in_a_row_counts_up() -> None:
    streaks = RepeatedFailures()
    boom = error_signature(RuntimeError("boom"))
    assert [streaks.failed(1, boom) for _ in range(3)] == [1, 2, 3]
    assert streaks.streak(1) == (boom, 3)
    assert streaks.streak(2) == (None, 0)  # runners count apart


@pytest.mark.parametrize("between", ["progress", "other error", "death"])
def test_progress_or_any_other_failure_ends_the_streak(between: str) -> None:
    streaks = RepeatedFailures()
    boom = error_signature(RuntimeError("boom"))
    streaks.failed(1, boom)
    streaks.failed(1, boom)
    if between == "progress":  # a completed sample
        streaks.progressed(1)
    elif between == "other error":
        assert streaks.failed(1, error_signature(RuntimeError("another"))) == 1
    else:  # died or timed out: no signature
        assert streaks.failed(1, None) == 0
    assert streaks.failed(1, boom) == 1


def test_another_runner_does_not_touch_a_streak() -> None:
    streaks = RepeatedFailures()
    boom = error_signature(RuntimeError("boom"))
    streaks.failed(1, boom)
    streaks.failed(2, boom)
    streaks.progressed(2)
    assert streaks.failed(1, boom) == 2
