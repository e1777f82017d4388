# Everything a fresh machine needs (Python 3.11+, Java 17+, Maven) is set up by these targets themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: check test test-fast soak soak-iceberg simulate simulate-kafka mutants demo kafka-jars spark-jars kafka-up kafka-down kafka-cluster-up kafka-cluster-down hdfs-jars hdfs-up hdfs-down s3-build s3-up s3-down bench bench-quick clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "oncelog needs Python 3.11+, found " + sys.version.split()[0] + " (set PYTHON=python3.11)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $(STAMP)

# Both supported Kafka lines: 3.9.1 (the default) and 4.x (KAFKA4_VERSION in events/kafka_local.py).
KAFKA4_VERSION ?= 4.4.0
kafka-jars: $(STAMP)
	$(BIN)/oncelog kafka jars
	$(BIN)/oncelog kafka jars --kafka-version $(KAFKA4_VERSION)

# Spark's Kafka and Avro connectors and S3A (spark-sql-kafka-0-10, spark-avro, hadoop-aws), from Maven Central into ~/.cache/oncelog:
# every Spark session oncelog starts takes them from there (spark.jars), and refuses to start without them.
spark-jars: $(STAMP)
	$(BIN)/oncelog spark jars >/dev/null

# The servers the tests run for real: HDFS from Hadoop's Maven Central jars, an S3-compatible server (versitygw)
# built from the Go module proxy; both cached in ~/.cache/oncelog after the first time.
hdfs-jars: $(STAMP)
	$(BIN)/oncelog hdfs jars

hdfs-up: hdfs-jars
	$(BIN)/oncelog hdfs up

hdfs-down: $(STAMP)
	$(BIN)/oncelog hdfs down

s3-build: $(STAMP)
	$(BIN)/oncelog s3 build

s3-up: s3-build
	$(BIN)/oncelog s3 up --bucket oncelog

s3-down: $(STAMP)
	$(BIN)/oncelog s3 down

# Lint, types and layering (ruff, mypy and import-linter, configured in pyproject.toml); `make test` runs it first.
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy events projections replay spark_pipeline oncelog filesystems localservers tests benchmarks
	$(BIN)/lint-imports

# Two pytest workers, each taking one test module at a time (module fixtures start once): most tests wait on JVMs,
# brokers and child processes, so two overlap on two cores (README, Tests: the times measured). Modules go out in
# collection order, the slowest first (tests/conftest.py: SLOWEST_MODULES), so no long one starts last. Three were
# slower on a clean clone (28 November: pytest 35:54 against 33:28 with two; load average 7-11).
TEST_WORKERS ?= 2
# The tests start Python processes by the hundred (commands, simulation workers, Spark's Python daemons): each would
# compile oncelog's modules again if $PYTHONDONTWRITEBYTECODE kept their bytecode from being cached (__pycache__,
# ignored by git); pytest's collection alone took 14 s a process instead of 5.5.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest
test: $(STAMP) check kafka-jars spark-jars hdfs-jars s3-build
	$(PYTEST) -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

# The inner loop (under 3 minutes): lint, types and layering, then every test that needs no server (no Spark, Kafka,
# HDFS, S3, cluster or browser: the markers tests/conftest.py derives from the fixtures a test uses) and is not slow.
FAST_TESTS = not (spark or kafka or hdfs or s3 or cluster or browser or slow)
test-fast: $(STAMP) check
	$(PYTEST) -q -m "$(FAST_TESTS)"

# The SIGKILL soak (tests/fault/soak.py) at length, not part of `make test` (which runs 10 iterations per store).
# Each store's soak uses $KAFKA_BOOTSTRAP, else starts a local broker of its own. SOAK_SEED picks another schedule.
SOAK_ITERATIONS ?= 200
SOAK_SEED ?= 1
soak: $(STAMP) kafka-jars spark-jars
	$(BIN)/python -m tests.fault.soak --iterations $(SOAK_ITERATIONS) --store sqlite --seed $(SOAK_SEED)
	$(BIN)/python -m tests.fault.soak --iterations $(SOAK_ITERATIONS) --store kafka --seed $(SOAK_SEED)

