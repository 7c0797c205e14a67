"""The ``cairn`` command: its parser, and how a command's failure reaches the shell.

Exit status: 0 done; 1 failed (one line ``cairn: error: ...`` on stderr; ``-v``/``--debug``
add the traceback); 2 bad arguments (argparse's usage message, or one ``cairn: error:``
line for arguments found wrong before any work); 130 interrupted (Ctrl-C); 143 ``cairn train``
stopped by SIGTERM (after saving); 141 stdout closed by its reader (``cairn ... | head``: nothing
more is printed, as with tools that SIGPIPE ends). Warnings from cairn's own code show as
``cairn: warning: ...`` lines, as its log records do.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings
from collections.abc import Sequence

from cairn._version import __version__
from cairn.cli.checkpoint_cmd import add_parser as add_checkpoint
from cairn.cli.common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_STDOUT_CLOSED,
    ArgumentsError,
    CommandError,
    common_options,
)
from cairn.cli.env_names import import_user_modules, restore_hint
from cairn.cli.evaluate import add_parser as add_evaluate
from cairn.cli.export import add_parser as add_export
from cairn.cli.league_cmd import add_parser as add_league
from cairn.cli.logs import configure_logging, remove_handler, shows_tracebacks, warnings_as_log_records
from cairn.cli.plot import add_parser as add_plot
from cairn.cli.train import add_parser as add_train

__all__ = ["build_parser", "main"]

DESCRIPTION = "cairn: train, evaluate, plot, export and inspect reinforcement learning runs and leagues."


def build_parser() -> argparse.ArgumentParser:
    """The parser of the ``cairn`` command and its subcommands."""
    common = common_options()
    parser = argparse.ArgumentParser(prog="cairn", description=DESCRIPTION, parents=[common])
    parser.add_argument("--version", action="version", version=f"cairn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (add_train, add_evaluate, add_plot, add_export, add_checkpoint, add_league):
        add(sub, common)
    return parser


def _one_line(exc: BaseException) -> str:
    from cairn.errors import CairnError

    text = " ".join(str(exc).split())
    if isinstance(exc, (CairnError, CommandError)):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (``cairn ... | head`` after head
    exits): the pipe then polls as an error. Other broken pipes (a socket of a library) are
    failures like any other."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows) or no file descriptor (tests)
        return False


def _quiet_after_closed_stdout() -> int:
    """End as ``yes | head`` ends: nothing on stderr, status 128 + SIGPIPE. stdout's descriptor
    now points at devnull, so that the interpreter's last flush of the unwritten rest does not
    print 'Exception ignored ... BrokenPipeError' either (Python's documented recipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_STDOUT_CLOSED


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cairn`` command (and ``python -m cairn``); returns the exit status."""
    try:
        try:
            return _main(argv)
        finally:
            if sys.stdout is not None:  # None: started without a stdout (`cairn ... >&-`)
                sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise
        return _quiet_after_closed_stdout()


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    handler = configure_logging(args)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = warnings_as_log_records()
            import_user_modules(getattr(args, "imports", ()))  # --import: before anything reads a name
            return int(args.run(args))
    except BrokenPipeError as exc:
        if _stdout_reader_gone():
            raise  # main() ends quietly
        return _failed(args, exc)
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
        return _failed(args, exc)
    finally:
        remove_handler(handler)


def _failed(args: argparse.Namespace, exc: BaseException) -> int:
    """Report an unexpected failure: one line (and the traceback with -v/--debug); status 1."""
    from cairn.errors import CairnError

    if shows_tracebacks(args):
        traceback.print_exc()
    hint = "" if shows_tracebacks(args) else " (--debug shows the traceback)"
    # A restore that lacked a module or an environment: the command's own way to supply it.
    fix = restore_hint(exc, env_option=args.command == "evaluate") if hasattr(args, "imports") else None
    print(f"cairn: error: {_one_line(exc)}{'' if isinstance(exc, CairnError) else hint}"
          f"{f' {fix}' if fix else ''}", file=sys.stderr)
    return EXIT_FAILURE
