# WaveSQL: `make demo` runs the demo, `make test` runs the test suite. Each creates the
# virtual environment in .venv on first use (needs Python >= 3.10 and Java 17+).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

CONNECTORS := $(VENV)/share/wavesql/connectors
BROKER     := $(VENV)/share/wavesql/kafka-broker
HDFS       := $(VENV)/share/wavesql/hdfs-cluster
GCS        := $(VENV)/share/wavesql/gcs-server
# Go for the GCS test server: on PATH, else where the Go distribution installs itself
GO         ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)

.PHONY: demo test test-fast test-all connectors kafka-broker hdfs-cluster gcs-server clean

demo: $(VENV)/.installed
	$(BIN)/wavesql demo

# The fast tier first (no JVM: parsing, planning against a dict environment, kernels,
# layout rules; under a minute), then every test that starts Spark (its 30 slowest tests
# listed at the end: where the suite's time goes, from every run). The Spark tier runs in
# two pytest-xdist workers, each with its own local[2] session, S3 server and Kafka
# broker, a test file whole on one worker (its module fixtures once): much of a Spark
# test's time is latency -- micro-batches, Py4J, process starts -- that a second worker
# fills.
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m "not spark and not slow"
	$(BIN)/python -m pytest -q -m "spark and not slow" -n 2 --dist loadfile --durations=30

test-fast: $(VENV)/.installed-python-test
	$(BIN)/python -m pytest -q -m "not spark and not slow"

# Includes the slow tests that CI skips.
test-all: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m "slow or not slow"

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "WaveSQL needs Python >= 3.10")'
	@command -v java >/dev/null 2>&1 || [ -n "$$JAVA_HOME" ] || echo "warning: no java on PATH; Spark needs Java 17+ (apt-get install openjdk-17-jre-headless)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.installed-python-test: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed-python-test $(VENV)/.connectors $(VENV)/.kafka-broker \
		$(VENV)/.hdfs-cluster $(VENV)/.gcs-server
	touch $@

# Spark connectors from Maven Central (connectors/pom.xml: the S3A filesystem for s3a://
# locations, Spark's Kafka source and sink, Avro), where wavesql.spark.start_spark finds
# them. Needs Maven (apt-get install maven).
connectors: $(VENV)/.connectors

$(VENV)/.connectors: connectors/pom.xml | $(VENV)/.installed
	@command -v mvn >/dev/null 2>&1 || { echo "make connectors needs Maven (apt-get install maven)"; exit 1; }
	rm -rf $(CONNECTORS)
	mvn -q -B -f connectors/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	    -DoutputDirectory=$(abspath $(CONNECTORS))
	touch $@

# A Kafka broker from Kafka's own jars (connectors/kafka-broker/pom.xml), which the tests
# start on loopback (tests/kafka_broker.py; `python -m tests.kafka_broker` runs one).
kafka-broker: $(VENV)/.kafka-broker

$(VENV)/.kafka-broker: connectors/kafka-broker/pom.xml | $(VENV)/.installed
	@command -v mvn >/dev/null 2>&1 || { echo "make kafka-broker needs Maven (apt-get install maven)"; exit 1; }
	rm -rf $(BROKER)
	mvn -q -B -f connectors/kafka-broker/pom.xml dependency:copy-dependencies \
	    -DincludeScope=runtime -DoutputDirectory=$(abspath $(BROKER))
	touch $@

# An HDFS from Hadoop's own jars (connectors/hdfs-cluster/pom.xml: the minicluster of the
# Hadoop version PySpark ships), which the tests start on loopback (tests/hdfs_cluster.py;
# `python -m tests.hdfs_cluster` runs one).
hdfs-cluster: $(VENV)/.hdfs-cluster

$(VENV)/.hdfs-cluster: connectors/hdfs-cluster/pom.xml | $(VENV)/.installed
	@command -v mvn >/dev/null 2>&1 || { echo "make hdfs-cluster needs Maven (apt-get install maven)"; exit 1; }
	rm -rf $(HDFS)
	mvn -q -B -f connectors/hdfs-cluster/pom.xml dependency:copy-dependencies \
	    -DincludeScope=runtime -DoutputDirectory=$(abspath $(HDFS))
	# unpacked: the namenode's web server (WebHDFS) scans its 56 MB jar for resource
	# classes by inflating it whole, twice; a folder of classes starts the cluster in
	# 12 s instead of 20 s
	$(BIN)/python -m zipfile -e $(HDFS)/hadoop-client-minicluster-*.jar $(HDFS)/classes
	rm $(HDFS)/hadoop-client-minicluster-*.jar
	touch $@

# A GCS-protocol server (fake-gcs-server, Go, built from the Go module proxy), which the
# tests start on loopback (tests/gcs_server.py; `python -m tests.gcs_server` runs one).
gcs-server: $(VENV)/.gcs-server

$(VENV)/.gcs-server: | $(VENV)/.installed
	@[ -x "$(GO)" ] || { echo "make gcs-server needs Go 1.24+ (https://go.dev/doc/install)"; exit 1; }
	rm -rf $(GCS)
	GOBIN=$(abspath $(GCS)) $(GO) install github.com/fsouza/fake-gcs-server@v1.56.1
	touch $@

clean:
	rm -rf $(VENV) wavesql_demo wavesql_catalog.db* .pytest_cache
