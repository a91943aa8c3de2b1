#!/usr/bin/env bash
# A MariaDB Galera cluster on loopback, for tests and drills: galera.sh start|stop|status|kill [N] [DIR]
#
#   start   create (first time) or start every node of an N-node cluster (default 3) under
#           DIR (default var/galera); waits until every node is Synced; prints one SQL URL
#           per node. A node that is down while others run is recovered first
#           (--wsrep-recover, then --wsrep_start_position), so it rejoins by IST.
#           After a crash of every node, the one with the highest recovered seqno
#           bootstraps the cluster.
#   stop    a clean shutdown of every node (the last one stopped may bootstrap next time)
#   status  each node: its URL and wsrep_local_state_comment, or "down"
#   kill I  SIGKILL node I (1-based), as a crash would (drills)
#
# Node I listens for SQL on 127.0.0.1:$((GALERA_PORT_BASE + I - 1)) (default 3311...) and
# for Galera on GALERA_GROUP_PORT_BASE + 10(I-1) (default 4567; group), +1 (IST), and
# GALERA_SST_PORT_BASE + 10(I-1) (default 4444; SST). Needs root: the servers run as the
# mysql user (rsync SST refuses root-owned datadirs), which owns DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
command=${1:-status}
nodes=${2:-3}
dir=${3:-$here/var/galera}
port_base=${GALERA_PORT_BASE:-3311}
group_base=${GALERA_GROUP_PORT_BASE:-4567}
sst_base=${GALERA_SST_PORT_BASE:-4444}
provider=${GALERA_PROVIDER:-/usr/lib/galera/libgalera_smm.so}
wait_seconds=${GALERA_WAIT_SECONDS:-90}

say() { echo "galera: $*" >&2; }
port_of() { echo $((port_base + $1 - 1)); }
group_port_of() { echo $((group_base + 10 * ($1 - 1))); }
node_dir() { echo "$dir/node$1"; }
url_of() { echo "mysql+pymysql://root@127.0.0.1:$(port_of "$1")/"; }
sql() { mariadb --host=127.0.0.1 --port="$(port_of "$1")" --user=root --batch --skip-column-names \
  --connect-timeout=2 -e "$2" 2>/dev/null; }
state_of() { sql "$1" "SHOW STATUS LIKE 'wsrep_local_state_comment'" | awk '{print $2}'; }
pid_of() { cat "$(node_dir "$1")/mariadbd.pid" 2>/dev/null || true; }
# Alive and not a zombie (a killed node whose parent has not reaped it yet).
running() {
  local pid
  pid=$(pid_of "$1")
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] && ! awk '{exit $3 != "Z"}' "/proc/$pid/stat"
}

cluster_address() {
  local addresses=() i
  for i in $(seq 1 "$nodes"); do addresses+=("127.0.0.1:$(group_port_of "$i")"); done
  (IFS=,; echo "gcomm://${addresses[*]}")
}

write_config() {
  local i=$1 base group
  base=$(node_dir "$i")
  group=$(group_port_of "$i")
  cat >"$base/my.cnf" <<EOF
[mariadbd]
datadir=$base/data
socket=$base/mariadbd.sock
pid-file=$base/mariadbd.pid
log-error=$base/error.log
port=$(port_of "$i")
bind-address=127.0.0.1
user=mysql
skip-name-resolve
innodb_buffer_pool_size=64M
innodb_log_file_size=32M
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
wsrep_on=ON
wsrep_provider=$provider
wsrep_cluster_name=durable-ops-test
wsrep_cluster_address=$(cluster_address)
wsrep_node_name=node$i
wsrep_node_address=127.0.0.1:$group
wsrep_provider_options="base_host=127.0.0.1;base_port=$group;gmcast.listen_addr=tcp://127.0.0.1:$group;ist.recv_addr=127.0.0.1:$((group + 1))"
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:$((sst_base + 10 * (i - 1)))
EOF
}

create_node() {
  local i=$1 base
  base=$(node_dir "$i")
  mkdir -p "$base"
  write_config "$i"
  if [ ! -d "$base/data/mysql" ]; then
    say "node $i: creating its datadir"
    mariadb-install-db --defaults-file="$base/my.cnf" --auth-root-authentication-method=normal \
      --skip-test-db >"$base/install.log" 2>&1
  fi
  chown -R mysql:mysql "$base"
}

# Start node I in the background; extra arguments go to mariadbd.
launch() {
  local i=$1
  shift
  # exec: no shell stays behind holding the caller's output open.
  (cd / && exec setsid mariadbd --defaults-file="$(node_dir "$i")/my.cnf" "$@" \
    </dev/null >/dev/null 2>&1) &
}

