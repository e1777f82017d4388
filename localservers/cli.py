"""What the `oncelog kafka|hdfs|s3` sub-commands share: one app shape, one-line errors, and the down/status words.

`up` and `status` print only the server's URL on stdout (scripts capture it); everything else goes to stderr.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

import typer

from events.errors import OncelogError

T = TypeVar("T")


def server_app(name: str, help_text: str) -> typer.Typer:
    """A sub-command group for one local server, with the oncelog command's help conventions (docs/cli.md)."""
    return typer.Typer(name=name, help=help_text, no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                       context_settings={"help_option_names": ["-h", "--help"]})


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Turn a server's error into its first line on stderr (it names the log to read) and exit code 1."""
    try:
        yield
    except OncelogError as e:
        first_line = (str(e).strip().splitlines() or ["unknown error"])[0]
        typer.echo(f"error: {first_line}", err=True)
        raise typer.Exit(code=1) from e


def report_down(stopped: bool, what: str, state_dir: object) -> None:
    """Say on stderr whether `down` stopped the server."""
    typer.echo(f"stopped the {what} in {state_dir}" if stopped else f"no {what} running in {state_dir}", err=True)


def require_running(found: T | None, what: str, state_dir: object) -> T:
    """What `status` found running; where nothing runs, say so and exit 1."""
    if found is None:
        typer.echo(f"no {what} running in {state_dir}", err=True)
        raise typer.Exit(code=1)
    return found
