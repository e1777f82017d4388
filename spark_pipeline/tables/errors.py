"""The tables' error, apart from pyiceberg's calls: `oncelog.errors` exports it without loading pyiceberg."""

from __future__ import annotations

from events.errors import OncelogError


class TableError(OncelogError):
    """A table cannot be reached, read or appended to; the message names the table and the catalog."""


class TableDataError(TableError):
    """The table refuses the data itself (a column whose type it cannot take): nothing was committed, and committing
    the same files again cannot succeed; a commit of many sequences' files is then split to find whose they are."""
