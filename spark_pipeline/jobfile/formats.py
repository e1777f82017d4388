"""Job files to flat properties: YAML, Java `.properties` / `.pull` / `.job` and HOCON `.conf` parsers, and `${...}`
substitution.

Every parser returns what it could read plus a list of `Problem`s (never raises on bad content), so the
loader can report every problem of every file at once. Values are always strings, as in Gobblin's `State`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pyhocon import ConfigTree
from pyhocon.config_parser import ConfigParser
from pyhocon.exceptions import ConfigException, ConfigMissingException
from pyparsing import ParseBaseException, lineno
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

YAML_SUFFIXES = (".yaml", ".yml")
PROPERTIES_SUFFIXES = (".properties", ".pull", ".job")
HOCON_SUFFIXES = (".conf",)
JOB_FILE_SUFFIXES = YAML_SUFFIXES + PROPERTIES_SUFFIXES + HOCON_SUFFIXES

_WHITESPACE = " \t\f"  # java.util.Properties whitespace: space, tab, form feed (not newline)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_REFERENCE = re.compile(r"\$\$\{|\$\{([^{}]*)\}")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a job file, located (file, line when known) and naming the key when there is one."""

    file: str
    message: str
    line: int | None = None
    key: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class Entry:
    """A raw value as written in a file and the line it starts on (None when the value did not come from a file)."""

    value: str
    line: int | None = None


@dataclass
class ParsedFile:
    """The flat key → entry map read from one file, with the problems met while reading it."""

    file: str
    entries: dict[str, Entry] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    readable: bool = True  # False: the file as a whole could not be read, so its keys are not checked

    def fail(self, message: str, line: int | None = None) -> None:
        """Record a problem that makes the whole file unreadable."""
        self.problems.append(Problem(self.file, message, line))
        self.readable = False

    def add(self, key: str, value: str, line: int | None) -> None:
        """Record a key; a key given twice is a problem naming both lines (silent last-wins hides typos)."""
        if key in self.entries:
            first = self.entries[key].line
            where = f" (first set on line {first})" if first else ""
            self.problems.append(Problem(self.file, f"key {key!r} is set more than once{where}", line, key))
            return
        self.entries[key] = Entry(value, line)

    def located(self, key: str | None, message: str) -> Problem:
        """A problem about `key` (None: the job as a whole), on the line the key is set when there is one."""
        entry = self.entries.get(key) if key else None
        return Problem(self.file, message, entry.line if entry else None, key)


def parse_job_file(path: Path, environ: Mapping[str, str] | None = None) -> ParsedFile:
    """Read a job file, choosing the syntax by extension; an unknown extension or unreadable file is a problem.

    `environ` serves HOCON's `${NAME}` fallback to environment variables (none when not given); the other syntaxes
    substitute later (see `substitute`).
    """
    parsed = ParsedFile(str(path))
    suffix = path.suffix.lower()
    if suffix not in JOB_FILE_SUFFIXES:
        expected = ", ".join(JOB_FILE_SUFFIXES)
        parsed.fail(f"unknown job file extension {path.suffix!r}; expected {expected}")
        return parsed
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as e:
        parsed.fail(f"cannot read the file: {e.strerror or e}")
        return parsed
    except UnicodeDecodeError as e:
        parsed.fail(f"not UTF-8 text (byte {e.start}: {e.reason})")
        return parsed
    if suffix in YAML_SUFFIXES:
        parse_yaml(text, parsed)
    elif suffix in HOCON_SUFFIXES:
        parse_hocon(text, parsed, path.parent, environ or {})
    else:
        parse_properties(text, parsed)
    return parsed


# --- java.util.Properties ---------------------------------------------------------------------------------------


def parse_properties(text: str, parsed: ParsedFile) -> None:
    """Parse Java properties syntax into `parsed`, following java.util.Properties.load line by line."""
    lines = _LINE_BREAK.split(text)
    index = 0
    while index < len(lines):
        number = index + 1
        logical = lines[index].lstrip(_WHITESPACE)
        index += 1
        if not logical or logical[0] in "#!":
            continue  # blank or comment line; a comment line is never continued
        while _continues(logical):
            logical = logical[:-1]
            if not logical or index >= len(lines):
                break  # as Java: a line of just `\` is empty, and the next line starts afresh (may be a comment)
            logical += lines[index].lstrip(_WHITESPACE)
            index += 1
        if logical:
            _add_property(logical, number, parsed)


