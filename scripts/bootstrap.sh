#!/usr/bin/env bash
# Creates .venv and installs durable-ops into it. Idempotent, and instant when
# nothing changed since the last install (pyproject.toml's hash is kept in .venv).
#
#   scripts/bootstrap.sh         the product with its test and benchmark tools (scripts/test.sh)
#   scripts/bootstrap.sh --run   only what running the product needs (scripts/run.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="[dev,bench]"
if [ "${1:-}" = "--run" ]; then
  extras=""
fi
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi

stamp=.venv/durable-ops-installed
wanted=$(sha256sum pyproject.toml | cut -d' ' -f1)
installed="" installed_extras=""
if [ -f "$stamp" ]; then
  read -r installed installed_extras <"$stamp" || true
fi
# A light run is satisfied by a full install of the same pyproject.toml, not the reverse.
if [ "$installed" = "$wanted" ] && { [ -z "$extras" ] || [ "$installed_extras" = "$extras" ]; } \
   && [ -x .venv/bin/opsctl ]; then
  exit 0
fi
# uv installs the same packages in a third of pip's time (its cache is ~/.cache/uv);
# pip does it when uv cannot be had.
if .venv/bin/python -m pip install --quiet --disable-pip-version-check uv 2>/dev/null \
   && .venv/bin/uv pip install --quiet --python .venv/bin/python -e ".$extras"; then
  :
else
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".$extras"
fi
echo "$wanted $extras" >"$stamp"
