"""Spark's Kafka and Avro connectors and Hadoop's S3A file system, which pyspark does not ship, resolved by Maven
once into the user's cache.

:func:`fetch_connectors` resolves ``spark-sql-kafka-0-10`` (with its token provider, ``kafka-clients`` and
``commons-pool2``), ``spark-avro`` and ``hadoop-aws`` (with the AWS SDK modules S3A uses) from Maven Central into
``<cache>/spark-connectors-<label>/libs``
(atomically, see :mod:`localservers.maven`) and records which jars it got; :func:`connector_jars` then reads the
cache only, never the network, and names any jar that is missing or damaged together with the command that fetches
it (``oncelog spark jars``). Jars whose artifact Spark already ships are left out: Spark's own copy wins.
:func:`with_connectors` puts them in ``spark.jars`` of every session oncelog starts, unless spark-submit or the
job already gives them.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path

from events.errors import OncelogError
from localservers.maven import MARKER, resolve_jars
from localservers.tools import default_cache_dir

SPARK_MAJOR = 4
"""The Spark line the connectors are built for (Scala 2.13): another line's JVM classes would not link."""
FETCH_COMMAND = "oncelog spark jars"
MANIFEST = "jars.txt"
"""Beside `libs/`: the jar names Maven resolved, one a line, so that a jar deleted later is named, not missed."""

# Package data (pyproject: spark_pipeline = ["connectors/*.xml"]).
_POM = Path(__file__).with_name("connectors") / "pom.xml"
_VERSION_SUFFIX = re.compile(r"-\d+(?:\.\d+)+[\w.\-]*\.jar$")  # the first "-1.2…" starts it: not "-0-10_2.13"
_UNRESOLVED = re.compile(r"(?:find|transfer|resolve) artifact ([\w.\-]+:[\w.\-]+:[\w.\-:]+)")


JARS, PACKAGES = "spark.jars", "spark.jars.packages"


class Connector(Enum):
    """A connector oncelog puts on Spark's classpath, by the artifact id (Scala suffix left out) that names it."""

    KAFKA = "spark-sql-kafka-0-10"
    AVRO = "spark-avro"
    S3 = "hadoop-aws"
    """Hadoop's S3A file system: Spark's writers reach `s3a://` (and `s3://`) folders through it."""

    @classmethod
    def of_jar(cls, jar_name: str) -> Connector:
        """The connector a resolved jar belongs to: spark-avro's own jar, the Kafka connector's (its token provider,
        kafka-clients and commons-pool2 come with it), else hadoop-aws's (the AWS SDK modules come with it)."""
        artifact = artifact_of(jar_name)
        if artifact.startswith(f"{cls.AVRO.value}_"):
            return cls.AVRO
        if artifact in KAFKA_ARTIFACTS or artifact.startswith(KAFKA_SCALA_ARTIFACTS):
            return cls.KAFKA
        return cls.S3


KAFKA_ARTIFACTS = frozenset({"kafka-clients", "commons-pool2"})
"""The Kafka connector's Java dependencies in the pom's resolution (the rest of its tree is Spark's own)."""
KAFKA_SCALA_ARTIFACTS = ("spark-sql-kafka-0-10_", "spark-token-provider-kafka-0-10_")


class SparkConnectorError(OncelogError):
    """Spark's connector jars are missing, damaged or could not be resolved; names the jar and how to fetch it."""


@dataclass(frozen=True)
class ConnectorVersions:
    """The versions of Spark's Kafka connector (with its token provider), of spark-avro and of hadoop-aws, resolved
    together."""

    kafka: str
    avro: str
    hadoop_aws: str = "3.5.0"
    """The Hadoop client's version pyspark bundles (hadoop-client-api): S3A's classes link against it."""

    @property
    def label(self) -> str:
        """``kafka-4.2.0-avro-4.1.1-hadoop-aws-3.5.0``: names the cache folder, so other versions never reuse these
        jars."""
        return f"kafka-{self.kafka}-avro-{self.avro}-hadoop-aws-{self.hadoop_aws}"


