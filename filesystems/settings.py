"""Where file systems take their settings: Hadoop's keys, from the job file or Hadoop's own configuration folder.

A job may set Hadoop keys bare (`fs.s3a.endpoint`) or as Spark passes them (`spark.hadoop.fs.s3a.endpoint`); keys
not set there come from `$HADOOP_CONF_DIR/core-site.xml` and `hdfs-site.xml`. S3 credentials not set in either
come from AWS's usual places (environment, profile, instance role), as boto3 finds them.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

HADOOP_PREFIXES = ("fs.", "dfs.", "hadoop.")
SPARK_HADOOP = "spark.hadoop."
SITE_FILES = ("core-site.xml", "hdfs-site.xml")


@dataclass(frozen=True)
class FileSystemSettings:
    """Hadoop configuration keys for the file systems (values may be secrets: never print or record them)."""

    hadoop: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, properties: Mapping[str, str], environ: Mapping[str, str] | None = None) -> FileSystemSettings:
        """A job's Hadoop keys over those of $HADOOP_CONF_DIR (environ defaults to the process's)."""
        conf_dir = (os.environ if environ is None else environ).get("HADOOP_CONF_DIR")
        merged = dict(site_properties(Path(conf_dir))) if conf_dir else {}
        for key, value in properties.items():
            if key.startswith(SPARK_HADOOP) and key[len(SPARK_HADOOP):].startswith(HADOOP_PREFIXES):
                merged[key[len(SPARK_HADOOP):]] = value
        merged.update({k: v for k, v in properties.items() if k.startswith(HADOOP_PREFIXES)})
        return cls(merged)

    def get(self, key: str) -> str | None:
        value = self.hadoop.get(key)
        return value.strip() if value and value.strip() else None


def site_properties(conf_dir: Path) -> dict[str, str]:
    """The <property> name/value pairs of Hadoop's site files in a configuration folder."""
    found: dict[str, str] = {}
    for name in SITE_FILES:
        path = conf_dir / name
        if not path.is_file():
            continue
        try:
            root = ElementTree.parse(path).getroot()
        except ElementTree.ParseError as e:
            raise ValueError(f"{path} is not a Hadoop configuration file: {e}") from e
        for prop in root.iter("property"):
            key, value = prop.findtext("name"), prop.findtext("value")
            if key and value is not None:
                found[key.strip()] = value.strip()
    return found
