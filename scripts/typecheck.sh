#!/usr/bin/env bash
# mypy --strict over the durable_ops package, the tests, scripts and benchmarks.
#
# The installed package durable_ops is mapped from services/ and migrations/ by
# pyproject.toml; mypy knows no such mapping, so this lays the package out as
# links under build/typecheck (mypy_path) and checks it under its real name.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=build/typecheck/durable_ops
rm -rf build/typecheck
mkdir -p "$tree"
for entry in services/*; do
  ln -s "../../../$entry" "$tree/"
done
ln -s ../../../migrations "$tree/migrations"
exec .venv/bin/mypy "$tree" tests scripts benchmarks "$@"
