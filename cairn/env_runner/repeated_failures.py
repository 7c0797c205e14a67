"""RepeatedFailures: tells a remote env runner that fails the same way again and again from
one that failed by chance, so that a deterministic error is not recreated a thousand times.

**The same error**: an exception raised by the runner's own code (its environment, model or a
callback, inside ``sample()``, or while a recreated runner is brought to its state) whose type
(module and qualified name) and message equal the previous failure's; for a runner whose
constructor raised, of which Ray keeps only the text, the same traceback. A runner that died,
timed out, or raised an error Ray could not bring back has no signature and starts no streak:
those are what restarts are for, and their texts carry process IDs that would never match.
An error whose message differs each time (a step count, a time) is never "the same": such a
runner falls back to ``max_num_env_runner_restarts``, the conservative side.

**Without progress**: no ``sample()`` of that ``worker_index`` completed between the failures.
A completed sample ends the streak, so a runner that fails now and then, doing real work in
between, is recreated as often as the restarts allow.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ErrorSignature", "RepeatedFailures", "error_signature"]


@dataclass(frozen=True)
class ErrorSignature:
    """What two failures must share to be "the same error": the exception's type, by module
    and qualified name, and its message."""

    type_name: str
    message: str

    def __str__(self) -> str:
        return f"{self.type_name}: {self.message}"


def error_signature(error: BaseException) -> ErrorSignature:
    """The signature of ``error``, an exception raised by a runner's own code."""
    cls = type(error)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    return ErrorSignature(name, str(error))


class RepeatedFailures:
    """Per ``worker_index``: how many times in a row it failed with the same error, with no
    sample completed in between.

    >>> streaks = RepeatedFailures()
    >>> boom = ErrorSignature("RuntimeError", "boom")
    >>> streaks.failed(1, boom), streaks.failed(1, boom)
    (1, 2)
    >>> streaks.progressed(1)
    >>> streaks.failed(1, boom)
    1
    """

    def __init__(self) -> None:
        self._streaks: dict[int, tuple[ErrorSignature, int]] = {}

    def failed(self, index: int, signature: ErrorSignature | None) -> int:
        """Record one failure of runner ``index``; the length of its streak of this error (0
        for a failure without a signature, which ends any streak)."""
        if signature is None:
            self._streaks.pop(index, None)
            return 0
        last, count = self._streaks.get(index, (signature, 0))
        count = count + 1 if last == signature else 1
        self._streaks[index] = (signature, count)
        return count

    def progressed(self, index: int) -> None:
        """Runner ``index`` completed a sample: its failures so far are not a streak."""
        self._streaks.pop(index, None)

    def streak(self, index: int) -> tuple[ErrorSignature | None, int]:
        """Runner ``index``'s current error and how many times in a row it failed with it."""
        signature, count = self._streaks.get(index, (None, 0))
        return signature, count
