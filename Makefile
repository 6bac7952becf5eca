# Every target brings the local virtualenv up to date first, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo kafka-libs s3-libs test test-fast test-slow check lint format typecheck bench proto docs image clean

$(STAMP): pyproject.toml setup.py goka/_speedups.c goka/_window_update.c goka/_copy_json.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# the driver JVM's class-data archive, for the classpath the session code gives it
CDS := $(VENV)/.cds
$(CDS): $(STAMP) goka/spark/session.py goka/spark/class_data.py goka/commands/class_data.py
	$(PY) -m goka.commands.class_data || echo "processors will start without a class-data archive"
	touch $(CDS)

# Apache Kafka's jars (Maven Central, into ~/.cache/goka-py, once): the development broker
kafka-libs: $(STAMP)
	$(PY) -m goka.cli broker --fetch >/dev/null

# S3Proxy's jars (Maven Central, into ~/.cache/goka-py, once): the S3 API server of the tests
s3-libs: $(STAMP)
	$(PY) -m goka.cli s3 --fetch >/dev/null

demo: $(STAMP) $(CDS) kafka-libs
	$(PY) -m examples.click_count.demo $(ARGS)

# headless Chromium for the browser tests of the web pages (Debian packages; never downloaded
# at run time): installed here when missing, as everything else the tests need
BROWSER := /usr/bin/chromedriver
$(BROWSER):
	apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
	  || (apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null) \
	  || echo "could not install chromium and chromium-driver: the browser tests will be skipped"

# a PostgreSQL server for the connector tests (Debian's package; each test run makes its own
# throwaway cluster with initdb): installed here when missing
POSTGRES := /usr/lib/postgresql/15/bin/initdb
$(POSTGRES):
	apt-get install -y -q postgresql >/dev/null 2>&1 \
	  || (apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null) \
	  || echo "could not install postgresql: the PostgreSQL connector tests will be skipped"

# wal2json, the output plugin of the change data capture source (Debian's package)
WAL2JSON := /usr/lib/postgresql/15/lib/wal2json.so
$(WAL2JSON): | $(POSTGRES)
	apt-get install -y -q postgresql-15-wal2json >/dev/null 2>&1 \
	  || (apt-get update -q >/dev/null && apt-get install -y -q postgresql-15-wal2json >/dev/null) \
	  || echo "could not install postgresql-15-wal2json: the change data capture tests will be skipped"

# buildah builds and runs the image where no Docker engine runs (tools/image.py), debootstrap
# makes a stand-in for a base image that cannot be pulled (Debian's packages)
BUILDAH := /usr/bin/buildah
$(BUILDAH):
	apt-get install -y -q buildah debootstrap >/dev/null 2>&1 \
	  || (apt-get update -q >/dev/null && apt-get install -y -q buildah debootstrap >/dev/null) \
	  || echo "could not install buildah and debootstrap: the image test will be skipped"

# the Dockerfile's image: make image [TARGET=slim] (docker or podman where they answer)
TARGET ?= full
image: $(STAMP)
	docker info >/dev/null 2>&1 || podman info >/dev/null 2>&1 || $(MAKE) $(BUILDAH)
	$(PY) -m tools.image --target $(TARGET)

# the suite on Apache Kafka, then its smoke part on Tansu (the light broker without a JVM).
# Two workers, a file each at a time: the suite mostly waits (brokers, Spark, processes: 0.8
# of a core busy on average), and each worker has its own broker and SparkSession. (Three
# took 11:51-13:34 instead of 13:16 on 1,137-1,157 tests, but one run in five failed
# test_continuous' check that a partition stays in its Python worker: kept at two.)
test: $(STAMP) $(CDS) $(BROWSER) $(POSTGRES) $(WAL2JSON) $(BUILDAH) kafka-libs s3-libs
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m 'not longrun'
	$(PY) -m pytest -m 'smoke and not longrun' --broker tansu -p no:cacheprovider

test-fast: $(STAMP)
	$(PY) -m pytest -m 'not kafka and not spark and not slow and not postgres and not s3 and not longrun'

# the tests that take minutes each (a 3-broker cluster losing its leader): not in make test
test-slow: $(STAMP) $(CDS) $(POSTGRES) kafka-libs s3-libs
	$(PY) -m pytest -m longrun

lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

check: lint typecheck test

# quixstreams needs confluent-kafka < 2.13: it gets its own virtualenv, for bench/processor.py
QUIX := .venv-quix/.installed
$(QUIX):
	test -x .venv-quix/bin/python || $(PYTHON) -m venv .venv-quix
	.venv-quix/bin/python -m pip install --quiet quixstreams==3.28.1
	touch $(QUIX)

bench: $(STAMP) $(CDS) $(QUIX) $(BUILDAH)
	$(PY) -m bench.engine
	$(PY) -m bench.emitter
	$(PY) -m bench.view
	$(PY) -m bench.processor
	$(PY) -m bench.processor_floor
	$(PY) -m bench.windows
	$(PY) -m bench.windows_floor
	$(PY) -m bench.guarantees
	$(PY) -m bench.producer_start
	$(PY) -m bench.peers
	$(PY) -m bench.concurrency
	$(PY) -m bench.idle
	$(PY) -m bench.image

# the reference pages come from the code (a test checks they are current); the site is strict
docs: $(STAMP)
	$(PY) -m tools.gen_docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet -d site

proto: $(STAMP)
	$(PY) -m tools.gen_proto

clean:
	rm -rf $(VENV) .venv-quix .mypy_cache .ruff_cache .pytest_cache build site goka/_speedups*.so
