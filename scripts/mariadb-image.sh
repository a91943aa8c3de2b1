#!/usr/bin/env bash
# Builds a MariaDB image for the tests offline, from Debian's packages, for a
# Docker engine that cannot pull (air-gapped CI). Idempotent: does nothing when
# the image exists. Needs root, debootstrap and a Debian mirror (apt's).
#
#   scripts/mariadb-image.sh [IMAGE]        # default durable-ops/mariadb:10.11-bookworm
#   OPS_TEST_MARIADB_IMAGE=IMAGE pytest …    # then testcontainers starts it
#
# How: `debootstrap --variant=minbase bookworm` into a folder under
# ${XDG_CACHE_HOME:-~/.cache}/durable-ops/ (never the repository), `apt-get
# install mariadb-server` in a chroot, a small entrypoint that honours the
# official image's MARIADB_* (and MYSQL_*) variables, then `tar | docker import`.
# The root filesystem is kept, stamped with this script's checksum, so a second
# build after `docker rmi` only imports; a changed script rebuilds it.
# Progress goes to stderr; the image name is the one line on stdout.
set -euo pipefail

image=${1:-durable-ops/mariadb:10.11-bookworm}
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/durable-ops
rootfs=$cache/mariadb-$suite-rootfs
stamp_file=$rootfs/.durable-ops-stamp
stamp=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)  # the recipe

say() { printf '== %s (at %ss)\n' "$*" "$SECONDS" >&2; }

if docker image inspect "$image" >/dev/null 2>&1; then
  say "image $image exists; nothing to do"
  echo "$image"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "scripts/mariadb-image.sh: needs root (debootstrap, chroot)" >&2
  exit 1
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

mkdir -p "$cache"
exec 9>"$cache/mariadb-image.lock"
flock 9  # one build at a time; a second caller waits, then finds the image

if docker image inspect "$image" >/dev/null 2>&1; then
  say "image $image was built meanwhile"
  echo "$image"
  exit 0
fi

