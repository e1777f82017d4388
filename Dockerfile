# oncelog's image: the CLI, the live projector, and Spark master / worker processes (the same Python everywhere,
# so Spark's Python workers can import oncelog's packages).
FROM python:3.11-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 PYSPARK_PYTHON=python3
WORKDIR /app
COPY pyproject.toml README.md ./
COPY oncelog/ oncelog/
COPY events events
COPY projections projections
COPY spark_pipeline spark_pipeline
COPY replay replay
COPY filesystems filesystems
COPY localservers localservers
RUN pip install --no-cache-dir .
# Spark's Kafka and Avro connectors, which every Spark session oncelog starts puts on its classpath: fetched once by
# Maven into the image's cache, then Maven goes.
ENV ONCELOG_CACHE=/opt/oncelog-cache
RUN apt-get update && apt-get install -y --no-install-recommends maven \
 && oncelog spark jars \
 && apt-get purge -y maven && apt-get autoremove -y && rm -rf /var/lib/apt/lists/* /root/.m2
WORKDIR /data
ENTRYPOINT []
CMD ["oncelog", "--help"]