CONNECTORS = ConnectorVersions(kafka="4.2.0", avro="4.1.1", hadoop_aws="3.5.0")
"""Maven Central has no 4.3.0 connectors for pyspark 4.3.0. Kafka 4.2.0: 4.1.1's streaming source calls a constructor
Spark 4.3 lacks (NoSuchMethodError). spark-avro 4.1.1: the newest there is (no 4.2.x). hadoop-aws 3.5.0: the Hadoop
client pyspark 4.3.0 bundles. All tested on pyspark 4.3.0."""


def version_dir(cache_dir: Path | None = None, versions: ConnectorVersions = CONNECTORS) -> Path:
    """The cache folder of one pair of connector versions: ``<cache>/spark-connectors-<label>``."""
    return (cache_dir or default_cache_dir()) / f"spark-connectors-{versions.label}"


def fetch_connectors(cache_dir: Path | None = None, versions: ConnectorVersions = CONNECTORS) -> tuple[Path, ...]:
    """The connector jars, resolved by Maven first where the cache lacks them or holds a damaged copy."""
    folder = version_dir(cache_dir, versions)
    try:
        return connector_jars(cache_dir, versions)
    except SparkConnectorError:
        if (folder / "libs").exists():  # a damaged copy: resolve it whole again
            shutil.rmtree(folder / "libs")
    try:
        libs = resolve_jars(_pom_for(versions, folder), folder, f"Spark connector ({versions.label})",
                            SparkConnectorError)
    except SparkConnectorError as e:
        found = _UNRESOLVED.search(str(e))
        what = found.group(1) if found else (f"spark-sql-kafka-0-10_2.13 {versions.kafka}, spark-avro_2.13 "
                                             f"{versions.avro} and hadoop-aws {versions.hadoop_aws}")
        raise SparkConnectorError(f"Maven could not fetch {what} for `{FETCH_COMMAND}`: {e}") from e
    names = sorted(jar.name for jar in libs.glob("*.jar"))
    staged = folder / f".{MANIFEST}.tmp"
    staged.write_text("".join(f"{name}\n" for name in names))
    staged.replace(folder / MANIFEST)  # whole or not at all
    return connector_jars(cache_dir, versions)


def connector_jars(cache_dir: Path | None = None, versions: ConnectorVersions = CONNECTORS) -> tuple[Path, ...]:
    """The cached connector jars for Spark's classpath, minus those Spark ships; offline, never calls Maven."""
    check_spark_line(versions)
    folder = version_dir(cache_dir, versions)
    libs, manifest = folder / "libs", folder / MANIFEST
    if not (libs / MARKER).is_file() or not manifest.is_file():
        raise SparkConnectorError(f"the Spark connector jars (spark-sql-kafka-0-10 {versions.kafka}, spark-avro "
                                  f"{versions.avro}, hadoop-aws {versions.hadoop_aws}) are not in {folder}: run "
                                  f"`{FETCH_COMMAND}` to fetch them from Maven Central (once)")
    names = [line.strip() for line in manifest.read_text().splitlines() if line.strip()]
    for name in names:
        if not zipfile.is_zipfile(libs / name):  # False for a missing file too
            state = "damaged" if (libs / name).exists() else "missing"
            raise SparkConnectorError(f"the Spark connector jar {name} is {state} in {libs}: run `{FETCH_COMMAND}` "
                                      f"to fetch it again")
    shipped = spark_shipped_artifacts()
    return tuple(libs / name for name in names if artifact_of(name) not in shipped)


