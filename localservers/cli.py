"""What the `oncelog kafka|hdfs|s3` sub-commands share: one app shape with the same `down` and `status`, one-line
errors, and the `--state-dir` option.

`up` and `status` print only the server's URL on stdout (scripts capture it); everything else goes to stderr.
(No ``from __future__ import annotations`` here: typer reads the options of the commands built below from their
annotations, which name this module's local values.)
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Generic, TypeVar

import typer

from events.errors import OncelogError

T = TypeVar("T")


@dataclass(frozen=True)
class ServerCommands(Generic[T]):
    """One local server as its sub-commands see it: how they name it, where it lives, how to stop, find and show it."""

    name: str  # the sub-command: "kafka"
    what: str  # in messages: "no broker running in <state dir>"
    state_dir: Path  # the default --state-dir
    state_dir_help: str
    down: Callable[[Path], bool]
    status: Callable[[Path], T | None]
    show: Callable[[T], None]  # print what runs: its URL on stdout, hints on stderr

    def state_dir_option(self) -> Any:
        """The ``--state-dir`` option, for ``Annotated[Path, ...]``."""
        return typer.Option("--state-dir", help=self.state_dir_help)


def command_group(name: str, help_text: str) -> typer.Typer:
    """A sub-command group with the oncelog command's help conventions (docs/cli.md)."""
    return typer.Typer(name=name, help=help_text, no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                       context_settings={"help_option_names": ["-h", "--help"]})


def server_app(server: ServerCommands[T], help_text: str, *commands: Callable[..., None]) -> typer.Typer:
    """The sub-command group of one local server: its own `commands` (`up` first), then the shared `down` and
    `status`."""
    app = command_group(server.name, help_text)
    for command in commands:
        app.command()(command)
    state_dir_option = server.state_dir_option()

    @app.command(help=f"Stop the {server.what} that `up` started (its data stays in the state dir).")
    def down(state_dir: Annotated[Path, state_dir_option] = server.state_dir) -> None:
        with one_line_errors():
            stopped = server.down(state_dir)
        typer.echo(f"stopped the {server.what} in {state_dir}" if stopped
                   else f"no {server.what} running in {state_dir}", err=True)

    @app.command(help=f"Print the running {server.what}'s URL; exit code 1 if none runs in the state dir.")
    def status(state_dir: Annotated[Path, state_dir_option] = server.state_dir) -> None:
        with one_line_errors():
            found = server.status(state_dir)
        if found is None:
            typer.echo(f"no {server.what} running in {state_dir}", err=True)
            raise typer.Exit(code=1)
        server.show(found)

    return app


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Turn a server's error into its first line on stderr (it names the log to read) and exit code 1."""
    try:
        yield
    except OncelogError as e:
        first_line = (str(e).strip().splitlines() or ["unknown error"])[0]
        typer.echo(f"error: {first_line}", err=True)
        raise typer.Exit(code=1) from e
