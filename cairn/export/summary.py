"""Short, single-paragraph reasons from long exporter exceptions (for errors and manifests)."""

from __future__ import annotations

__all__ = ["short_reason"]

MAX_REASON_CHARS = 600


def short_reason(exc: BaseException, *, lines: int = 3) -> str:
    """``TypeName: first lines of the message`` (at most ``lines`` of them), at most
    :data:`MAX_REASON_CHARS` characters.

    torch.export and the ONNX exporter attach pages of stack and guard details; the first
    lines say what went wrong.
    """
    kept = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join(kept[:lines]) or "(no message)"
    if len(text) > MAX_REASON_CHARS:
        text = text[: MAX_REASON_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {text}"
