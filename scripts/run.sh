#!/usr/bin/env bash
# Sets up and runs the whole product on the embedded SQLite database.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/opsctl up "$@"
