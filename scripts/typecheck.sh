#!/usr/bin/env bash
# mypy --strict over the durable_ops package, the tests, scripts and benchmarks.
#
# The installed package durable_ops is mapped from services/ and migrations/ by
# pyproject.toml; mypy knows no such mapping, so this lays the package out as
# links under build/typecheck (mypy_path) and checks it under its real name.
# Extra arguments go to mypy (e.g. --cache-dir for a second, concurrent run).
set -euo pipefail
cd "$(dirname "$0")/.."
tree=build/typecheck/durable_ops
mkdir -p "$tree"
find "$tree" -maxdepth 1 -type l ! -exec test -e {} \; -delete  # entries since removed
for entry in services/*; do
  ln -sfn "../../../$entry" "$tree/$(basename "$entry")"
done
ln -sfn ../../../migrations "$tree/migrations"
exec .venv/bin/mypy "$tree" tests scripts benchmarks "$@"
