# syntax=docker/dockerfile:1
# One image for every durable-ops process: `opsctl serve <target>`, `opsctl migrate`, ...
# Build: docker build -t durable-ops:local .   (compose.yaml does this for you)

FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
# Wheels of every runtime dependency at the version uv.lock pins, each file's hash
# checked: requirements/run.txt is the lock's export without extras (scripts/lock.sh).
# Before the source, so a code change reuses this layer.
COPY requirements/run.txt ./requirements/run.txt
RUN pip wheel --require-hashes --wheel-dir /wheels -r requirements/run.txt
# Then the package's own wheel, from only what it is built from: no tests, no dev
# extras, no local state.
COPY pyproject.toml README.md ./
COPY services ./services
COPY migrations ./migrations
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
# The package and its runtime dependencies only (no [dev] extras), installed from the
# build stage's wheels and nothing else (so only the locked versions can be had); then the unprivileged user, and the AI worker's host operation
# store: a named volume mounted there starts as a copy of this directory (owner ops,
# mode 0700, as the store demands).
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels durable-ops \
    && groupadd --system --gid 10001 ops \
    && useradd --system --uid 10001 --gid ops --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin ops \
    && install --directory --owner=ops --group=ops --mode=0700 /var/lib/durable-ops/host-store \
       /keys /keys/public /keys/gateway /keys/worker /keys/operator /keys/tls /keys/tls-ca
# Container health checks (gRPC health service, HTTP endpoints); see deploy/healthcheck.py.
COPY deploy/healthcheck.py /opt/durable-ops/deploy/healthcheck.py
WORKDIR /opt/durable-ops
USER 10001:10001
ENTRYPOINT ["opsctl"]
CMD ["--help"]