def with_connectors(settings: Mapping[str, str], *, jvm_running: bool, cache_dir: Path | None = None
                    ) -> dict[str, str]:
    """A new session's Spark settings with the cached jars of every connector the job's `spark.jars` /
    `spark.jars.packages` do not already give added to `spark.jars` (the job's own jars first).

    When spark-submit started the JVM (`jvm_running`), a `spark.jars` set now would not reach the driver's
    classpath: the connectors are then spark-submit's to give (``spark-submit $(oncelog spark jars) …``)."""
    wanted = set() if jvm_running else set(Connector) - given_connectors(settings)
    if not wanted:
        return dict(settings)  # nothing to add: the cache is not read, so it need not exist
    jars = [str(jar) for jar in connector_jars(cache_dir) if Connector.of_jar(jar.name) in wanted]
    own = [jar.strip() for jar in settings.get(JARS, "").split(",") if jar.strip()]
    return {**settings, JARS: ",".join([*own, *jars])}


def given_connectors(settings: Mapping[str, str]) -> set[Connector]:
    """The connectors that `spark.jars` (by file name) or `spark.jars.packages` (by Maven coordinate) give."""
    artifacts = [artifact_of(Path(jar.strip()).name) for jar in settings.get(JARS, "").split(",")]
    artifacts += [coordinate.split(":")[1] for coordinate in settings.get(PACKAGES, "").split(",")
                  if coordinate.count(":") >= 2]
    return {connector for connector in Connector if _names_any(connector, artifacts)}


def _names_any(connector: Connector, artifacts: Iterable[str]) -> bool:
    """Whether one of the artifact ids is the connector's (any Scala suffix: ``spark-avro_2.13``)."""
    return any(artifact.strip() == connector.value or artifact.strip().startswith(f"{connector.value}_")
               for artifact in artifacts)


def check_spark_line(versions: ConnectorVersions) -> None:
    """Refuse a pyspark of another major line than the connectors': their JVM classes would not link."""
    try:
        installed = package_version("pyspark")
    except PackageNotFoundError as e:
        raise SparkConnectorError("pyspark is not installed, so there is no Spark to add connectors to") from e
    if not installed.startswith(f"{SPARK_MAJOR}."):
        raise SparkConnectorError(f"the Spark connectors ({versions.label}) are built for Spark {SPARK_MAJOR}.x "
                                  f"(Scala 2.13), but pyspark {installed} is installed")


def spark_shipped_artifacts() -> frozenset[str]:
    """The artifact ids of the jars pyspark ships (its ``jars/`` folder), versions left out."""
    spec = importlib.util.find_spec("pyspark")  # located without importing it: no JVM, no py4j
    if spec is None or spec.origin is None:
        raise SparkConnectorError("pyspark is not installed, so there is no Spark to add connectors to")
    return frozenset(artifact_of(jar.name) for jar in (Path(spec.origin).parent / "jars").glob("*.jar"))


def artifact_of(jar_name: str) -> str:
    """A jar's artifact id without its version: ``kafka-clients-3.9.1.jar`` -> ``kafka-clients``."""
    return _VERSION_SUFFIX.sub("", jar_name)


def jars_option(jars: tuple[Path, ...]) -> str:
    """The ``--jars a.jar,b.jar`` argument of spark-submit (and the value of ``spark.jars`` after the flag)."""
    return f"--jars {','.join(str(jar) for jar in jars)}"


def _pom_for(versions: ConnectorVersions, folder: Path) -> Path:
    """The pom resolving ``versions``: the packaged one, or a copy of it with the versions substituted."""
    packaged = text = _POM.read_text()
    for prop, value in (("spark.kafka.version", versions.kafka), ("spark.avro.version", versions.avro),
                        ("hadoop.aws.version", versions.hadoop_aws)):
        text = re.sub(rf"<{re.escape(prop)}>[^<]*</{re.escape(prop)}>", f"<{prop}>{value}</{prop}>", text)
    if text == packaged:
        return _POM
    folder.mkdir(parents=True, exist_ok=True)
    (copy := folder / "pom.xml").write_text(text)
    return copy
