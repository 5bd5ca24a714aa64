# ordo — make help lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help

help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

check-java:
	@command -v java >/dev/null 2>&1 || { echo "Java 17+ is required for Spark: install it (Debian/Ubuntu: apt-get install openjdk-17-jre-headless; macOS: brew install openjdk@17) and put java on PATH."; exit 1; }
	@v=$$(java -version 2>&1 | awk -F'"' '/version/ {print $$2}' | cut -d. -f1); \
	  if [ "$$v" -lt 17 ] 2>/dev/null; then echo "Java $$v found; Spark 4 needs Java 17+ (apt-get install openjdk-17-jre-headless)."; exit 1; fi

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python 3.11+ is required (found $$($(PYTHON) --version))."; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

check-mvn:
	@command -v mvn >/dev/null 2>&1 || { echo "Maven is required once, to fetch Apache Kafka's jars (the broker of make demo, ordo up and the tests): install it (Debian/Ubuntu: apt-get install maven; macOS: brew install maven) and put mvn on PATH."; exit 1; }

kafka: check-java $(STAMP) ## Fetch the pinned Apache Kafka (ordo/broker/kafka-pom.xml) once into ~/.cache/ordo (Maven)
	@if ! $(BIN)/python -c 'import sys, ordo.broker.kafka as k; sys.exit(k.installed_libs() is None)'; then $(MAKE) --no-print-directory check-mvn; fi
	$(BIN)/python -m ordo.broker.kafka fetch

setup: check-java $(STAMP) ## Create .venv and install ordo with its dev tools

# Prometheus and promtool (Debian's prometheus package): the monitoring tests run the real server and promtool.
prometheus: ## Install Prometheus and promtool (Debian/Ubuntu package; sudo when not root)
	@command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null 2>&1 || { echo "Prometheus is needed by the monitoring tests: install prometheus and promtool (2.42+) and put them on PATH."; exit 1; }; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

# S3 for the cluster tests and the production topology: S3Proxy (ordo/broker/s3proxy-pom.xml) into ~/.cache/ordo,
# and Spark's S3A jars (hadoop-aws of PySpark's Hadoop, with the AWS SDK bundle, ~700 MB once) into ~/.m2.
s3: check-java check-mvn $(STAMP) ## Fetch S3Proxy and Spark's S3A jars once (Maven)
	$(BIN)/python -m ordo.broker.s3proxy fetch
	$(BIN)/python tools/spark_s3a.py >/dev/null

cluster: setup kafka s3 ## The production topology on one machine until Ctrl-C: S3, Kafka, PostgreSQL, arbiter, consumer, a Spark standalone cluster, the compactor on it
	$(BIN)/python tools/cluster_up.py

# The test tiers (tests/README.md). make test runs them in TEST_WORKERS pytest-xdist workers, each module whole on
# one worker, all of tests/e2e on one (one Spark session), tests/cluster last (TEST_WORKERS=0: one process).
# TEST_REPORTS=DIR makes each test target write its JUnit XML (every test's duration) to DIR/<target>.xml; .ci/run
# sets it and prints a summary of them at the end of the CI log.
FAST := not broker and not spark and not postgres and not slow
TEST_WORKERS ?= 2
junit = $(if $(TEST_REPORTS),--junitxml=$(TEST_REPORTS)/$(1).xml)

test: setup prometheus kafka s3 ## Run the whole test suite (unit; integration and chaos on Tansu and on Apache Kafka; Spark end to end on Kafka; a Spark cluster with tables on S3)
	$(BIN)/pytest -q --durations=30 -n $(TEST_WORKERS) --dist loadscope $(call junit,test)

test-fast: setup ## The fast tier: the tests that need no broker, Spark or PostgreSQL (a few minutes)
	$(BIN)/pytest -q --durations=15 -m "$(FAST)" tests/unit $(call junit,test-fast)

lint: setup ## ruff, mypy and the layers contract
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest -q -p no:cacheprovider tests/unit/test_layers.py tests/unit/test_dependency_rule.py

demo: setup kafka ## Fetch Apache Kafka once (Maven), start the stack on it and run the demo
	$(BIN)/ordo demo

