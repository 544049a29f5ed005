#!/bin/sh
# Writes PgBouncer's config from the environment at start (the password never enters the
# image) and runs it: transaction pooling, at most POOL_SIZE server connections per database,
# MAX_CLIENTS workers. dvt-hpo's creation lock is transaction-level and it prepares no
# server-side statements, both of which transaction pooling needs.
set -eu
conf=/tmp/pgbouncer
mkdir -p "$conf"
umask 077
printf '"%s" "%s"\n' "$POSTGRES_USER" "$POSTGRES_PASSWORD" >"$conf/userlist.txt"
cat >"$conf/pgbouncer.ini" <<INI
[databases]
* = host=${DB_HOST:-postgres} port=${DB_PORT:-5432}
[pgbouncer]
listen_addr = 0.0.0.0
listen_port = 6432
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $conf/userlist.txt
pool_mode = transaction
default_pool_size = ${POOL_SIZE:-20}
max_client_conn = ${MAX_CLIENTS:-1000}
ignore_startup_parameters = extra_float_digits,options
INI
exec pgbouncer "$conf/pgbouncer.ini"
