"""`verify --publish-dir` finds each published file with the size its sequence recorded, and with `--content` the
SHA-256 too, on local disk, HDFS and S3 (real files, real servers); `--sample N` reads N files chosen by a printed
seed; in a pipe the output is plain lines."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from events.commit import CommitSequenceCompleted, CommitSequencePlanned, CommitStepApplied, FsRenameStep
from events.log import EventLog, open_log
from events.model import Event, SequenceFields
from filesystems import urls
from filesystems.base import FileSystem
from filesystems.router import FileSystems
from localservers.s3 import LocalS3
from oncelog.cli import app
from tests.factories import at

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@dataclass(frozen=True)
class Store:
    """A fresh publish folder on one store, and the file system serving it."""

    root: str
    fs: FileSystem
    plain_put: Callable[[str, bytes], None]
    """Replace a file as other tools do (on S3: an upload that asks for no SHA-256 checksum)."""


@pytest.fixture(params=["local", "hdfs", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A publish folder on the local disk, then on the session's HDFS, then on its S3 server."""
    root = (str(tmp_path / "published") if request.param == "local"
            else urls.join(request.getfixturevalue(f"{request.param}_folder"), "published"))
    fs = FileSystems.of({})  # after the server's fixture: it reads the $HADOOP_CONF_DIR that fixture sets
    if request.param != "s3":
        return Store(root, fs, lambda path, data: rewrite(fs, path, data))
    server: LocalS3 = request.getfixturevalue("s3")
    return Store(root, fs, lambda path, data: server.client().put_object(
        Bucket=urls.parse(path).authority, Key=urls.parse(path).path.lstrip("/"), Body=data))


@pytest.fixture
def log(tmp_path: Path) -> EventLog:
    log = open_log(f"sqlite:///{tmp_path / 'events.db'}?partitions=3")
    log.ensure_topic()
    return log


def publish(log: EventLog, fs: FileSystem, root: str, sequence_id: str, files: dict[str, bytes]) -> None:
    """Write the files under root and record a completed sequence that published them (size and SHA-256 each)."""
    fields: SequenceFields = {"job": "MyJob", "run_id": sequence_id, "dataset_urn": "MyTopic",
                              "sequence_id": sequence_id}
    steps = []
    for name, data in files.items():
        dst = urls.join(root, name)
        writer = fs.open_write(dst)
        writer.write(data)
        writer.close()
        steps.append(FsRenameStep(src=f"/task-output/{sequence_id}/{name}", dst=dst, size=len(data),
                                  checksum=hashlib.sha256(data).hexdigest()))
    events: list[Event] = [CommitSequencePlanned(**fields, steps=tuple(steps), emitted_at=at(0))]
    events += [CommitStepApplied(**fields, step_index=i, outcome="executed", emitted_at=at(1))
               for i in range(len(steps))]
    log.append([*events, CommitSequenceCompleted(**fields, emitted_at=at(2))])


def read(fs: FileSystem, path: str) -> bytes:
    with fs.open_read(path) as f:
        return f.read()


def flip(store: Store, name: str, at_byte: int, plain_put: bool = False) -> tuple[str, str]:
    """Flip one bit of a published file, replacing it through our writer (on S3 the store then keeps the new
    SHA-256) or `plain_put` as other tools do (S3 keeps none: verify reads it); (the path, its new sha256)."""
    path = urls.join(store.root, name)
    data = bytearray(read(store.fs, path))
    data[at_byte] ^= 0x01
    (store.plain_put if plain_put else lambda p, d: rewrite(store.fs, p, d))(path, bytes(data))
    return path, hashlib.sha256(data).hexdigest()


def rewrite(fs: FileSystem, path: str, data: bytes) -> None:
    writer = fs.open_write(path)
    writer.write(data)
    writer.close()


