#!/usr/bin/env bash
# Creates .venv and installs durable-ops into it from the lock (uv.lock; scripts/lock.sh
# updates it). Idempotent, and instant when nothing changed since the last install
# (the hash of pyproject.toml and uv.lock is kept in .venv).
#
#   scripts/bootstrap.sh         the product with its test and benchmark tools (scripts/test.sh)
#   scripts/bootstrap.sh --run   only what running the product needs (scripts/run.sh)
#
# uv installs exactly the locked versions (`uv sync --frozen`: the lock as committed,
# never re-resolved) in a third of pip's time; its cache is ~/.cache/uv. When uv cannot
# be had, pip installs the same versions from the lock's export, requirements/*.txt,
# checking every file's hash. The sync is --inexact: it adds and changes, and removes
# nothing, so a light run keeps the tools a full one installed, and pip and uv stay.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=(--extra dev --extra bench)
requirements=requirements/dev.txt
mode=full
if [ "${1:-}" = "--run" ]; then
  extras=()
  requirements=requirements/run.txt
  mode=run
fi
python=${PYTHON:-python3}
step() { echo "bootstrap: $*"; }  # one line per step; nothing at all when it is up to date
if [ ! -x .venv/bin/python ]; then
  step "creating the environment (.venv, $("$python" --version 2>&1))…"
  "$python" -m venv .venv
fi

# The project's own modules: an editable install, so the sync below compiles none of them,
# and where Python may not write its caches (PYTHONDONTWRITEBYTECODE, set on the CI
# machines) every process compiled what it imported, about 0.3 s of CPU a start (the
# operations service imports in 1.25 s instead of 1.6; the tests start some thousand
# processes). Run on every call: compileall skips what is current, and a checkout moves
# the sources.
compile_own() { .venv/bin/python -m compileall -q -j 0 services >/dev/null; }

stamp=.venv/durable-ops-installed
wanted=$(cat pyproject.toml uv.lock | sha256sum | cut -d' ' -f1)
installed="" installed_mode=""
if [ -f "$stamp" ]; then
  read -r installed installed_mode <"$stamp" || true
fi
# A light run is satisfied by a full install of the same lock, not the reverse.
if [ "$installed" = "$wanted" ] && { [ "$mode" = run ] || [ "$installed_mode" = full ]; } \
   && [ -x .venv/bin/opsctl ]; then
  compile_own
  exit 0
fi

# The uv that uv.lock pins (it is a dev dependency), installed by pip when missing.
uv_version=$(sed -n '/^name = "uv"$/{n;s/^version = "\(.*\)"$/\1/p;q}' uv.lock)
have_uv() {
  [ -n "$uv_version" ] && [ -x .venv/bin/uv ] \
    && [ "$(.venv/bin/uv --version 2>/dev/null | cut -d' ' -f1-2)" = "uv $uv_version" ]
}
if ! have_uv; then
  step "installing uv $uv_version…"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "uv==$uv_version" \
    >/dev/null 2>&1 || true
fi
if have_uv; then
  step "installing durable-ops ($mode) at the versions uv.lock pins, with uv…"
  # Not --quiet: uv's progress (bars on a terminal) and its summary are the step's output.
  # --compile-bytecode: once here (5 s), not on every start where Python may not write
  # its caches (PYTHONDONTWRITEBYTECODE, a read-only tree): compiling SQLAlchemy, grpc
  # and the rest from source cost each start about 1.5 s of CPU (issue 38, warm start).
  UV_PYTHON_DOWNLOADS=never .venv/bin/uv sync --frozen --inexact --compile-bytecode "${extras[@]}"
else
  step "uv $uv_version cannot be installed; pip installs $requirements (hashes checked)…"
  .venv/bin/python -m pip install --disable-pip-version-check --progress-bar on \
    --require-hashes -r "$requirements"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
fi
compile_own
echo "$wanted $mode" >"$stamp"
