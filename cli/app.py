"""The `vtrain` command line. Each command lives in its own module and registers on `app`.

Command modules import only light modules at import time (typer, the spec); heavy ones
(jax, pandas, pyarrow) are imported inside the command so `vtrain predict` starts fast.
"""
from __future__ import annotations

import signal
import sys

import typer

from vtrain.costmodel.errors import UserError, file_error

app = typer.Typer(
    name="vtrain",
    help="Predict LLM training iteration time and find the best parallelization strategy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: wraps at 80 columns instead of cutting flag names
)


@app.callback()
def _root() -> None:
    """Predict LLM training iteration time and find the best parallelization strategy."""


def _register_commands() -> None:
    # Importing a module registers its commands on `app`.
    from vtrain.cli import predict_cmd  # noqa: F401
    from vtrain.cli import search_cmd  # noqa: F401
    from vtrain.cli import fit_cmd  # noqa: F401
    from vtrain.cli import dataset_cmd  # noqa: F401
    from vtrain.cli import forecast_cmd  # noqa: F401
    from vtrain.cli import calibrate_cmd  # noqa: F401


# click's exception base (recent typer vendors click as typer._click; older typer uses click itself).
_ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def usage_error_line(err, argv: list[str]) -> str:
    """One line for a command-line usage error (an unknown flag, a value of the wrong type, a missing
    argument): click's message and where the help is, instead of click's three-line usage block."""
    ctx = getattr(err, "ctx", None)
    path = ctx.command_path if ctx is not None else _command_path(argv)
    return f"error: {err.format_message()} (see '{path} --help')"


def _command_path(argv: list[str]) -> str:
    """`vtrain` plus the (sub)command names that lead argv, for errors click raises without a context."""
    path, group = ["vtrain"], typer.main.get_command(app)
    for word in argv:
        command = getattr(group, "commands", {}).get(word)
        if command is None:
            break
        path.append(word)
        group = command
    return " ".join(path)


class Terminated(SystemExit):
    """SIGTERM, raised as an exception (like Ctrl-C) so the same clean-up runs: temporary files are
    removed and nothing is half-written. A SystemExit, so typer passes it through (exit code 143)."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated(128 + signum)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: runs the app, turning user errors (ours and click's usage errors)
    into one line + exit 2. SIGTERM is handled like SIGINT: the interrupted command cleans up and the
    exit code is 143 (130 for Ctrl-C)."""
    _register_commands()
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (an embedding program): leave its signals alone
        previous = None
    try:
        # Not standalone: click raises its usage errors here instead of printing its usage block,
        # and returns the exit code of typer.Exit / --help (0) / Ctrl-C (130) instead of exiting.
        code = app(args=argv, prog_name="vtrain", standalone_mode=False)
        code = code if isinstance(code, int) else 0  # a command returns None
        if code == 130:
            print("interrupted", file=sys.stderr)
        sys.exit(code)  # as in standalone mode: main() always ends in SystemExit
    except _ClickException as err:
        if type(err).__name__ == "NoArgsIsHelpError":  # bare `vtrain` / `vtrain dataset`: the help
            err.show()
        else:
            print(usage_error_line(err, sys.argv[1:] if argv is None else argv), file=sys.stderr)
        sys.exit(err.exit_code)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(1)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except (OSError, UnicodeDecodeError) as err:  # a user file no reader wrapped: still one line
        print(f"error: {file_error(err)}", file=sys.stderr)
        sys.exit(2)
    except Terminated as err:
        print("terminated", file=sys.stderr)
        sys.exit(err.code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
