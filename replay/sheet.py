"""Tables as data, and how they print: a Rich table in a terminal, aligned plain lines (one per row) anywhere else.

Used by the CLI and by the live view's pages alike, so it lives below both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class Sheet:
    """A table as data: a Rich table in a terminal, aligned plain text (one line per row) anywhere else."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


Block = Sheet | Text | str
"""What a command prints: tables and lines (a str is plain text, never markup)."""


def show(blocks: Iterable[Block], console: Console) -> None:
    """Print blocks: Rich tables in a terminal, else plain lines."""
    for block in blocks:
        if isinstance(block, Sheet):
            if console.is_terminal:
                console.print(rich_table(block))
            else:
                for line in plain_lines(block):
                    console.out(line, highlight=False)
        elif console.is_terminal:
            console.print(block, markup=False)
        else:
            console.out(block.plain if isinstance(block, Text) else block, highlight=False)


def rich_table(sheet: Sheet) -> RenderableType:
    """A sheet as a Rich table, for a terminal."""
    table = Table(title=sheet.title, title_justify="left")
    for column in sheet.columns:
        table.add_column(column, overflow="fold")  # a narrow terminal folds a cell; it never hides part of it
    for row in sheet.rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


def plain_lines(sheet: Sheet) -> list[str]:
    """A sheet as its title, then aligned lines: a header and one line per row; an empty cell shows as `-`."""
    rows = [sheet.columns, *(tuple(one_line(cell) or "-" for cell in row) for row in sheet.rows)]
    widths = [max(cell_len(row[i]) for row in rows) for i in range(len(sheet.columns))]
    lines = ["  ".join(cell + " " * (width - cell_len(cell)) for cell, width in zip(row, widths)).rstrip()
             for row in rows]
    return [f"{sheet.title}:", *lines]


def one_line(text: str) -> str:
    """Text on one line: line breaks and tabs written as `\\n` and `\\t`, so a record stays one line."""
    return text.replace("\\", "\\\\").replace("\r", "").replace("\n", "\\n").replace("\t", "\\t")
