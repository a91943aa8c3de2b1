#!/usr/bin/env bash
# Updates the lock after a change to pyproject.toml's dependencies: uv.lock, and its
# exports under requirements/ that pip installs with --require-hashes when uv cannot
# be had (scripts/bootstrap.sh) and that the Dockerfile installs.
#
#   scripts/lock.sh                     lock what pyproject.toml asks for, keeping every
#                                       other locked version
#   scripts/lock.sh --upgrade           move every package to its newest allowed release
#   scripts/lock.sh --upgrade-package X only X
#
# tests/unit/test_lock.py fails while uv.lock or an export disagrees with pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=.venv/bin/uv
[ -x "$uv" ] || scripts/bootstrap.sh --run  # installs the uv that uv.lock pins
[ -x "$uv" ] || uv=$(command -v uv) || { echo "lock.sh: no uv (pip install uv)" >&2; exit 1; }
"$uv" lock "$@"
# The same commands as tests/unit/test_lock.py's EXPORTS: the header records each one.
"$uv" export --frozen --format requirements-txt --no-emit-project \
  >requirements/run.txt
"$uv" export --frozen --format requirements-txt --no-emit-project --extra dev --extra bench \
  >requirements/dev.txt
"$uv" lock --check --offline --quiet  # uv's own word that the lock is current
