#!/usr/bin/env bash
# Fault schedules over the product on a three-node Galera cluster whose nodes live in their
# own network namespaces, each checked from the recorded history of every client call
# (issue 40; docs/partitions.md).
#
#   scripts/jepsen.sh            short schedules (about 10 s of load each, as the suite runs)
#   scripts/jepsen.sh --full     60 s of load per schedule, rounds of 4 s calm + 15 s fault
#   scripts/jepsen.sh --full --schedules partition-1\|2,node-kill --out var/jepsen/run1
#   scripts/jepsen.sh --schedules cluster-crash --flush-log-at-trx-commit 0   # shows the loss
#
# Prints, per schedule: calls, ok/fail/unknown, and every checker count; exits 1 when a
# count the product promises is not 0. Needs root (namespaces, iptables, the mysql user),
# mariadb-server and galera-4. Everything it makes (namespaces, bridge, the FORWARD rule,
# mariadbd and service processes, datadirs) is removed at the end, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "jepsen: needs root" >&2; exit 2; }
[ -x .venv/bin/python ] || scripts/bootstrap.sh
if ! command -v iptables >/dev/null && command -v apt-get >/dev/null; then
  echo "== installing iptables for the faults" >&2  # docker.io brings it on a CI machine
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null
fi
PYTHONPATH=. exec .venv/bin/python -m tests.partition.run "$@"
