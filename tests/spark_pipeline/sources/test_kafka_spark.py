"""Spark's Kafka reader gets the same security settings as every other client: librdkafka's names translated to the
Java client's `kafka.` options, a real SASL_SSL batch read with exact offsets, a refused password named in our words,
and no secret in Spark's plans.

The Spark run is a child process (as in test_connectors.py): `spark.jars` counts only when a JVM starts, and the
session-wide Spark of tests/spark_plugin.py may already run without the connectors. That one JVM also checks, with
Kafka's own classes, that the JAAS quoting reads back the exact password and that the PEM keystore loads.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from confluent_kafka import Producer

from events.errors import ConfigError
from localservers.kafka import SecureEndpoints
from spark_pipeline.connectors import fetch_connectors
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobs import config_from_properties
from spark_pipeline.sources.kafka_spark import (
    redaction_conf,
    spark_kafka_options,
)
from spark_pipeline.sources.kafka_topic import KafkaTopicSource
from tests.kafka_plugin import create_topic

REPO = Path(__file__).resolve().parents[3]
KEY_PASSWORD = "key-pass-1"
ODD_PASSWORD = 'p"a\\ss wo\'rd;\n}'
"""A password holding every character Kafka's JAAS parser treats specially: quote, backslash, line break, `;`."""
RANGES = {0: (2, 7), 1: (0, 3)}
"""Per partition, [start, end) offsets to read."""
SPARK_DEFAULT_PATTERNS = r"(?i)url|secret|password|token|access[.]key"
"""spark.sql.redaction.options.regex and spark.redaction.regex by default: a key or value matching either is hidden."""
SCRAM = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
         "sasl.password": "s3cret"}


def spark_options_of(config: JobConfig) -> dict[str, str]:
    """The options the job's Kafka source gives Spark's reader."""
    return KafkaTopicSource(config).spark_options()


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed client certificate and its key made by openssl: PKCS#8 plain, encrypted with PBE-SHA1-3DES and
    with PBES2 (OpenSSL 3's default), and PKCS#1."""
    folder = tmp_path_factory.mktemp("client-pem")
    files = {name: folder / f"{name}.pem" for name in ("cert", "key", "key_encrypted", "key_pbes2", "key_pkcs1")}
    for command in (
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", files["key"], "-out", files["cert"],
             "-subj", "/CN=oncelog-client", "-days", "1"],
            ["pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-in", files["key"], "-out", files["key_encrypted"],
             "-passout", f"pass:{KEY_PASSWORD}"],
            ["pkcs8", "-topk8", "-in", files["key"], "-out", files["key_pbes2"], "-passout", f"pass:{KEY_PASSWORD}"],
            ["rsa", "-in", files["key"], "-traditional", "-out", files["key_pkcs1"]]):
        subprocess.run(["openssl", *map(str, command)], check=True, capture_output=True, timeout=60)
    return files


def mtls(pem: Mapping[str, Path], key: str = "key", **extra: str) -> dict[str, str]:
    """Settings of a client certificate on a TLS listener."""
    return {"security.protocol": "SSL", "ssl.ca.location": str(pem["cert"]),
            "ssl.certificate.location": str(pem["cert"]), "ssl.key.location": str(pem[key]), **extra}


def test_scram_over_tls_becomes_a_jaas_config_and_a_pem_truststore(pem: dict[str, Path]) -> None:
    options = spark_kafka_options("b1:9093,b2:9093", {**SCRAM, "ssl.ca.location": str(pem["cert"]),
                                                      "ssl.endpoint.identification.algorithm": "none"})
    assert options == {
        "kafka.bootstrap.servers": "b1:9093,b2:9093", "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="alice" password="s3cret";',
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(pem["cert"]),
        "kafka.ssl.endpoint.identification.algorithm": ""}


