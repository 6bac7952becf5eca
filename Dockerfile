# One image for every goka-py program, all through the one `goka` command line:
# `docker run IMAGE processor run module:graph ...`, `docker run IMAGE view serve ...`,
# `docker run IMAGE connect run module:connector ...`, `docker run IMAGE broker`; every flag
# can be set as GOKA_<FLAG> instead. tests/integration/test_dockerfile.py
# runs this file's install and entrypoint steps in a fresh virtualenv.
FROM python:3.11-slim-bookworm

# Spark needs a Java 17 runtime; procps gives Spark's scripts `ps`.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PYSPARK_PYTHON=/usr/local/bin/python \
    PYTHONPATH=/app \
    GOKA_HOST=0.0.0.0 \
    GOKA_HTTP_HOST=0.0.0.0
# ^ inside a container the ports must be reachable from outside it (the defaults are 127.0.0.1)

RUN useradd --create-home --uid 10001 goka

# Build and install goka-py from /build, then drop the sources: a goka/ directory on PYTHONPATH
# would shadow the installed package and its compiled C fast path. gcc builds that fast path
# (goka/_speedups.c) and leaves again in the same layer.
WORKDIR /build
COPY pyproject.toml setup.py README.md ./
COPY goka ./goka
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install ".[all]" \
    && cd / \
    && python -c "import goka._speedups" \
    && rm -rf /build \
    && apt-get purge -y --auto-remove gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

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
