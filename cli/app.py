"""The `vtrain` command line. Each command lives in its own module and registers on `app`.

Command modules import only light modules at import time (typer, the spec); heavy ones
(jax, pandas, pyarrow) are imported inside the command so `vtrain predict` starts fast.
"""
from __future__ import annotations

import sys

import typer

from vtrain.costmodel.errors import UserError, file_error

app = typer.Typer(
    name="vtrain",
    help="Predict LLM training iteration time and find the best parallelization strategy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: runs the app, turning user errors into one line + exit 2."""
    _register_commands()
    try:
        app(args=argv, prog_name="vtrain", standalone_mode=True)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except (OSError, UnicodeDecodeError) as err:  # a user file no reader wrapped: still one line
        print(f"error: {file_error(err)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
