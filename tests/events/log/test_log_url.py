"""Opening a log by URL: clear errors that name the wrong part."""

from __future__ import annotations

from pathlib import Path

import pytest

from events.errors import ConfigError
from events.log import open_log
from events.log.sqlite import SqliteLog


def test_sqlite_urls_relative_and_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_log("sqlite:///data/events.db")
    assert isinstance(relative, SqliteLog) and relative.path == Path("data/events.db")
    absolute = open_log(f"sqlite:///{tmp_path}/abs.db?partitions=2&topic=t")
    assert isinstance(absolute, SqliteLog) and absolute.path == tmp_path / "abs.db"
    absolute.ensure_topic()
    assert absolute.partitions == 2 and absolute.topic == "t"
    relative.close()
    absolute.close()


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("postgres://x", "unknown scheme 'postgres'"),
        ("sqlite://host/x.db", "sqlite:///relative"),
        ("kafka://", "kafka://host:port"),
        ("sqlite:///x.db?partitions=zero", "partitions='zero'"),
        ("sqlite:///x.db?partitions=0", "partitions=0"),
        ("sqlite:///x.db?colour=blue", "colour"),
        ("sqlite:///x.db?synchronous=sometimes", "synchronous='sometimes'"),
    ],
)
def test_bad_urls_are_errors_naming_the_setting(url: str, named: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        open_log(url)
    assert named in str(caught.value)


def test_an_unknown_librdkafka_setting_is_named() -> None:
    with pytest.raises(ConfigError, match="no.such.property"):
        open_log("kafka://127.0.0.1:1?no.such.property=1&read_timeout_s=1")
