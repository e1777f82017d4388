"""How oncelog's commands print and exit: Rich in a terminal; in a pipe or a log file, one line per record.

Output that is not a terminal is never wrapped or truncated (a log collector or `grep` sees whole lines), tables are
plain aligned text and colour is off; an error goes to stderr, one line per problem. Exit codes follow one policy
(`ExitCode`). A reader that stops reading (`oncelog audit latest | head -1`) ends the command quietly with exit 0, as
Unix tools do: what is left to print goes nowhere.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import sys
from collections.abc import Collection
from enum import IntEnum

import typer
from rich.console import Console
from rich.text import Text
from typer._click import core as click  # typer's own copy of click, which its commands derive from
from typer.core import TyperCommand


class ExitCode(IntEnum):
    """The exit codes of every oncelog command (docs/cli.md)."""

    OK = 0
    VERDICT = 1
    """A verdict against: violations, problems in the log, a failed run, nothing running where asked."""
    USAGE = 2
    """Usage or input error: a bad flag or value, an unknown job, dataset, run or event type, a missing log."""
    REFUSED = 3
    """Fenced or refused: another run of the job holds its lock."""
    SKIPPED = 4
    """A run finished but skipped datasets whose history was not settled."""


LOG_URL = re.compile(r"(?:sqlite|kafka)://", re.IGNORECASE)
"""How a log URL begins (events.log.open_log's schemes)."""


class TakesTheLogByOption(TyperCommand):
    """A command that takes the log by `--log`: a log URL given as an argument (`oncelog verify sqlite:///…`, what a
    new user types first) is refused with the option to use, instead of click's "unexpected extra argument" or being
    taken for a dataset, job or run."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        url = next((arg for arg in args if LOG_URL.match(arg)), None)
        if url is not None and "--log" not in args:
            ctx.fail(f"{url} is a log URL: the log is given by option, as in: "
                     f"oncelog {ctx.info_name} --log {shlex.quote(url)}")
        return super().parse_args(ctx, args)


def stdout_console() -> Console:
    """A console on stdout that never wraps when stdout is not a terminal."""
    return _console(stderr=False)


def stderr_console() -> Console:
    """A console on stderr that never wraps when stderr is not a terminal."""
    return _console(stderr=True)


class QuietPipeConsole(Console):
    """A console that ends the command with exit 0 when its reader has gone (Rich's own exits 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise reader_gone()


def reader_gone() -> SystemExit:
    """The reader of stdout has gone: what is left to print goes to /dev/null (Python's flush at exit, too), and the
    command ends with exit 0; the caller raises the returned SystemExit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    return SystemExit(int(ExitCode.OK))


def _console(stderr: bool) -> Console:
    console = QuietPipeConsole(stderr=stderr, highlight=False)
    console.soft_wrap = not console.is_terminal
    return console


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> typer.Exit:
    """Print an error a user can act on on stderr, one problem per line (in a pipe too: a list of problems joined
    on one line cannot be read); the caller raises the returned Exit."""
    console = stderr_console()
    text = "\n".join(line for line in message.splitlines() if line.strip())
    console.print(Text.assemble(("error: ", "red"), text))
    return typer.Exit(int(code))


def warn(message: str) -> None:
    """Print a warning on one line of stderr."""
    console = stderr_console()
    console.print(Text.assemble(("warning: ", "yellow"), " | ".join(message.splitlines())))


def suggest(what: str, name: str, known: Collection[str], list_up_to: int = 10) -> str:
    """How an unknown name could be meant: the close matches among the known, else the known ones if few."""
    if not known:
        return f"; there is no {what} at all"
    lowered = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.6)
    close += [low for low in sorted(lowered) if name.lower() in low and low not in close][:3 - len(close)]
    if close:
        return "; did you mean " + " or ".join(repr(lowered[c]) for c in close) + "?"
    if len(known) <= list_up_to:
        return f"; known {what}s: " + ", ".join(sorted(known))
    return f"; {len(known)} {what}s are known, none like it"
