"""On Kafka, a commit sequence's end that compaction removed (after a tombstone nothing of oncelog writes) stops
`state`, `run`, `rebuild` and `serve`, and `verify` names it: a run plans a dataset only once its last sequence ended,
so a sequence still pending when the next one of its dataset was planned has lost its end. Before this, `state` showed
it as pending and `run` refused the dataset as unsettled ("recover"), while only `verify` said the log was damaged."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

import oncelog
from events.codec import Record
from events.commit import CommitSequenceCompleted, CommitSequencePlanned
from events.log import EventLog
from events.log.kafka.store import COMPACTION_CONFIGS
from projections.state import DamagedHistoryError
from replay.live.server import open_view
from replay.live.settings import LiveSettings
from replay.live.view import Phase
from tests.events.log.kafka.test_log_stability import kafka_log
from tests.events.log.test_missing_records import oncelog_cli
from tests.fault.pipeline_checks import write_job
from tests.replay.test_verify_checks import published

COMPACTION_WAIT_S = 90.0
"""The broker's cleaner looks for work every 15 s (log.cleaner.backoff.ms); then it cleans in milliseconds."""


def set_topic_configs(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """Set some of a topic's configs (the others stay), as `kafka-configs --alter --add-config` does."""
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in configs.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def compact_away(log: EventLog, bootstrap: str, key: bytes) -> None:
    """Tombstone `key` and have the broker's cleaner remove its record, as it does an hour later with oncelog's
    settings: segments roll at once and any dirt is worth cleaning, for as long as it takes; then the settings
    are oncelog's again."""
    set_topic_configs(bootstrap, log.topic, {"segment.ms": "100", "min.cleanable.dirty.ratio": "0.001"})
    with log.writer("operator") as writer:
        for _ in range(2):  # the tombstone, then a roll that closes its segment (the active one is never cleaned)
            time.sleep(0.3)
            writer.append_records([Record(0, key, None, int(time.time() * 1000))])
    deadline = time.monotonic() + COMPACTION_WAIT_S
    while any(r.key == key and r.value is not None for r in log.read_records()):
        assert time.monotonic() < deadline, f"the broker did not compact {key!r} away in {COMPACTION_WAIT_S} s"
        time.sleep(1)
    set_topic_configs(bootstrap, log.topic, {k: COMPACTION_CONFIGS[k] for k in ("segment.ms",
                                                                                 "min.cleanable.dirty.ratio")})


@pytest.mark.kafka
def test_a_sequence_end_compacted_away_stops_every_fold_and_verify_names_it(
        kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = kafka_log(kafka_bootstrap, partitions=1)
    log.append([*published("run-1", 0, 100, t=0), *published("run-2", 100, 200, t=10)])
    shown = oncelog_cli("state", "--log", log.url, "--json")
    assert shown.returncode == 0 and '"pending_sequences": []' in shown.stdout, shown.stderr
    (end,) = [r for r in log.read_records() if r.value is not None and r.key == CommitSequenceCompleted(
        job="MyJob", run_id="run-1", dataset_urn="MyTopic", sequence_id="run-1").key.encode()]
    planned = {e.event.sequence_id: e.offset for e in log.read() if isinstance(e.event, CommitSequencePlanned)}

    compact_away(log, kafka_bootstrap, end.key)

    refusal = (f"commit sequence 'run-1' of 'MyTopic' (MyJob), planned at [0]@{planned['run-1']}, has no completion "
               f"or abandonment in the log, yet sequence 'run-2' of its dataset was planned after it at "
               f"[0]@{planned['run-2']}")
    state = oncelog_cli("state", "--log", log.url)
    said = " ".join(state.stderr.split())
    assert state.returncode == 2 and state.stdout == "", state.stdout
    assert refusal in said and "its end is gone from the log" in said and "Traceback" not in said, said

    checked = oncelog_cli("verify", "--log", log.url)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "sequence-end-missing" in checked.stdout and "'run-1'" in checked.stdout, checked.stdout

    before = log.end_offsets()
    ran = oncelog_cli("run", str(write_job(tmp_path, log.url)), cwd=tmp_path)
    said = " ".join((ran.stdout + ran.stderr).split())
    assert ran.returncode != 0 and refusal in said, said
    assert "Starting Spark" not in said and "Traceback" not in said, said
    assert log.end_offsets() == before, "the refused run appended nothing"

    with pytest.raises(DamagedHistoryError, match="'run-1'"):
        oncelog.rebuild(log)
    view, server = open_view(LiveSettings(log.url, port=0, snapshot_every=0))
    try:
        with caplog.at_level(logging.ERROR, logger="replay.live.view"):
            view.run(threading.Event())
    finally:
        server.server_close()
    assert view.phase is Phase.FAILED and "'run-1'" in (view.error or "")
    log.close()
