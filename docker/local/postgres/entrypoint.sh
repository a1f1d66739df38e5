#!/bin/bash
# What the official postgres image's entrypoint does, for the variables the compose file sets:
# a first start runs initdb with POSTGRES_USER as the superuser and POSTGRES_PASSWORD as its
# password, creates POSTGRES_DB, and accepts password logins from the network; every start then
# runs the server in the foreground as the postgres user.
set -euo pipefail
# POSTGRES_PASSWORD_FILE (a compose secret under /run/secrets/) is read when POSTGRES_PASSWORD is
# empty, as the official image does (which refuses both set at once).
if [ -z "${POSTGRES_PASSWORD:-}" ] && [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
  POSTGRES_PASSWORD="$(cat "$POSTGRES_PASSWORD_FILE" 2>/dev/null)" \
    || { echo "postgres-entrypoint: POSTGRES_PASSWORD_FILE=$POSTGRES_PASSWORD_FILE: cannot read the secret file" >&2; exit 2; }
  export POSTGRES_PASSWORD
fi
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE}"
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 0700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then  # initdb makes only `postgres` (and the templates)
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    psql -v ON_ERROR_STOP=1 -U "$user" -d postgres -c "CREATE DATABASE \"$db\" OWNER \"$user\"" >/dev/null
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  fi
  echo "postgres-entrypoint: initialised $PGDATA (user $user, database $db)"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
