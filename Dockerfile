# One image for every goka-py program, all through the one `goka` command line:
# `docker run IMAGE processor run module:graph ...`, `docker run IMAGE view serve ...`,
# `docker run IMAGE connect run module:connector ...`, `docker run IMAGE broker`; every flag
# can be set as GOKA_<FLAG> instead. `make image` builds it (with buildah where no Docker
# engine runs: tools/image.py); tests/integration/test_image.py builds and runs it. The `slim`
# target (`make image TARGET=slim`) is for emitters, views and the gRPC view server: no Spark,
# no Java. docs/operations.md gives their sizes.

# The wheel, with its compiled C fast paths (goka/_speedups.c, goka/_window_update.c,
# goka/_copy_json.c): gcc
# stays in this stage.
FROM python:3.11-slim-bookworm AS wheel
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /build
COPY pyproject.toml setup.py README.md ./
COPY goka ./goka
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && rm -rf /build/build

# The requirements of each image, from pyproject.toml alone: the layers that install them are
# rebuilt only when it changes, not at every change of the code (tools/requirements.py).
FROM python:3.11-slim-bookworm AS requirements
WORKDIR /build
COPY pyproject.toml tools/requirements.py ./
RUN python requirements.py view,schema-registry,web > slim.txt \
    && python requirements.py all > full.txt

# What both images have: the user, the environment and the slim image's requirements.
FROM python:3.11-slim-bookworm AS base
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONPATH=/app \
    GOKA_HOST=0.0.0.0 \
    GOKA_HTTP_HOST=0.0.0.0
# ^ inside a container the ports must be reachable from outside it (the defaults are 127.0.0.1)
RUN useradd --create-home --uid 10001 goka
COPY --from=requirements /build/slim.txt /tmp/slim.txt
RUN pip install -r /tmp/slim.txt && rm /tmp/slim.txt

# Emitters, views and the gRPC view server (and the click-count web app): no Spark, no Java.
FROM base AS slim
# the wheel by its file name: a goka-py on PyPI is never taken instead; its requirements are in
COPY --from=wheel /wheels /wheels
RUN pip install --no-deps /wheels/goka_py-*.whl && rm -rf /wheels
WORKDIR /app
COPY examples ./examples
COPY services ./services
USER goka
WORKDIR /home/goka
ENTRYPOINT ["goka"]
CMD ["--help"]

# Everything (the default target): slim's, plus processors on Spark, connectors and the broker.
# Java and the requirements come before the code, so a change of the code rebuilds only the
# layers from the wheel on.
FROM base AS full
# Spark needs a Java 17 runtime; procps gives Spark's scripts `ps`.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    PYSPARK_PYTHON=/usr/local/bin/python
COPY --from=requirements /build/full.txt /tmp/full.txt
RUN pip install -r /tmp/full.txt && rm /tmp/full.txt
COPY --from=wheel /wheels /wheels
RUN pip install --no-deps /wheels/goka_py-*.whl && rm -rf /wheels
WORKDIR /app
COPY examples ./examples
COPY services ./services
USER goka
WORKDIR /home/goka
# the driver JVM's class-data archive and the Spark home of local sessions: processors start
# about 7 s sooner (goka.spark.class_data, goka.spark.session.spark_home)
RUN python -m goka.commands.class_data
ENTRYPOINT ["goka"]
CMD ["--help"]