wait_synced() {
  local i=$1 deadline=$((SECONDS + wait_seconds))
  until [ "$(state_of "$i")" = "Synced" ]; do
    if [ $SECONDS -ge $deadline ]; then
      say "node $i did not reach Synced in ${wait_seconds}s; its log: $(node_dir "$i")/error.log"
      tail -n 20 "$(node_dir "$i")/error.log" >&2
      exit 1
    fi
    sleep 0.5
  done
}

# The node whose grastate.dat says it may bootstrap: the last one stopped cleanly.
bootstrap_candidate() {
  local i
  for i in $(seq 1 "$nodes"); do
    if grep -q '^safe_to_bootstrap: 1' "$(node_dir "$i")/data/grastate.dat" 2>/dev/null; then
      echo "$i"
      return
    fi
  done
  [ -f "$(node_dir 1)/data/grastate.dat" ] || { echo 1; return; }  # a new cluster
  echo ""
}

# A crashed node's last committed position (uuid:seqno) from its InnoDB logs, or "".
recovered_position() {
  local i=$1 log
  log=$(node_dir "$i")/recover.log
  rm -f "$log"
  mariadbd --defaults-file="$(node_dir "$i")/my.cnf" --wsrep-recover --log-error="$log" \
    >/dev/null 2>&1 || true
  chown -R mysql:mysql "$(node_dir "$i")"
  sed -n 's/.*WSREP: Recovered position: *\([^ ]*\).*/\1/p' "$log" | tail -n 1
}

# After a crash of every node: the one whose recovered seqno is highest (it has seen most).
most_advanced_node() {
  local i position seqno best=1 best_seqno=-2
  for i in $(seq 1 "$nodes"); do
    position=$(recovered_position "$i")
    seqno=${position##*:}
    say "node $i: recovered position ${position:-none}"
    if [ -n "$position" ] && [ "$seqno" -gt "$best_seqno" ]; then
      best=$i
      best_seqno=$seqno
    fi
  done
  echo "$best"
}

# A node that crashed: its last committed position, so that it rejoins by IST.
recover_and_launch() {
  local i=$1 position
  position=$(recovered_position "$i")
  if [ -n "$position" ]; then
    say "node $i: recovered position $position"
    launch "$i" --wsrep_start_position="$position"
  else
    launch "$i"
  fi
}

start() {
  [ "$(id -u)" = 0 ] || { say "needs root (the nodes run as the mysql user)"; exit 2; }
  mkdir -p "$dir"
  chown mysql:mysql "$dir"
  if ! runuser -u mysql -- test -x "$dir"; then
    say "the mysql user cannot reach $dir (a parent folder is private): choose another DIR"
    exit 2
  fi
  local i any_up=""
  for i in $(seq 1 "$nodes"); do
    create_node "$i"
    running "$i" && any_up=$i
  done
  if [ -z "$any_up" ]; then
    local first
    first=$(bootstrap_candidate)
    if [ -z "$first" ]; then
      # Every node crashed: the one with the highest recovered seqno may bootstrap.
      first=$(most_advanced_node)
      crashed_all=1
      sed -i 's/^safe_to_bootstrap: 0/safe_to_bootstrap: 1/' "$(node_dir "$first")/data/grastate.dat"
      say "every node had crashed; bootstrapping node $first, the most advanced"
    fi
    say "node $first: bootstrapping the cluster"
    if [ -n "${crashed_all:-}" ]; then
      launch "$first" --wsrep-new-cluster --wsrep_start_position="$(recovered_position "$first")"
    else
      launch "$first" --wsrep-new-cluster
    fi
    wait_synced "$first"
    any_up=$first
  fi
  for i in $(seq 1 "$nodes"); do
    running "$i" && continue
    say "node $i: joining"
    recover_and_launch "$i"
    wait_synced "$i"
  done
  for i in $(seq 1 "$nodes"); do url_of "$i"; done
}

stop() {
  local i pid
  for i in $(seq "$nodes" -1 1); do
    running "$i" || continue
    pid=$(pid_of "$i")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    say "node $i stopped"
  done
}

status() {
  local i
  for i in $(seq 1 "$nodes"); do
    if running "$i"; then
      echo "node$i $(url_of "$i") $(state_of "$i" || echo unknown)"
    else
      echo "node$i $(url_of "$i") down"
    fi
  done
}

case "$command" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  kill)
    pid=$(pid_of "$nodes")  # here the second argument is the node
    [ -n "$pid" ] && kill -9 "$pid" && say "node $nodes killed"
    ;;
  *) say "usage: galera.sh start|stop|status [N] [DIR] | kill I [DIR]"; exit 2 ;;
esac
