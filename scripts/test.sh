#!/usr/bin/env bash
# Sets up everything the tests need (the versions uv.lock pins: scripts/bootstrap.sh),
# then runs lint, types and the whole suite.
#
# MariaDB: OPS_TEST_MARIADB_URL, else testcontainers (when a Docker engine answers
# and has or can pull OPS_TEST_MARIADB_IMAGE, default mariadb:11.4), else a server
# on 127.0.0.1:3306, which this script starts if it is installed and down (not
# with OPS_REQUIRE_TESTCONTAINERS=1: then only a container will do).
# Browser tests use Debian's Chromium, installed here when missing and when root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "== installing Chromium for the browser tests"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

if [ -z "${OPS_TEST_MARIADB_URL:-}" ] && [ "${OPS_REQUIRE_TESTCONTAINERS:-}" != 1 ] \
   && [ -x /usr/sbin/mariadbd ] \
   && ! mariadb-admin --host=127.0.0.1 --user=root ping >/dev/null 2>&1; then
  echo "== starting the local MariaDB"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  for _ in $(seq 1 60); do
    mariadb-admin --host=127.0.0.1 --user=root ping >/dev/null 2>&1 && break
    sleep 0.5
  done
fi

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy"
# A cache outside the checkout: a fresh clone checks only what changed (mypy compares hashes).
scripts/typecheck.sh --cache-dir "${XDG_CACHE_HOME:-$HOME/.cache}/durable-ops/mypy"
echo "== pytest"
# Whole files per process (--dist loadfile): a module's fixtures (a Galera cluster, a
# browser) start once. One process more than the cores: most tests wait on processes,
# leases and timers (ADR 70), and the files go out in the order tests/conftest.py gives
# them, the longest first (xdist's own order, most tests first, sent every one-test drill
# last). OPS_TEST_PROCESSES=0 runs everything in this process.
.venv/bin/pytest -n "${OPS_TEST_PROCESSES:-$(($(nproc) + 1))}" --dist loadfile \
  --no-loadscope-reorder "$@"