def test_plain_without_tls_and_tls_alone() -> None:
    plain = spark_kafka_options("b:9092", {"security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
                                           "sasl.username": "bob", "sasl.password": "pw"})
    assert plain == {"kafka.bootstrap.servers": "b:9092", "kafka.security.protocol": "SASL_PLAINTEXT",
                     "kafka.sasl.mechanism": "PLAIN",
                     "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                               'username="bob" password="pw";'}
    assert spark_kafka_options("b:9093", {"security.protocol": "SSL"}) == {
        "kafka.bootstrap.servers": "b:9093", "kafka.security.protocol": "SSL"}
    assert spark_kafka_options("b:9092", {}) == {"kafka.bootstrap.servers": "b:9092",
                                                 "kafka.security.protocol": "PLAINTEXT"}


def test_quotes_backslashes_and_line_breaks_in_a_password_are_escaped() -> None:
    jaas = spark_kafka_options("b:9092", {**SCRAM, "security.protocol": "SASL_PLAINTEXT",
                                          "sasl.password": ODD_PASSWORD})["kafka.sasl.jaas.config"]
    assert jaas.endswith(r'''password="p\"a\\ss wo'rd;\n}";''') and "\n" not in jaas
    # That Kafka's own parser reads it back as ODD_PASSWORD is checked in the real read below.


def test_a_client_certificate_becomes_a_pem_keystore_by_content(pem: dict[str, Path]) -> None:
    options = spark_kafka_options("b:9093", mtls(pem))
    assert options["kafka.ssl.keystore.type"] == "PEM"
    assert options["kafka.ssl.keystore.certificate.chain"] == pem["cert"].read_text()
    assert options["kafka.ssl.keystore.key"] == pem["key"].read_text()
    assert "kafka.ssl.key.password" not in options
    encrypted = spark_kafka_options("b:9093", mtls(pem, "key_encrypted", **{"ssl.key.password": KEY_PASSWORD}))
    assert encrypted["kafka.ssl.key.password"] == KEY_PASSWORD
    assert "ENCRYPTED PRIVATE KEY" in encrypted["kafka.ssl.keystore.key"]


@pytest.mark.parametrize(("settings", "named"), [
    ({"security.protocol": "SSL", "ssl.cipher.suites": "X", "sasl.kerberos.service.name": "k"},
     r"ssl.cipher.suites.* cannot be given to Spark's Kafka reader"),
    ({"security.protocol": "SSL", "ssl.key.location": "k.pem"}, r"ssl.key.location set without ssl.certificate"),
    ({**SCRAM, "security.protocol": "PLAINTEXT"}, r"sasl.mechanism, sasl.password, sasl.username set, but "
                                                  r"security.protocol=PLAINTEXT does not use them"),
    ({**SCRAM, "sasl.mechanism": "GSSAPI"}, r"sasl.mechanism=GSSAPI is not supported"),
    ({**SCRAM, "sasl.mechanism": "PLAIN", "sasl.mechanisms": "SCRAM-SHA-256"}, r"disagree"),
    ({key: value for key, value in SCRAM.items() if key != "sasl.password"}, r"SCRAM-SHA-512 needs sasl.password"),
    ({"security.protocol": "SASL_SSL"}, r"needs sasl.mechanism"),
    ({"security.protocol": "TLS"}, r"security.protocol='TLS' is not one of"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"}, r"ssl.ca.location=/nonexistent"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"}, r"'dns' is not 'https'"),
])
def test_a_setting_it_cannot_translate_is_named(settings: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        spark_kafka_options("b:9093", settings)


def test_a_key_the_java_client_cannot_read_or_decrypt_is_named(pem: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match=rf"ssl.key.location={pem['key_pkcs1']}: .* PKCS#8 keys only"):
        spark_kafka_options("b:9093", mtls(pem, "key_pkcs1"))
    with pytest.raises(ConfigError, match=rf"ssl.key.location={pem['key_pbes2']}: .*PBES2.* -v1 PBE-SHA1-3DES"):
        spark_kafka_options("b:9093", mtls(pem, "key_pbes2", **{"ssl.key.password": KEY_PASSWORD}))
    with pytest.raises(ConfigError, match=r"the key is encrypted: set ssl.key.password"):
        spark_kafka_options("b:9093", mtls(pem, "key_encrypted"))
    with pytest.raises(ConfigError, match=r"not encrypted: remove ssl.key.password"):
        spark_kafka_options("b:9093", mtls(pem, **{"ssl.key.password": "x"}))
    with pytest.raises(ConfigError, match=r"ssl.certificate.location=/nonexistent.pem: cannot read"):
        spark_kafka_options("b:9093", {**mtls(pem), "ssl.certificate.location": "/nonexistent.pem"})


def test_the_redaction_setting_extends_the_job_s_own_pattern() -> None:
    ours = "(?i:sasl[.]jaas[.]config|ssl[.]keystore[.]key)"
    assert redaction_conf({}) == {"spark.sql.redaction.options.regex": f"(?i)url|{ours}"}
    assert redaction_conf({"spark.sql.redaction.options.regex": "(?i)mine"}) == {
        "spark.sql.redaction.options.regex": f"(?i)mine|{ours}"}


def source_job(brokers: str, log_url: str, **extra: str) -> JobConfig:
    """A job reading a Kafka topic, with its log at `log_url`."""
    return config_from_properties({
        "job.name": "spark-secured", "source.class": "spark_pipeline.sources.kafka_topic.KafkaTopicSource",
        "writer.staging.dir": "unused/s", "writer.output.dir": "unused/o", "data.publisher.final.dir": "unused/f",
        "kafka.brokers": brokers, "topic.whitelist": "t", "oncelog.log.url": log_url, **extra})


def test_a_job_source_takes_its_own_keys_else_the_log_s_on_shared_brokers(pem: dict[str, Path]) -> None:
    log_url = "kafka://b1:9093?topic=x&security.protocol=SASL_SSL&sasl.mechanism=PLAIN&sasl.username=log"
    log_keys = {"oncelog.log.sasl.password": "log-pw", "oncelog.log.ssl.ca.location": str(pem["cert"])}
    shared = spark_options_of(source_job("b1:9093", log_url, **log_keys))
    assert shared["kafka.sasl.jaas.config"].endswith('username="log" password="log-pw";')
    assert shared["kafka.isolation.level"] == "read_committed"
    assert spark_options_of(source_job("other:9092", log_url, **log_keys))["kafka.security.protocol"] == "PLAINTEXT"
    own = spark_options_of(source_job("b1:9093", log_url, **log_keys, **{
        "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.username": "src", "kafka.sasl.password": "src-pw", "kafka.isolation.level": "read_uncommitted"}))
    assert own["kafka.sasl.jaas.config"].endswith('username="src" password="src-pw";')
    assert (own["kafka.security.protocol"], own["kafka.isolation.level"]) == ("SASL_PLAINTEXT", "read_uncommitted")
    with pytest.raises(ConfigError, match=r"job 'spark-secured', Kafka source security from the log's settings "
                                          r"\(URL, oncelog.log.\*\): Kafka setting\(s\) ssl.cipher.suites cannot .*"
                                          r"or give the source its own kafka.security.protocol"):
        spark_options_of(source_job("b1:9093", log_url + "&ssl.cipher.suites=X", **log_keys))


# Reads the exact ranges with the good options, then with a wrong password and with an untrusted CA; shows the plan
# of a view over the options (a plan that prints data source options) before and after the redaction
# setting; asks Kafka's own classes to parse a JAAS config and to load a PEM keystore. Input on stdin (it holds
# secrets), JSON out.
_CHILD = """
import io, json, sys, contextlib
from pyspark.sql import SparkSession
from spark_pipeline.sources.kafka_spark import redaction_conf, spark_kafka_failure
args = json.loads(sys.stdin.read())
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.jars", args["jars"]).getOrCreate())
topic, ranges = args["topic"], args["ranges"]
exact = {"assign": json.dumps({topic: [int(p) for p in ranges]}),
         "startingOffsets": json.dumps({topic: {p: r[0] for p, r in ranges.items()}}),
         "endingOffsets": json.dumps({topic: {p: r[1] for p, r in ranges.items()}}), "failOnDataLoss": "true"}
def read(options):
    return (spark.read.format("kafka").options(**options, **exact).load()
            .selectExpr("partition", "offset", "CAST(key AS STRING)", "CAST(value AS STRING)"))
out = {}
df = read(args["good"])
out["rows"] = [list(row) for row in df.collect()]
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    df.explain("extended")
out["explain"] = printed.getvalue()
out["refused"] = []
for options, security in args["refused"]:
    try:
        read(options).collect()
        out["refused"].append(None)
    except Exception as e:
        failure = spark_kafka_failure(e, args["bootstrap"], security)
        out["refused"].append(str(failure) if failure is not None else "unmapped: " + str(e)[-2000:])
def view_plan(options):
    quoted = ", ".join("`%s` '%s'" % (k, v.replace("\\\\", "\\\\\\\\").replace("'", "\\\\'"))
                       for k, v in options.items())
    rows = spark.sql("EXPLAIN EXTENDED CREATE TEMPORARY VIEW v USING kafka OPTIONS (%s)" % quoted).collect()
    return "\\n".join(row[0] for row in rows)
out["plan_default"] = view_plan(args["shown"])
for key, value in redaction_conf({}).items():
    spark.conf.set(key, value)
out["plan_redacted"] = view_plan(args["shown"])
jaas = spark._jvm.org.apache.kafka.common.security.JaasConfig("KafkaClient", args["odd_jaas"])
out["odd_password"] = jaas.getAppConfigurationEntry("KafkaClient")[0].getOptions().get("password")
properties = spark._jvm.java.util.Properties()
for key, value in args["keystore"].items():
    properties.setProperty(key[len("kafka."):], value)
for kind in ("key", "value"):
    properties.setProperty(kind + ".deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer")
spark._jvm.org.apache.kafka.clients.consumer.KafkaConsumer(properties).close()  # loads the keystore or raises
spark.stop()
print(json.dumps(out))
"""


@pytest.mark.kafka
@pytest.mark.spark
def test_spark_reads_a_sasl_ssl_topic_with_the_job_s_settings_and_names_a_refused_password_or_ca(
        secure_kafka: SecureEndpoints, pem: dict[str, Path]) -> None:
    jars = fetch_connectors()
    topic = create_topic(secure_kafka.plaintext_bootstrap, 2, "sparksec")
    producer = Producer({"bootstrap.servers": secure_kafka.plaintext_bootstrap})
    for i in range(20):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    bootstrap = secure_kafka.sasl_ssl_bootstrap
    security = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": secure_kafka.username, "ssl.ca.location": str(secure_kafka.ca_pem_path)}
    job = source_job(bootstrap, f"kafka://{bootstrap}?topic=x", **{
        f"oncelog.log.{k}": v for k, v in {**security, "sasl.password": secure_kafka.password}.items()})
    good = spark_options_of(job)
    wrong_password = {**security, "sasl.password": "not-the-password"}
    untrusted = {**security, "sasl.password": secure_kafka.password, "ssl.ca.location": str(pem["cert"])}
    keystore = spark_kafka_options(bootstrap, mtls(pem, "key_encrypted", **{"ssl.key.password": KEY_PASSWORD}))
    child = {"jars": ",".join(map(str, jars)), "topic": topic, "ranges": RANGES, "bootstrap": bootstrap,
             "good": good, "refused": [(spark_kafka_options(bootstrap, wrong), wrong)
                                       for wrong in (wrong_password, untrusted)],
             "shown": {**good, "kafka.ssl.keystore.key": keystore["kafka.ssl.keystore.key"]}, "keystore": keystore,
             "odd_jaas": spark_kafka_options(bootstrap, {**security, "sasl.password": ODD_PASSWORD})[
                 "kafka.sasl.jaas.config"]}
    done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(child), cwd=REPO,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, "\n".join(line for line in done.stderr.splitlines()
                                           if not line.lstrip().startswith("at "))[-3000:]  # no JVM stack frames
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # Partition p holds records p, p+2, p+4…: offset o of partition p is record 2*o + p.
    assert sorted(map(tuple, out["rows"])) == sorted((p, o, f"k{2 * o + p}", f"v{2 * o + p}")
                                                     for p, (start, end) in RANGES.items() for o in range(start, end))
    refused_password, refused_certificate = out["refused"]
    assert refused_password.startswith(f"authentication failed for sasl.username={secure_kafka.username} on "
                                       f"SASL_SSL://{bootstrap}: check sasl.password (and sasl.mechanism=SCRAM-SHA-512)"
                                       f" [org.apache.kafka.common.errors.SaslAuthenticationException: ")
    assert refused_certificate.startswith(
        f"certificate of {bootstrap} not trusted: check ssl.ca.location={pem['cert']} [")
    assert not any(secret in refused for refused in out["refused"]
                   for secret in ("not-the-password", secure_kafka.password))
    key_text = pem["key_encrypted"].read_text().splitlines()[1]
    if not re.search(SPARK_DEFAULT_PATTERNS, pem["key_encrypted"].read_text()):  # base64 may hold "url" by chance
        assert key_text in out["plan_default"], "Spark's defaults miss a PEM key: the redaction setting matters"
    for shown in (out["explain"], out["plan_redacted"]):
        assert secure_kafka.password not in shown and key_text not in shown
    assert "kafka.sasl.jaas.config -> *********(redacted)" in out["plan_redacted"]
    assert out["odd_password"] == ODD_PASSWORD
