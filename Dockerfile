# One image for every goka-py program, all through the one `goka` command line:
# `docker run IMAGE processor run module:graph ...`, `docker run IMAGE view serve ...`,
# `docker run IMAGE connect run module:connector ...`, `docker run IMAGE broker`; every flag
# can be set as GOKA_<FLAG> instead. `make image` builds it (with buildah where no Docker
# engine runs: tools/image.py); tests/integration/test_image.py builds and runs it. The `slim`
# target (`make image TARGET=slim`) is for emitters, views and the gRPC view server: no Spark,
# no Java. docs/operations.md gives their sizes.

# The wheel, with its compiled C fast path (goka/_speedups.c): gcc stays in this stage.
FROM python:3.11-slim-bookworm AS wheel
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /build
COPY pyproject.toml setup.py README.md ./
COPY goka ./goka
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && rm -rf /build/build

# Emitters, views and the gRPC view server (and the click-count web app): no Spark, no Java.
FROM python:3.11-slim-bookworm AS slim
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONPATH=/app \
    GOKA_HOST=0.0.0.0 \
    GOKA_HTTP_HOST=0.0.0.0
# ^ inside a container the ports must be reachable from outside it (the defaults are 127.0.0.1)
RUN useradd --create-home --uid 10001 goka
# the wheel by its file name: a goka-py on PyPI is never taken instead
COPY --from=wheel /wheels /wheels
RUN pip install "$(echo /wheels/goka_py-*.whl)[view,schema-registry,web]" && rm -rf /wheels
WORKDIR /app
COPY examples ./examples
COPY services ./services
USER goka
WORKDIR /home/goka
ENTRYPOINT ["goka"]
CMD ["--help"]

# Everything (the default target): slim, plus processors on Spark, connectors and the broker.
FROM slim AS full
USER root
# Spark needs a Java 17 runtime; procps gives Spark's scripts `ps`.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    PYSPARK_PYTHON=/usr/local/bin/python
COPY --from=wheel /wheels /wheels
RUN pip install "$(echo /wheels/goka_py-*.whl)[all]" && rm -rf /wheels
USER goka
# the driver JVM's class-data archive and the Spark home of local sessions: processors start
# about 7 s sooner (goka.spark.class_data, goka.spark.session.spark_home)
RUN python -m goka.commands.class_data