bench: setup ## Benchmarks (quick profile; BENCH_PROFILE=full for the large ones) -> bench/results.json
	$(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python -m bench

spark-kafka: setup ## Fetch Spark's Kafka connector (spark-sql-kafka-0-10) from Maven Central into ~/.m2 with mvn
	$(BIN)/python tools/spark_kafka.py

connect-json: setup ## Fetch Kafka Connect's JsonConverter (connect-json) from Maven Central into ~/.m2 with mvn
	$(BIN)/python tools/connect_json.py

# The oldest PySpark ordo supports, read from pyproject.toml's requirement: CI runs the Spark end-to-end tests of
# the data source and the Delta API on it too (the main .venv has the newest release). delta-spark (bench-spark)
# supports PySpark up to this minimum, so this venv also runs Delta and ordo in one session (test_delta_side_by_side).
SPARK_MIN := $(shell sed -n 's/.*"pyspark>=\([0-9.]*\)".*/\1/p' pyproject.toml)
VENV_MIN := .venv-spark-min

test-spark-min: check-java ## The Spark end-to-end tests on the oldest supported PySpark (pyproject's minimum)
	@test -x $(VENV_MIN)/bin/python || $(PYTHON) -m venv $(VENV_MIN)
	$(VENV_MIN)/bin/pip install -q --upgrade pip
	$(VENV_MIN)/bin/pip install -q "pyspark==$(SPARK_MIN)" -e '.[dev,bench-spark]'
	$(VENV_MIN)/bin/python -c 'import pyspark, sys; sys.exit(pyspark.__version__ != "$(SPARK_MIN)")'
	$(VENV_MIN)/bin/pytest -q -p no:cacheprovider --durations=10 tests/e2e/test_datasource.py tests/e2e/test_datasource_streaming.py \
	  tests/e2e/test_scope.py tests/e2e/test_delta_api.py tests/e2e/test_delta_side_by_side.py $(call junit,test-spark-min)

chaos: setup kafka ## Fault-injection suite, full run (a quick version runs inside make test)
	CHAOS_PROFILE=full $(BIN)/pytest -q -s tests/chaos

# ordo, Delta Lake and Iceberg on Spark (bench/peers_spark.py): delta-spark 4.4 supports PySpark up to 4.2, so
# .venv-bench-spark pins PySpark to ordo's minimum (4.2.0) with the bench-spark extra. No Iceberg runtime runs on
# Spark 4.2 yet (the newest is built for 4.1), so Iceberg runs in a child process from .venv-bench-iceberg, on the
# newest PySpark of the line its runtime is built for. The jars come with mvn (tools/spark_lakes.py).
VENV_BENCH_SPARK := .venv-bench-spark
VENV_BENCH_ICEBERG := .venv-bench-iceberg
ICEBERG_PYSPARK := 4.1.4

bench-peers-spark: check-java check-mvn ## ordo vs Delta Lake vs Iceberg on Spark (own venvs: PySpark 4.2.0, Iceberg's 4.1.4; jars via mvn) -> bench/results.json
	@test -x $(VENV_BENCH_SPARK)/bin/python || $(PYTHON) -m venv $(VENV_BENCH_SPARK)
	$(VENV_BENCH_SPARK)/bin/pip install -q --upgrade pip
	$(VENV_BENCH_SPARK)/bin/pip install -q "pyspark==$(SPARK_MIN)" -e '.[dev,bench,bench-spark]'
	$(VENV_BENCH_SPARK)/bin/python -c 'import pyspark, sys; sys.exit(pyspark.__version__ != "$(SPARK_MIN)")'
	@test -x $(VENV_BENCH_ICEBERG)/bin/python || $(PYTHON) -m venv $(VENV_BENCH_ICEBERG)
	$(VENV_BENCH_ICEBERG)/bin/pip install -q --upgrade pip
	$(VENV_BENCH_ICEBERG)/bin/pip install -q "pyspark==$(ICEBERG_PYSPARK)"
	$(VENV_BENCH_ICEBERG)/bin/python -c 'import pyspark, sys; sys.exit(pyspark.__version__ != "$(ICEBERG_PYSPARK)")'
	$(VENV_BENCH_SPARK)/bin/python tools/spark_lakes.py
	$(VENV_BENCH_SPARK)/bin/python -m bench peers-spark

.PHONY: help check-java check-mvn kafka s3 cluster setup prometheus test test-fast test-spark-min lint demo bench chaos spark-kafka connect-json bench-peers-spark
