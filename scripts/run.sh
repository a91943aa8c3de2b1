#!/usr/bin/env bash
# Sets up and runs the whole product on the embedded SQLite database.
# Installs only what running needs, at the versions uv.lock pins; arguments go to
# `opsctl up` (e.g. --port-base 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --run
exec .venv/bin/opsctl up "$@"
