# The ordo image: the `ordo` CLI (arbiter, consumer, and the read/ops commands). Java is included so the
# same image can run Spark writers (PySpark in local mode) and `ordo demo`; the arbiter and the consumer
# do not need it.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
# the one package pyproject.toml installs (tests/unit/test_compose.py checks the list)
COPY ordo ./ordo
# /keys (public keys), /secret (the arbiter's private key), /warehouse (table data), /data (working dir): owned
# by the image's user, so named volumes mounted there start writable by it
RUN pip install . \
 && python -W error::DeprecationWarning -c "import ordo.cli, ordo.arbiter.service, ordo.consumer.materializer, ordo.producer.table, ordo.kernel; from ordo import DeltaTable" \
 && useradd --create-home --uid 1000 ordo \
 && mkdir -p /data /keys /secret /warehouse \
 && chown ordo /data /keys /secret /warehouse \
 && chmod 700 /secret

USER ordo
WORKDIR /data
ENTRYPOINT ["ordo"]
CMD ["--help"]