def _continues(line: str) -> bool:
    """Whether a natural line ends with an odd number of backslashes (then the next line continues it)."""
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _add_property(logical: str, number: int, parsed: ParsedFile) -> None:
    """Split one logical line into key and value, unescape both, and record them."""
    raw_key, raw_value = split_key_value(logical)
    try:
        key = unescape(raw_key)
        value = unescape(raw_value)
    except ValueError as e:
        parsed.problems.append(Problem(parsed.file, f"{e} in {raw_key!r}", number, raw_key))
        return
    if not key:
        parsed.problems.append(Problem(parsed.file, f"a line has a value but no key: {logical!r}", number))
        return
    parsed.add(key, value, number)


def split_key_value(logical: str) -> tuple[str, str]:
    """The raw (still escaped) key and value of a logical line: `k=v`, `k: v`, `k v`, as java.util.Properties."""
    pos, length, separated = 0, len(logical), False
    while pos < length:
        char = logical[pos]
        if char == "\\":
            pos += 2
            continue
        if char in "=:":
            separated = True
            break
        if char in _WHITESPACE:
            break
        pos += 1
    key_end = min(pos, length)
    pos = key_end + 1 if separated else key_end
    while pos < length and logical[pos] in _WHITESPACE:
        pos += 1
    if not separated and pos < length and logical[pos] in "=:":
        pos += 1
        while pos < length and logical[pos] in _WHITESPACE:
            pos += 1
    return logical[:key_end], logical[pos:]


def unescape(raw: str) -> str:
    """Undo Java properties escapes: `\\uXXXX`, `\\t \\n \\r \\f`, and `\\x` meaning x; bad `\\u` is a ValueError."""
    out: list[str] = []
    pos, length = 0, len(raw)
    while pos < length:
        char = raw[pos]
        if char != "\\" or pos + 1 >= length:
            out.append(char if char != "\\" else "")
            pos += 1
            continue
        nxt = raw[pos + 1]
        if nxt == "u":
            digits = raw[pos + 2 : pos + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"malformed \\uXXXX escape '\\u{digits}'")
            out.append(chr(int(digits, 16)))
            pos += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        pos += 2
    return "".join(out)


# --- YAML -------------------------------------------------------------------------------------------------------


