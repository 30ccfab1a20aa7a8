#!/usr/bin/env bash
# Starts the PostgreSQL the tests use: Debian's server on 127.0.0.1:5432, trust auth for
# local TCP connections, database `test` owned by `postgres`. Idempotent: a running
# server with the database is left as it is. Run by `make postgres` (and so by `make test`).
set -euo pipefail
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
if psql -h 127.0.0.1 -U postgres -d test -Atc 'select 1' >/dev/null 2>&1; then exit 0; fi
if ! dpkg -s postgresql >/dev/null 2>&1; then
  echo "installing postgresql (Debian)"
  $SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q postgresql
fi
read -r ver cluster port _ < <(pg_lsclusters -h | sort -k1,1V | tail -1)
if [ -z "${ver:-}" ]; then
  ver=$(ls /usr/lib/postgresql | sort -V | tail -1); cluster=main; port=5432
  $SUDO pg_createcluster "$ver" "$cluster" --port 5432
fi
conf=/etc/postgresql/$ver/$cluster
if [ "$port" != 5432 ]; then $SUDO sed -i "s/^port = .*/port = 5432/" "$conf/postgresql.conf"; fi
# trust for loopback TCP (the tests' URL has no password); the rest of the file as Debian made it
if ! $SUDO grep -q '^host all all 127.0.0.1/32 trust' "$conf/pg_hba.conf"; then
  $SUDO sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$conf/pg_hba.conf"
fi
$SUDO sed -i "s/^#\?listen_addresses = .*/listen_addresses = 'localhost'/" "$conf/postgresql.conf"
$SUDO pg_ctlcluster "$ver" "$cluster" restart
for _ in $(seq 1 60); do
  pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5
done
psql -h 127.0.0.1 -U postgres -d postgres -Atc "select 1 from pg_database where datname='test'" | grep -q 1 \
  || psql -h 127.0.0.1 -U postgres -d postgres -c 'create database test' >/dev/null
echo "PostgreSQL $ver on 127.0.0.1:5432 (trust), database test"
