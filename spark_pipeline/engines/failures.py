"""What a failed attempt's error comes down to, decided in one place for both engines: its root cause's first line
(unwrapped from py4j's and Spark's wrappers to the Python or Java error underneath), and whether a retry can fix it.

A failure no retry can fix (files on two file systems that cannot rename between each other, a bucket, file or folder
that does not exist, credentials or permissions refused, SQL that Spark cannot analyse, a configuration error) ends
its task at once: waiting `task.retry.intervalinsec` for the same error again only hides it. Anything else (an
unreachable server, a broken connection, an error of the data or of a user's construct) is retried as configured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException

from events.errors import ConfigError

CAUSE_CHARS = 500
"""The longest root-cause line kept (a message may hold a whole file listing)."""
PYTHON_TRACEBACK = "Traceback (most recent call last):"
PYTHON_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*)(: .*)?$")
JAVA_CAUSE = re.compile(r"^Caused by: (.+)$")
JAVA_THROWABLE = re.compile(r"^(?:: )?((?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error|Throwable)[\w$]*)(: .*)?$")
INLINE_THROWABLE = re.compile(r"(?<![\w$.])(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error)[\w$]*: ")
STACK_MARKS = (PYTHON_TRACEBACK, "\n\tat ", "\nCaused by: ", "JVM stacktrace:")
"""What a message holding a stack trace (a Java error's, a Python worker's) shows of it."""


class Permanent(Enum):
    """A kind of failure no retry can fix, as said to the user (`not retried: <value>`)."""

    CROSS_FILE_SYSTEMS = "files on two file systems that cannot rename between each other"
    MISSING_BUCKET = "a bucket that does not exist"
    MISSING_PATH = "a file or folder that does not exist"
    CREDENTIALS = "credentials or permissions refused"
    SQL_ANALYSIS = "SQL that Spark cannot analyse"
    CONFIGURATION = "a configuration error"


PATTERNS: tuple[tuple[re.Pattern[str], Permanent], ...] = (
    (re.compile(r"lie on different file systems|Wrong FS: "), Permanent.CROSS_FILE_SYSTEMS),
    (re.compile(r"NoSuchBucket|[Bb]ucket .{0,80}(does not exist|not found)|specified bucket does not exist"),
     Permanent.MISSING_BUCKET),
    (re.compile(r"InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied|Access Denied|403 Forbidden|"
                r"Unable to locate credentials|NoCredentialsError|AccessControlException|Permission denied|"
                r"PermissionError|AuthenticationException|InvalidToken|ExpiredToken"), Permanent.CREDENTIALS),
    (re.compile(r"AnalysisException|ParseException|\[UNRESOLVED_|\[PARSE_SYNTAX_ERROR|\[TABLE_OR_VIEW_NOT_FOUND|"
                r"\[DATATYPE_MISMATCH"), Permanent.SQL_ANALYSIS),
    (re.compile(r"FileNotFoundException|FileNotFoundError|NoSuchKey|No such file or directory|PATH_NOT_FOUND|"
                r"Path does not exist"), Permanent.MISSING_PATH),
)
"""Root causes (and the texts around them) by what they say: Java's errors reach Python as text, boto's and
Hadoop's keep their codes in the message. The first match decides."""


@dataclass(frozen=True)
class Failure:
    """What an attempt's error comes down to."""

    cause: str
    """The root cause's first line, `Type: message` (never a py4j or Spark wrapper's frame)."""
    permanent: Permanent | None
    """Why no retry can fix it; None when a retry may."""

    @property
    def retriable(self) -> bool:
        return self.permanent is None


def classify(error: BaseException) -> Failure:
    """An attempt's error: its root cause's first line and whether a retry can fix it."""
    cause = root_cause(error)
    return Failure(cause, permanent_kind(error, cause))


def root_cause(error: BaseException) -> str:
    """The first line of what went wrong underneath `error`: a Py4JJavaError's (or Spark's captured error's) Java
    root cause, a Spark Python worker's own Python error; an error of ours stays as it is (its message names the
    place)."""
    text = full_text(error)
    if isinstance(error, (Py4JError, PySparkException)) or any(mark in text for mark in STACK_MARKS):
        found = cause_in_text(text)
        if found:
            return _short(found)
    return _short(f"{type(error).__name__}: {first_line(text)}")


def full_text(error: BaseException) -> str:
    """An error's whole text: a Py4JJavaError's str() holds its Java stack trace with every `Caused by:`."""
    try:
        return str(error)
    except Exception:  # a py4j error whose JVM is gone cannot say more than its type
        return type(error).__name__


def cause_in_text(text: str) -> str | None:
    """The root cause a Java or Python stack trace in text names: a Python worker's last error line when the text
    holds a Python traceback (what user code or oncelog raised on an executor), else the last `Caused by:` (the
    deepest Java cause), else the first Java throwable named."""
    if PYTHON_TRACEBACK in text:
        found = _python_error(text.rsplit(PYTHON_TRACEBACK, 1)[1])
        if found:
            return found
    lines = text.splitlines()
    causes = [m.group(1) for line in lines if (m := JAVA_CAUSE.match(line.strip()))]
    if causes:
        return _innermost(causes[-1])
    for line in lines:
        if JAVA_THROWABLE.match(line.strip()):
            return _innermost(line.strip().removeprefix(": "))
    return None


def _innermost(line: str) -> str:
    """The last throwable a Java error line names inline (Spark's `Job aborted due to stage failure: … most recent
    failure: Lost task …: java.io.FileNotFoundException: …` ends with the task's own error)."""
    named = list(INLINE_THROWABLE.finditer(line))
    return line[named[-1].start():] if named else line


def _python_error(traceback_text: str) -> str | None:
    """The error line ending a Python traceback's text: the first unindented `Type: message` after its frames."""
    for line in traceback_text.splitlines():
        if not line or line[0].isspace():
            continue
        if PYTHON_ERROR_LINE.match(line):
            return line.strip()
    return None


def permanent_kind(error: BaseException, cause: str) -> Permanent | None:
    """Why no retry can fix an error (None: a retry may): by its Python type where it has one, else by what its root
    cause and its text (stack frames left out) say."""
    if isinstance(error, ConfigError):
        return Permanent.CONFIGURATION
    if isinstance(error, PermissionError):
        return Permanent.CREDENTIALS
    if isinstance(error, FileNotFoundError):
        return Permanent.MISSING_PATH
    said = [line for line in full_text(error).splitlines() if not line.startswith(("\tat ", "        at "))]
    for text in (cause, *said):
        for pattern, kind in PATTERNS:
            if pattern.search(text):
                return kind
    return None


def first_line(text: str) -> str:
    """The first non-blank line of a text (a message cut before a Java stack trace)."""
    for line in text.strip().split("\n\tat ", 1)[0].splitlines():
        if line.strip():
            return line.strip()
    return ""


def _short(line: str) -> str:
    return line if len(line) <= CAUSE_CHARS else line[:CAUSE_CHARS - 1] + "…"