def parse_yaml(text: str, parsed: ParsedFile) -> None:
    """Parse YAML into flat keys: nested maps join with dots, lists of scalars become comma-separated strings."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return
        if not isinstance(root, MappingNode):
            line = root.start_mark.line + 1
            parsed.fail("the top level must be a mapping of keys to values", line)
            return
        _walk_mapping(loader, root, "", parsed, ())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(e, "problem", None) or str(e)
        parsed.fail(f"invalid YAML: {reason}", line)
    finally:
        loader.dispose()


def _walk_mapping(loader: yaml.SafeLoader, node: MappingNode, prefix: str, parsed: ParsedFile,
                  seen: tuple[int, ...]) -> None:
    """Flatten one mapping node under `prefix`, recursing into nested mappings (recursive aliases are a problem)."""
    if id(node) in seen:
        parsed.problems.append(Problem(parsed.file, f"recursive alias under {prefix!r}", node.start_mark.line + 1))
        return
    loader.flatten_mapping(node)  # resolves `<<: *anchor` merge keys
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        if not isinstance(key_node, ScalarNode) or not str(key_node.value).strip():
            parsed.problems.append(Problem(parsed.file, "a key must be a non-empty scalar", line))
            continue
        key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
        if isinstance(value_node, MappingNode):
            _walk_mapping(loader, value_node, key, parsed, (*seen, id(node)))
        elif isinstance(value_node, SequenceNode):
            _add_sequence(loader, key, value_node, line, parsed)
        else:
            parsed.add(key, _scalar_text(loader, value_node), line)


def _add_sequence(loader: yaml.SafeLoader, key: str, node: SequenceNode, line: int, parsed: ParsedFile) -> None:
    """A YAML list for a list-valued key: scalars only, none containing a comma (the list separator)."""
    items: list[str] = []
    for item in node.value:
        if not isinstance(item, ScalarNode):
            parsed.problems.append(Problem(parsed.file, f"{key!r}: list items must be plain values", line, key))
            return
        text = _scalar_text(loader, item)
        if "," in text:
            message = f"{key!r}: list item {text!r} contains a comma, the list separator"
            parsed.problems.append(Problem(parsed.file, message, item.start_mark.line + 1, key))
            return
        items.append(text)
    parsed.add(key, ",".join(items), line)


def _scalar_text(loader: yaml.SafeLoader, node: Node) -> str:
    """A YAML scalar as the string a properties file would hold: true/false, numbers as written, null as empty."""
    value = loader.construct_object(node, deep=True)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, dt.date):
        return str(node.value)  # a date or timestamp stays as written
    return str(value)


# --- HOCON (Gobblin's .conf job files, Typesafe Config) ----------------------------------------------------------

_HOCON_LINE = re.compile(r"\(line: ?(\d+)")


def parse_hocon(text: str, parsed: ParsedFile, basedir: Path, environ: Mapping[str, str]) -> None:
    """Parse HOCON into flat dotted keys, resolving its substitutions as Typesafe Config does (Gobblin's `.conf`).

    `${path}` names another key of the file, else an environment variable (from `environ`); `${?path}` is optional.
    Values come out as the strings a properties file would hold, `${` escaped so the later `substitute` keeps them.
    """
    try:
        tree = ConfigParser.parse(text, basedir=str(basedir), resolve=False)
        added = _environment_overlay(tree, parsed, environ)
        if not parsed.readable:
            return
        ConfigParser.resolve_substitutions(tree)
        for variable in added:
            tree.pop(variable)
    except ParseBaseException as e:
        reason = e.msg if len(e.msg) <= 80 else f"cannot parse {e.line.strip()!r} (column {e.col})"  # no grammar dump
        parsed.fail(f"invalid HOCON: {reason}", e.lineno)
        return
    except OSError as e:  # a required include is missing or unreadable
        parsed.fail(f"invalid HOCON: cannot include {e.filename or 'a file'}: {e.strerror or e}")
        return
    except ConfigException as e:  # unresolvable substitution, cycle
        message = str(e.args[0] if e.args else e)
        match = _HOCON_LINE.search(message)
        parsed.fail(f"invalid HOCON: {message}", int(match.group(1)) if match else None)
        return
    _flatten_hocon(tree, "", text.splitlines(), parsed)


def _environment_overlay(tree: ConfigTree, parsed: ParsedFile, environ: Mapping[str, str]) -> list[str]:
    """Put each variable a substitution names that the file lacks but `environ` has (removed after resolving).

    A required variable neither in the file nor in `environ` is a problem naming its line; pyhocon would fall back
    to the process environment instead of the one the loader was given.
    """
    added: list[str] = []
    for substitution in ConfigParser._find_substitutions(tree):  # pyhocon has no public walk of them
        variable = substitution.variable
        try:
            tree.get(variable)
            continue
        except ConfigMissingException:
            pass
        if variable in environ:
            tree.put(variable, environ[variable])
            added.append(variable)
        elif not substitution.optional:
            line = lineno(substitution.loc, substitution.instring)
            parsed.fail(f"invalid HOCON: ${{{variable}}} names no key of this file and no environment variable", line)
    return added


def _flatten_hocon(tree: ConfigTree, prefix: str, lines: list[str], parsed: ParsedFile) -> None:
    """Nested objects join with dots (quoted key parts unquoted); lists of plain values become comma-separated."""
    for raw_key, value in tree.items():
        key = f"{prefix}{_unquote(raw_key)}"
        if isinstance(value, ConfigTree):
            _flatten_hocon(value, f"{key}.", lines, parsed)
            continue
        items = [_hocon_text(item) for item in value] if isinstance(value, list) else [_hocon_text(value)]
        if isinstance(value, list) and any(item is None or "," in item for item in items):
            message = f"{key!r}: list items must be plain values without commas (the list separator)"
            parsed.problems.append(Problem(parsed.file, message, _hocon_line(lines, key), key))
            continue
        parsed.add(key, ",".join(item or "" for item in items), _hocon_line(lines, key))


def _unquote(key: str) -> str:
    """A HOCON key part as written without its quotes (`"a.b"` → `a.b`)."""
    return key[1:-1] if len(key) >= 2 and key[0] == key[-1] == '"' else key


def _hocon_text(value: Any) -> str | None:
    """A resolved HOCON scalar as a properties string (`${` escaped as `$${`); None for an object or a list."""
    if isinstance(value, ConfigTree | list):
        return None
    if value is None or type(value).__name__ == "NoneValue":
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).replace("${", "$${")


def _hocon_line(lines: list[str], key: str) -> int | None:
    """The line that sets `key`, found by walking its path parts down the file (pyhocon keeps no positions)."""
    remaining, number, column = key, 0, 0
    while remaining:
        found = _next_key(lines, remaining, number, column)
        if found is None:
            return None
        written, number, column = found
        remaining = remaining[len(written) + 1:]
    return number + 1


def _next_key(lines: list[str], remaining: str, number: int, column: int) -> tuple[str, int, int] | None:
    """From line `number`, column `column` on: the first key written that `remaining` starts with, and where."""
    for index in range(number, len(lines)):
        offset = column if index == number else 0
        text = lines[index][offset:]
        if text.lstrip().startswith(("#", "//")):
            continue
        for match in _HOCON_KEY.finditer(text):
            written = match.group(1).replace('"', "")
            if remaining == written or remaining.startswith(f"{written}."):
                return written, index, offset + match.end()
    return None


_HOCON_KEY = re.compile(r'(?:^|[{,])\s*((?:"[^"]*"|[^\s=:{}\[\],"#])+)\s*(?:\+?=|[:{])')  # a key and its separator


# --- ${...} substitution ----------------------------------------------------------------------------------------


def substitute(parsed: ParsedFile, environ: Mapping[str, str]) -> dict[str, str]:
    """Resolve `${key}` and `${env:NAME}` in every value (`$${` is a literal `${`); problems name key and file."""
    resolver = _Resolver(parsed, environ)
    for key in parsed.entries:
        resolver.resolve(key, ())
    return {key: resolver.done[key] for key in parsed.entries if key in resolver.done}


class _Resolver:
    """Depth-first resolution with memoisation; each undefined reference or cycle is reported once."""

    def __init__(self, parsed: ParsedFile, environ: Mapping[str, str]) -> None:
        self.parsed = parsed
        self.environ = environ
        self.done: dict[str, str] = {}
        self.failed: set[str] = set()

    def resolve(self, key: str, stack: tuple[str, ...]) -> str | None:
        """The final value of `key`, or None when it (or something it references) cannot be resolved."""
        if key in self.done:
            return self.done[key]
        if key in self.failed:
            return None
        if key in stack:
            cycle = " -> ".join((*stack[stack.index(key):], key))
            self._problem(stack[-1], f"circular reference: {cycle}")
            self.failed.update(stack[stack.index(key):])
            return None
        value = self._expand(key, (*stack, key))
        if value is None:
            self.failed.add(key)
        else:
            self.done[key] = value
        return value

    def _expand(self, key: str, stack: tuple[str, ...]) -> str | None:
        """Replace each reference in the raw value of `key`."""
        raw = self.parsed.entries[key].value
        out: list[str] = []
        last, ok = 0, True
        for match in _REFERENCE.finditer(raw):
            out.append(raw[last : match.start()])
            last = match.end()
            if match.group(0) == "$${":
                out.append("${")
                continue
            value = self._reference(key, match.group(1).strip(), stack)
            ok = ok and value is not None
            out.append(value or "")
        out.append(raw[last:])
        return "".join(out) if ok else None

    def _reference(self, key: str, name: str, stack: tuple[str, ...]) -> str | None:
        """The value one `${name}` stands for: an environment variable or another key of the same file."""
        if name.startswith("env:"):
            variable = name[4:]
            if variable not in self.environ:
                self._problem(key, f"references ${{{name}}} but environment variable {variable!r} is not set")
                return None
            return self.environ[variable]
        if not name:
            self._problem(key, "has an empty reference ${}")
            return None
        if name not in self.parsed.entries:
            self._problem(key, f"references ${{{name}}} but no key {name!r} is defined in this file")
            return None
        return self.resolve(name, stack)

    def _problem(self, key: str, message: str) -> None:
        """Record a substitution problem on `key`."""
        line = self.parsed.entries[key].line
        self.parsed.problems.append(Problem(self.parsed.file, f"{key!r} {message}", line, key))