# The same soak on the job publishing into an hourly-partitioned Iceberg table (tests/fault/soak.py, --output iceberg):
# runs killed within their commit, at their table commit, or anywhere; the table read back through pyiceberg.
soak-iceberg: $(STAMP) kafka-jars spark-jars
	$(BIN)/python -m tests.fault.soak --iterations $(SOAK_ITERATIONS) --store sqlite --seed $(SOAK_SEED) --output iceberg
	$(BIN)/python -m tests.fault.soak --iterations $(SOAK_ITERATIONS) --store kafka --seed $(SOAK_SEED) --output iceberg

# The seeded fault simulation (tests/sim/) at length: SIM_SCENARIOS seeds from SIM_FIRST, on SQLite, in-process.
SIM_SCENARIOS ?= 20000
SIM_FIRST ?= 0
simulate: $(STAMP)
	$(BIN)/python -m tests.sim.simulation --first $(SIM_FIRST) --count $(SIM_SCENARIOS)

# The Kafka flavour at length (`make test` plays 50): SIM_KAFKA_SCENARIOS seeds from SIM_KAFKA_FIRST, SIM_KAFKA_TABLE_RATE
# of them publishing into a table (its commit split into shards of the topic's partitions, tests/sim/simulation.py:
# TABLE_LOG_PARTITIONS), on $KAFKA_BOOTSTRAP, else a local broker started for the run.
SIM_KAFKA_SCENARIOS ?= 500
SIM_KAFKA_FIRST ?= 100000
SIM_KAFKA_TABLE_RATE ?= 0.3
simulate-kafka: $(STAMP) kafka-jars
	$(BIN)/python -m tests.sim.simulation --store kafka --first $(SIM_KAFKA_FIRST) --count $(SIM_KAFKA_SCENARIOS) \
		--table-rate $(SIM_KAFKA_TABLE_RATE)

# The mutant table (tests/sim/mutants/: each exactly-once fix reverted): per mutant, the seeds of MUTANT_SEEDS from
# MUTANT_FIRST on which the simulation failed, and the first failing one; the unmutated code must fail on none.
MUTANT_SEEDS ?= 300
MUTANT_FIRST ?= 0
mutants: $(STAMP)
	$(BIN)/python -m tests.sim.mutants --first $(MUTANT_FIRST) --count $(MUTANT_SEEDS)

demo: $(STAMP) spark-jars
	$(BIN)/python -m oncelog.demo

kafka-up: kafka-jars
	$(BIN)/oncelog kafka up

kafka-down: $(STAMP)
	$(BIN)/oncelog kafka down

# A three-node KRaft cluster on loopback (replication 3, min.insync.replicas 2); prints its kafka:// URL.
kafka-cluster-up: kafka-jars
	$(BIN)/oncelog kafka up --nodes 3 --state-dir .oncelog/kafka-cluster

kafka-cluster-down: $(STAMP)
	$(BIN)/oncelog kafka down --state-dir .oncelog/kafka-cluster

bench-quick: kafka-jars spark-jars
	$(BIN)/python -m benchmarks.log_throughput --quick
	$(BIN)/python -m benchmarks.rebuild --quick
	$(BIN)/python -m benchmarks.pipeline --quick
	$(BIN)/python -m benchmarks.tables --quick

bench: kafka-jars spark-jars
	$(BIN)/python -m benchmarks.log_throughput
	$(BIN)/python -m benchmarks.rebuild
	$(BIN)/python -m benchmarks.pipeline
	$(BIN)/python -m benchmarks.tables

clean:
	rm -rf $(VENV) .oncelog .pytest_cache .hypothesis