def verify_json(log: EventLog, *args: str, expect: int) -> dict[str, Any]:
    result = runner.invoke(app, ["verify", "--log", log.url, "--json", *args])
    assert result.exit_code == expect, result.stdout + result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def of_kind(document: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [v for v in document["violations"] if v["kind"] == kind]


def test_a_flipped_byte_is_found_by_content_and_a_truncated_file_by_size(store: Store, log: EventLog) -> None:
    """Issue 23, item 1: a byte flipped in a published file passed `verify --publish-dir` (exit 0)."""
    files = {f"part-{i}.avro": bytes(range(256)) * (i + 1) for i in range(3)}
    publish(log, store.fs, store.root, "seq-1", {n: files[n] for n in ("part-0.avro", "part-1.avro")})
    publish(log, store.fs, store.root, "seq-2", {"part-2.avro": files["part-2.avro"], "day=2/part-3.avro": b"x" * 99})
    clean = verify_json(log, "--publish-dir", store.root, "--content", expect=0)
    assert clean["files"] == {"sizes_checked": 4, "contents_checked": 4, "sampled_from": None, "seed": None}

    flipped, found = flip(store, "part-0.avro", 100)
    also, found_also = flip(store, "part-1.avro", 300, plain_put=True)
    sized = verify_json(log, "--publish-dir", store.root, expect=0)  # the same size: only content tells
    assert sized["files"]["sizes_checked"] == 4 and sized["files"]["contents_checked"] is None
    content = verify_json(log, "--publish-dir", store.root, "--content", expect=1)
    differs = of_kind(content, "content-differs")
    assert [v["message"].split(",")[0] for v in differs] == [urls.resolve_folder(p) for p in (flipped, also)]
    recorded = hashlib.sha256(files["part-0.avro"]).hexdigest()
    assert "sequence 'seq-1' of 'MyTopic' (MyJob)" in differs[0]["message"]
    assert f"has sha256 {found}; the sequence recorded {recorded}" in differs[0]["message"]
    assert found_also in differs[1]["message"] and len(content["violations"]) == 2
    planned = next(logged for logged in log.read() if isinstance(logged.event, CommitSequencePlanned)
                   and logged.event.sequence_id == "seq-1")
    assert differs[0]["position"] == f"{planned.topic}[{planned.partition}]@{planned.offset}"

    truncated = urls.join(store.root, "part-2.avro")
    rewrite(store.fs, truncated, files["part-2.avro"][:500])
    store.fs.delete(urls.join(store.root, "day=2/part-3.avro"))
    plain = runner.invoke(app, ["verify", "--log", log.url, "--publish-dir", store.root])
    assert plain.exit_code == 1, plain.stdout + plain.stderr
    assert (f"✗ size-differs: {urls.resolve_folder(truncated)}, published by sequence 'seq-2' of 'MyTopic' (MyJob), "
            f"holds 500 bytes; the sequence recorded 768") in plain.stdout
    assert re.search(r"✗ missing-file: \S*day=2/part-3\.avro, published by sequence 'seq-2' .*, is gone",
                     plain.stdout)
    assert "content-differs" not in plain.stdout and "2 violation(s)" in plain.stdout


def test_a_sample_reads_the_stated_number_of_files_chosen_by_a_printed_seed(log: EventLog, tmp_path: Path) -> None:
    fs, root = FileSystems.of({}), str(tmp_path / "published")
    names = [f"part-{i:02}.avro" for i in range(20)]
    publish(log, fs, root, "seq-1", {name: name.encode() * 10 for name in names})
    for name in names:
        flip(Store(root, fs, lambda path, data: rewrite(fs, path, data)), name, 0)

    sampled = verify_json(log, "--publish-dir", root, "--sample", "5", "--seed", "7", expect=1)
    assert sampled["files"] == {"sizes_checked": 20, "contents_checked": 5, "sampled_from": 20, "seed": 7}
    chosen = {v["message"].split(",")[0] for v in of_kind(sampled, "content-differs")}
    assert len(chosen) == 5 == len(sampled["violations"])

    piped = subprocess.run([sys.executable, "-m", "oncelog", "verify", "--log", log.url, "--publish-dir", root,
                            "--sample", "5"], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert piped.returncode == 1, piped.stdout + piped.stderr
    assert "\x1b" not in piped.stdout + piped.stderr and piped.stderr == ""
    lines = piped.stdout.splitlines()
    assert sum(line.startswith("✗ content-differs: ") for line in lines) == 5
    [said] = [line for line in lines if line.startswith("• files: ")]
    assert "sampled 5 of them at random" in said
    seed = re.search(r"--sample 5 --seed (\d+) repeats this choice", said)
    assert seed is not None
    again = verify_json(log, "--publish-dir", root, "--sample", "5", "--seed", seed.group(1), expect=1)
    assert {v["message"].split(",")[0] + "," for v in of_kind(again, "content-differs")} == {
        line.removeprefix("✗ content-differs: ").split(",")[0] + "," for line in lines if "content-differs" in line}

    for wrong in (["--content"], ["--publish-dir", root, "--seed", "3"]):
        refused = runner.invoke(app, ["verify", "--log", log.url, *wrong])
        assert refused.exit_code == 2 and "add --" in refused.stderr, refused.stderr
