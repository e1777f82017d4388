# Everything a fresh machine needs (Python 3.11+, Java 17+, Maven) is set up by these targets themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: test demo kafka-jars kafka-up kafka-down bench bench-quick clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "oncelog needs Python 3.11+, found " + sys.version.split()[0] + " (set PYTHON=python3.11)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $(STAMP)

kafka-jars: $(STAMP)
	$(BIN)/oncelog kafka jars

test: $(STAMP) kafka-jars
	$(BIN)/python -m pytest

demo: $(STAMP)
	$(BIN)/python -m spark_pipeline.demo

kafka-up: kafka-jars
	$(BIN)/oncelog kafka up

kafka-down: $(STAMP)
	$(BIN)/oncelog kafka down

bench-quick: kafka-jars
	$(BIN)/python -m benchmarks.log_throughput --quick
	$(BIN)/python -m benchmarks.rebuild --quick
	$(BIN)/python -m benchmarks.pipeline --quick

bench: kafka-jars
	$(BIN)/python -m benchmarks.log_throughput
	$(BIN)/python -m benchmarks.rebuild
	$(BIN)/python -m benchmarks.pipeline

clean:
	rm -rf $(VENV) .oncelog .pytest_cache .hypothesis
