"""What every ``cairn`` command shares: exit codes, the error that ends a command, and the
options every command takes (verbosity, logging)."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

__all__ = ["EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE", "EXIT_INTERRUPTED", "EXIT_TERMINATED",
           "EXIT_STDOUT_CLOSED",
           "CommandError", "UsageError", "ArgumentsError",
           "common_options", "check_seed", "parse_assignment", "is_assignment", "json_safe"]

EXIT_OK = 0
EXIT_FAILURE = 1
"""A command that could not do its work (a checkpoint that does not load, a failed check)."""
EXIT_USAGE = 2
"""Bad arguments: argparse's own errors, and arguments found wrong before any work is done."""
EXIT_INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT, the shell's convention)."""
EXIT_TERMINATED = 143
"""Exit status of ``cairn train`` stopped by SIGTERM after saving (128 + SIGTERM, what a shell
reports for a process that SIGTERM ended)."""
EXIT_STDOUT_CLOSED = 141
"""Exit status when stdout's reader went away (``cairn checkpoint diff A B | head``): 128 +
SIGPIPE, what a shell reports for ``yes | head`` (under ``set -o pipefail``, a failed pipeline,
as for those tools; ``head`` itself saw what it asked for)."""


class CommandError(Exception):
    """Ends a command with one line ``cairn: error: <message>`` on stderr and ``exit_code``."""

    exit_code = EXIT_FAILURE


class UsageError(CommandError):
    """Arguments that cannot work, found before any work is done (exit status 2)."""

    exit_code = EXIT_USAGE


class ArgumentsError(UsageError):
    """Arguments that do not go together (a missing or conflicting flag): shown the way argparse
    shows its own errors, the command's usage line first (exit status 2)."""


def common_options() -> argparse.ArgumentParser:
    """The options every command takes, before or after its name (``cairn -v train`` and
    ``cairn train -v``). Defaults are suppressed so that a subcommand's parser does not
    overwrite what the top-level one read."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("output")
    group.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                       help="log cairn's INFO messages (-vv: DEBUG) and show tracebacks of failures")
    group.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                       help="no progress output; warnings and errors only")
    group.add_argument("--log-level", default=argparse.SUPPRESS, type=str.upper,
                       choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                       help="level of the 'cairn' logger on stderr (default WARNING)")
    group.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="the same as -vv: DEBUG logging and the traceback of a failure")
    return common


def check_seed(seed: int | None) -> None:
    """UsageError for a ``--seed`` below 0, before any work: the config refuses it too, but
    as "Config 'seed'=-1", which names no flag, and (``cairn evaluate``) only after the restore."""
    if seed is not None and seed < 0:
        raise UsageError(f"--seed {seed}: expected an int of at least 0.")


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def is_assignment(text: str) -> bool:
    """``key=value`` with a config key on the left (``lr=0.001``); anything else is a file."""
    return _ASSIGNMENT.match(text) is not None


def parse_assignment(text: str) -> tuple[str, Any]:
    """``key=value``, the value parsed as JSON when it is JSON (``0.001``, ``[64, 64]``,
    ``null``) and kept as a string otherwise (``MeanStdFilter``)."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
        # Python's spellings of JSON values, kept as strings, were refused later as
        # "'normalize_advantages'='True' is invalid: expected True or False".
        json_form = {"True": "true", "False": "false", "None": "null"}.get(raw)
        if json_form is None and any(c.isdigit() for c in raw):
            try:
                json_form = json.dumps(float(raw))  # .001, 1_000
            except ValueError:
                pass
        if json_form is not None:
            raise UsageError(f"--config {text}: values are JSON; write {key}={json_form}.") from None
    return key, value


def json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities as None and numpy scalars as Python numbers, so that
    it is standard JSON (``json.dumps(..., allow_nan=False)``)."""
    import math

    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
