"""The ``cairn`` command: its parser, and how a command's failure reaches the shell.

Exit status: 0 done; 1 failed (one line ``cairn: error: ...`` on stderr; ``-v``/``--debug``
add the traceback); 2 bad arguments (argparse's usage message, or one ``cairn: error:``
line for arguments found wrong before any work); 130 interrupted (Ctrl-C). Warnings from
cairn's own code show as ``cairn: warning: ...`` lines, as its log records do.
"""

from __future__ import annotations

import argparse
import sys
import traceback
import warnings
from collections.abc import Sequence

from cairn._version import __version__
from cairn.cli.checkpoint_cmd import add_parser as add_checkpoint
from cairn.cli.common import EXIT_FAILURE, EXIT_INTERRUPTED, ArgumentsError, CommandError, common_options
from cairn.cli.evaluate import add_parser as add_evaluate
from cairn.cli.export import add_parser as add_export
from cairn.cli.logs import configure_logging, remove_handler, shows_tracebacks, warnings_as_log_records
from cairn.cli.plot import add_parser as add_plot
from cairn.cli.train import add_parser as add_train

__all__ = ["build_parser", "main"]

DESCRIPTION = "cairn: train, evaluate, plot, export and inspect reinforcement learning runs."


def build_parser() -> argparse.ArgumentParser:
    """The parser of the ``cairn`` command and its subcommands."""
    common = common_options()
    parser = argparse.ArgumentParser(prog="cairn", description=DESCRIPTION, parents=[common])
    parser.add_argument("--version", action="version", version=f"cairn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (add_train, add_evaluate, add_plot, add_export, add_checkpoint):
        add(sub, common)
    return parser


def _one_line(exc: BaseException) -> str:
    from cairn.errors import CairnError

    text = " ".join(str(exc).split())
    if isinstance(exc, (CairnError, CommandError)):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cairn`` command (and ``python -m cairn``); returns the exit status."""
    args = build_parser().parse_args(argv)
    handler = configure_logging(args)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = warnings_as_log_records()
            return int(args.run(args))
    except ArgumentsError as exc:  # argparse's form: the usage line, then "cairn train: error: ..."
        parser = getattr(args, "parser", None)
        if parser is not None:
            parser.print_usage(sys.stderr)
        print(f"{parser.prog if parser else 'cairn'}: error: {_one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except CommandError as exc:
        if shows_tracebacks(args):
            traceback.print_exc()
        print(f"cairn: error: {_one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:  # outside training's own handling: nothing to save
        print(f"cairn {args.command}: interrupted.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if shows_tracebacks(args):
            traceback.print_exc()
        hint = "" if shows_tracebacks(args) else " (--debug shows the traceback)"
        from cairn.errors import CairnError

        print(f"cairn: error: {_one_line(exc)}{'' if isinstance(exc, CairnError) else hint}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        remove_handler(handler)
