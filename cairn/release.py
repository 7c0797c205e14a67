"""Releasing several resources so that one that fails does not keep the others.

``stop()`` and ``close()`` release things one after another (environments, runners, learners);
an error from one (a user's ``env.close()`` that raises) must not leave the rest held: a
second ``stop()`` would meet the same error first and never reach them.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["release_all"]


def release_all(*steps: Callable[[], object]) -> None:
    """Call every one of ``steps`` in order, also after one raised; then raise the first error
    (the later ones are lost, as ``finally`` blocks would lose them).

    >>> calls = []
    >>> def fails():
    ...     calls.append("fails")
    ...     raise RuntimeError("first")
    >>> try:
    ...     release_all(fails, lambda: calls.append("second"))
    ... except RuntimeError as exc:
    ...     print(exc, calls)
    first ['fails', 'second']
    """
    first: BaseException | None = None
    for step in steps:
        try:
            step()
        except BaseException as exc:  # raised below, once the other steps ran
            if first is None:
                first = exc
    if first is not None:
        raise first