if [ "$(cat "$stamp_file" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$rootfs"
  say "debootstrap --variant=minbase $suite into $rootfs"
  debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 \
    || { tail -n 20 "$cache/debootstrap.log" >&2; exit 1; }

  say "apt-get install mariadb-server (in the chroot)"
  printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"  # start no service
  chmod 755 "$rootfs/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security_mirror $suite-security main
EOF
  in_root() {
    chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
      DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 "$@"
  }
  {
    in_root apt-get update -qq
    in_root apt-get install -y -qq --no-install-recommends mariadb-server
    in_root apt-get clean
  } >"$cache/apt.log" 2>&1 || { tail -n 20 "$cache/apt.log" >&2; exit 1; }
  # The package initialised a datadir; a container initialises its own from the
  # environment it is given, as the official image's does.
  rm -rf "$rootfs"/var/lib/mysql/* "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs/usr/sbin/policy-rc.d"
  : >"$rootfs/etc/resolv.conf"

  cat >"$rootfs/etc/mysql/mariadb.conf.d/99-container.cnf" <<'EOF'
# durable-ops test image: listen on every interface, as the official image does.
[mariadbd]
user = mysql
bind-address = 0.0.0.0
skip-name-resolve
host-cache-size = 0
EOF

  cat >"$rootfs/usr/local/bin/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
# Entrypoint of durable-ops' offline MariaDB image (scripts/mariadb-image.sh):
# the official mariadb image's contract, as far as tests use it. On an empty
# datadir it initialises one, starts a temporary socket-only server, applies
# MARIADB_ROOT_PASSWORD | MARIADB_ALLOW_EMPTY_ROOT_PASSWORD |
# MARIADB_RANDOM_ROOT_PASSWORD, MARIADB_ROOT_HOST, MARIADB_DATABASE,
# MARIADB_USER + MARIADB_PASSWORD (MYSQL_* accepted too, as testcontainers
# sets those) and /docker-entrypoint-initdb.d/*.sql, stops it, then execs the
# real server. Each server logs "mariadbd: ready for connections." so, as with
# the official image, the line appears twice: testcontainers' MySqlContainer
# waits for the second one.
set -eu

root_password=${MARIADB_ROOT_PASSWORD:-${MYSQL_ROOT_PASSWORD:-}}
allow_empty=${MARIADB_ALLOW_EMPTY_ROOT_PASSWORD:-${MYSQL_ALLOW_EMPTY_PASSWORD:-}}
random_root=${MARIADB_RANDOM_ROOT_PASSWORD:-${MYSQL_RANDOM_ROOT_PASSWORD:-}}
root_host=${MARIADB_ROOT_HOST:-${MYSQL_ROOT_HOST:-%}}
database=${MARIADB_DATABASE:-${MYSQL_DATABASE:-}}
user=${MARIADB_USER:-${MYSQL_USER:-}}
password=${MARIADB_PASSWORD:-${MYSQL_PASSWORD:-}}
datadir=/var/lib/mysql
socket=/run/mysqld/mysqld.sock

note() { printf "%s 0 [Note] [Entrypoint]: %s\n" "$(date "+%F %T")" "$*"; }
die() { printf "%s 0 [ERROR] [Entrypoint]: %s\n" "$(date "+%F %T")" "$*" >&2; exit 1; }
sql_string() { printf "'%s'" "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e "s/'/\\\\'/g")"; }
sql() { printf '%s\n' "$*"; }  # not echo: dash's echo eats backslashes
sql_name() { printf '`%s`' "$(printf '%s' "$1" | sed -e 's/`/``/g')"; }

if [ $# -eq 0 ] || [ "${1#-}" != "$1" ]; then
  set -- mariadbd "$@"
fi
if [ "$1" != mariadbd ] && [ "$1" != mysqld ]; then
  exec "$@"
fi

mkdir -p /run/mysqld "$datadir"
chown mysql:mysql /run/mysqld "$datadir"

if [ ! -d "$datadir/mysql" ]; then
  if [ -z "$root_password" ] && [ -z "$allow_empty" ] && [ -z "$random_root" ]; then
    die "Database is uninitialized and password option is not specified
	You need to specify one of MARIADB_ROOT_PASSWORD, MARIADB_ALLOW_EMPTY_ROOT_PASSWORD and MARIADB_RANDOM_ROOT_PASSWORD"
  fi
  if [ "$user" = root ]; then
    die "MARIADB_USER=\"root\", MARIADB_USER and MARIADB_PASSWORD are for configuring a regular user and cannot be used for the root user"
  fi
  if [ -n "$random_root" ]; then
    root_password=$(tr -dc 'A-Za-z0-9' </dev/urandom | head -c 32)
    note "GENERATED ROOT PASSWORD: $root_password"
  fi

  note "Initializing database files"
  mariadb-install-db --user=mysql --datadir="$datadir" --skip-test-db \
    --auth-root-authentication-method=normal --skip-name-resolve >/dev/null
  note "Database files initialized"

  note "Starting temporary server"
  "$@" --skip-networking --socket="$socket" &
  pid=$!
  tries=0
  until mariadb-admin --protocol=socket --socket="$socket" -uroot ping >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || die "the temporary server exited"
    tries=$((tries + 1))
    [ "$tries" -lt 300 ] || die "the temporary server did not answer within 30 s"
    sleep 0.1
  done
  note "Temporary server started."

  {
    sql "SET @@SESSION.SQL_LOG_BIN=0;"
    sql "DELETE FROM mysql.global_priv WHERE User = '' OR (User = 'root' AND Host NOT IN ('localhost'));"
    sql "DELETE FROM mysql.proxies_priv WHERE Host NOT IN ('localhost');"
    sql "FLUSH PRIVILEGES;"
    if [ -n "$root_password" ]; then
      sql "ALTER USER 'root'@'localhost' IDENTIFIED BY $(sql_string "$root_password");"
    fi
    if [ "$root_host" != localhost ]; then
      sql "CREATE USER 'root'@$(sql_string "$root_host") IDENTIFIED BY $(sql_string "$root_password");"
      sql "GRANT ALL ON *.* TO 'root'@$(sql_string "$root_host") WITH GRANT OPTION;"
      sql "GRANT PROXY ON ''@'%' TO 'root'@$(sql_string "$root_host") WITH GRANT OPTION;"
    fi
    if [ -n "$database" ]; then
      note "Creating database $database" >&2
      sql "CREATE DATABASE IF NOT EXISTS $(sql_name "$database");"
    fi
    if [ -n "$user" ]; then
      note "Creating user $user" >&2
      sql "CREATE USER $(sql_string "$user")@'%' IDENTIFIED BY $(sql_string "$password");"
      if [ -n "$database" ]; then
        note "Giving user $user access to schema $database" >&2
        sql "GRANT ALL ON $(sql_name "$database").* TO $(sql_string "$user")@'%';"
      fi
    fi
  } | mariadb --protocol=socket --socket="$socket" -uroot

  for file in /docker-entrypoint-initdb.d/*.sql; do
    [ -e "$file" ] || continue
    note "running $file"
    mariadb --protocol=socket --socket="$socket" -uroot --password="$root_password" \
      ${database:+"--database=$database"} <"$file"
  done

  note "Stopping temporary server"
  kill "$pid"
  wait "$pid" || true
  note "Temporary server stopped"
  note "MariaDB init process done. Ready for start up."
fi

exec "$@"
EOF
  chmod 755 "$rootfs/usr/local/bin/docker-entrypoint.sh"
  mkdir -p "$rootfs/docker-entrypoint-initdb.d"
  echo "$stamp" >"$stamp_file"
else
  say "reusing the root filesystem in $rootfs"
fi

say "docker import as $image"
tar -C "$rootfs" --numeric-owner --exclude=./.durable-ops-stamp -c . \
  | docker import \
      --change 'ENV LANG=C.UTF-8' \
      --change 'EXPOSE 3306' \
      --change 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' \
      --change 'CMD ["mariadbd"]' \
      --message "MariaDB from Debian $suite packages, built by scripts/mariadb-image.sh" \
      - "$image" >/dev/null
say "built $image"
echo "$image"
