"""Folder and file locations as strings: a local absolute path, or a URL of a remote file system.

A bare path or a `file:` URI is local; `hdfs://` and `webhdfs://` name HDFS, `s3a://` and `s3://` an S3 bucket.
Locations are compared and joined as strings (a thousand datasets' paths are checked without file-system calls).
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import unquote

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.DOTALL)
SUPPORTED = ("a local path (bare, or a file:///path URI), hdfs://namenode:port/path, "
             "webhdfs://namenode:http-port/path, or s3a://bucket/path (s3:// too)")


class Scheme(StrEnum):
    """The file systems oncelog reads and writes."""

    FILE = "file"
    HDFS = "hdfs"
    WEBHDFS = "webhdfs"
    S3A = "s3a"
    S3 = "s3"


@dataclass(frozen=True)
class Location:
    """A parsed location: scheme, authority (host:port or bucket; '' for local) and an absolute path."""

    scheme: Scheme
    authority: str
    path: str

    @property
    def root(self) -> str:
        """The file system this location lies on, as a URL prefix ('' for the local disk)."""
        return "" if self.scheme is Scheme.FILE else f"{self.scheme.value}://{self.authority}"

    def __str__(self) -> str:
        return self.root + self.path


def has_scheme(value: str) -> bool:
    """Whether a value is written as a URL (scheme:…), not a bare path."""
    match = _SCHEME.match(value)
    return match is not None and len(match.group(1)) > 1


def parse(value: str) -> Location:
    """A location from a config value or a recorded path; a ValueError names what is wrong.

    Local paths are made absolute against the current folder and normalized ('..' removed); remote paths are
    normalized too, so that two spellings of one folder compare equal. A remote path is taken literally (oncelog's
    own file names hold '%' escapes, which name the file, not characters to decode); a file: URI is decoded.
    """
    match = _SCHEME.match(value)
    if match is None or len(match.group(1)) == 1:  # 'C:' is a drive, not a scheme
        return Location(Scheme.FILE, "", os.path.normpath(os.path.abspath(value)))
    name, rest = match.group(1).lower(), match.group(2)
    try:
        scheme = Scheme(name)
    except ValueError:
        raise ValueError(f"scheme {name!r} is not supported; use {SUPPORTED}") from None
    if scheme is Scheme.FILE:
        return Location(scheme, "", _file_path(rest))
    if not rest.startswith("//"):
        where = "bucket" if name.startswith("s3") else "host:port"
        raise ValueError(f"{value!r} lacks '//': write {name}://{where}/path")
    authority, slash, path = rest[2:].partition("/")
    if not authority:
        raise ValueError(f"{value!r} names no {'bucket' if name.startswith('s3') else 'host'}")
    return Location(scheme, authority.lower() if scheme not in (Scheme.S3, Scheme.S3A) else authority,
                     posixpath.normpath("/" + path) if path else "/")


def _file_path(rest: str) -> str:
    """The local path of a file: URI's remainder."""
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if host not in ("", "localhost"):
            raise ValueError(f"a file: URI naming host {host!r} is not a local folder; use file:///path")
        rest = slash + path
    if not rest.startswith("/"):
        raise ValueError("a file: URI needs an absolute path (file:///data/x); write a relative folder bare")
    return os.path.normpath(unquote(rest))


def normalize(value: str) -> str:
    """The canonical string of a location (what is recorded, compared and joined)."""
    return str(parse(value))


def join(base: str, *parts: str) -> str:
    """base/part/…, for local paths and URLs alike (pathlib would fold a URL's '//')."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p.strip("/"))])


def parent(location: str) -> str:
    """The folder holding a location."""
    if is_plain_local(location):  # posixpath.dirname's answer, without its general cases (a commit asks it often)
        cut = location.rfind("/")
        return location[:cut] if cut > 0 else "/"
    parsed = parse(location)
    return parsed.root + posixpath.dirname(parsed.path)


def relative_to(location: str, base: str) -> str:
    """location's path below base ('a/b.avro'); a ValueError when it does not lie below it."""
    if is_plain_local(location) and is_plain_local(base):  # already normal: compared as they are, without parsing
        if not location.startswith(base + "/"):
            raise ValueError(f"{location} does not lie under {base}")
        return location[len(base) + 1:]
    inner, outer = parse(location), parse(base)
    prefix = outer.path.rstrip("/") + "/"
    if inner.root != outer.root or not inner.path.startswith(prefix):
        raise ValueError(f"{location} does not lie under {base}")
    return inner.path[len(prefix):]


def is_within(location: str, folder: str) -> bool:
    """Whether location is folder itself or lies below it (string comparison; no file-system call)."""
    if is_plain_local(location) and is_plain_local(folder):  # already normal: compared as they are, without parsing
        return location == folder or location.startswith(folder + "/")
    inner, outer = parse(location), parse(folder)
    return inner.root == outer.root and (inner.path == outer.path
                                         or inner.path.startswith(outer.path.rstrip("/") + "/"))


def is_plain_local(value: str) -> bool:
    """Whether a value is an absolute local path that normalizing leaves as it is (no '.', '..', '//', or '/' at the
    end)."""
    return value.startswith("/") and "/." not in value and "//" not in value and not value.endswith("/")


def hadoop_uri(location: str) -> str:
    """A location as Hadoop (and so Spark) must be given it: a local one as a file: URI, since a bare path would be
    taken on the cluster's default file system (fs.defaultFS, HDFS on most clusters)."""
    parsed = parse(location)
    return f"file://{parsed.path}" if parsed.scheme is Scheme.FILE else str(parsed)


def resolve_folder(value: str) -> str:
    """A configured folder as recorded: local ones absolute with symlinks resolved, remote ones normalized."""
    parsed = parse(value)
    return os.path.realpath(parsed.path) if parsed.scheme is Scheme.FILE else str(parsed)
