#!/usr/bin/env bash
# Local PostgreSQL cluster for development and benchmarks.
#
#   scripts/pg-local.sh start  DATADIR [PORT]   # init if needed, start, create db "push"
#   scripts/pg-local.sh stop   DATADIR          # fast shutdown if running
#   scripts/pg-local.sh status DATADIR          # exit 0 and print the URL if running
#
# "start" prints exactly one line on stdout, the DATABASE_URL
# (postgres://push@127.0.0.1:PORT/push?sslmode=disable); every other message
# goes to stderr, so callers can do: URL=$(scripts/pg-local.sh start DIR | tail -n1)
#
# Layout: DATADIR/pgdata (cluster), DATADIR/run (unix socket), DATADIR/postgres.log.
#
# Security note: the cluster uses trust authentication for superuser "push".
# That is acceptable only because it listens on 127.0.0.1 and on a socket
# inside DATADIR; it is a throwaway dev/bench cluster, never a deployment.
set -euo pipefail

PG_OS_USER=pushpg          # postgres refuses to run as root; used only when we are root
DEFAULT_PORT=55432
DB_USER=push
DB_NAME=push

log() { echo "pg-local: $*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    echo "usage: $0 start DATADIR [PORT] | stop DATADIR | status DATADIR" >&2
    exit 2
}

[[ $# -ge 2 ]] || usage
CMD=$1
if [[ $CMD == start ]]; then
    mkdir -p "$2"
elif [[ ! -d $2 ]]; then
    log "not running ($2 does not exist)"
    [[ $CMD == status ]] && exit 3
    exit 0
fi
DATADIR=$(cd "$2" && pwd)   # absolute: pg_ctl and the socket dir need it
PGDATA_DIR=$DATADIR/pgdata
RUN_DIR=$DATADIR/run
LOG_FILE=$DATADIR/postgres.log

# Newest installed server binaries (Debian puts them outside PATH).
find_pgbin() {
    local f best=
    # Glob order is lexical (10 < 9); sort -V picks the real newest version.
    # An unmatched glob stays literal and fails the -x test: prints nothing.
    while read -r f; do
        [[ -x $f ]] && best=${f%/initdb}
    done < <(printf '%s\n' /usr/lib/postgresql/*/bin/initdb | sort -V)
    echo "$best"
}

PGBIN=$(find_pgbin)

# As root, run server tools as an unprivileged user; otherwise run them directly.
AS_PG=()
if [[ $(id -u) -eq 0 ]]; then
    AS_PG=(runuser -u "$PG_OS_USER" --)
fi
# cd first: the server user may not be able to read the caller's cwd (e.g. /root).
pg() { (cd "$DATADIR" && "${AS_PG[@]}" "$@"); }

is_running() {
    [[ -n $PGBIN && -f $PGDATA_DIR/PG_VERSION ]] || return 1
    pg "$PGBIN/pg_ctl" status -D "$PGDATA_DIR" >/dev/null 2>&1
}

# Port of the running server, from line 4 of postmaster.pid.
running_port() { sed -n 4p "$PGDATA_DIR/postmaster.pid"; }

url_for() { echo "postgres://$DB_USER@127.0.0.1:$1/$DB_NAME?sslmode=disable"; }

ensure_pg_installed() {
    [[ -n $PGBIN ]] && return 0
    [[ $(id -u) -eq 0 ]] || die "no /usr/lib/postgresql/*/bin/initdb; install postgresql (needs root)"
    log "installing postgresql with apt"
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >&2
    PGBIN=$(find_pgbin)
    [[ -n $PGBIN ]] || die "postgresql installed but initdb not found"
}

ensure_os_user() {
    [[ $(id -u) -eq 0 ]] || return 0
    if ! id "$PG_OS_USER" >/dev/null 2>&1; then
        log "creating system user $PG_OS_USER"
        useradd --system --no-create-home --shell /usr/sbin/nologin "$PG_OS_USER"
    fi
    # The server user must own DATADIR (log file, socket dir, pgdata).
    chown "$PG_OS_USER:" "$DATADIR"
    pg test -w "$DATADIR" \
        || die "$PG_OS_USER cannot write $DATADIR (a parent directory is not traversable?)"
}

cmd_start() {
    local port=${1:-$DEFAULT_PORT}
    [[ $port =~ ^[0-9]+$ ]] || die "bad port: $port"

    ensure_pg_installed
    ensure_os_user

    if is_running; then
        port=$(running_port)
        log "already running on port $port ($PGDATA_DIR)"
        url_for "$port"
        return 0
    fi

    if [[ ! -f $PGDATA_DIR/PG_VERSION ]]; then
        log "initdb $PGDATA_DIR"
        # Init into a temp dir and rename, so an interrupted initdb never leaves
        # a half-made pgdata that a later run would mistake for a cluster.
        rm -rf "$PGDATA_DIR.tmp"
        if ! pg "$PGBIN/initdb" -D "$PGDATA_DIR.tmp" -U "$DB_USER" --auth=trust \
                -E UTF8 --locale=C >"$DATADIR/initdb.log" 2>&1; then
            cat "$DATADIR/initdb.log" >&2
            die "initdb failed"
        fi
        # Settings live in the config file so a plain "pg_ctl start" works too.
        # Benchmark-friendly sizing; durability settings stay at their defaults
        # so benchmark numbers stay honest.
        cat >>"$PGDATA_DIR.tmp/postgresql.conf" <<EOF

# --- added by scripts/pg-local.sh ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$RUN_DIR'
max_connections = 200
shared_buffers = 256MB
logging_collector = off
# Checkpoints on a timer, not every ~500 MB of WAL: at a few thousand writes per second the
# default max_wal_size (1GB) checkpoints every half minute, and each one floods the WAL with
# full-page images. Sizing, not durability.
max_wal_size = 4GB
checkpoint_timeout = 15min
EOF
        mv "$PGDATA_DIR.tmp" "$PGDATA_DIR"
    fi

    mkdir -p "$RUN_DIR"
    [[ $(id -u) -eq 0 ]] && chown "$PG_OS_USER:" "$RUN_DIR"

    log "starting on 127.0.0.1:$port (log: $LOG_FILE)"
    # Port is passed on the command line so each start may choose it.
    if ! pg "$PGBIN/pg_ctl" start -D "$PGDATA_DIR" -l "$LOG_FILE" -w -t 60 \
            -o "-p $port -k $RUN_DIR" >&2; then
        tail -n 20 "$LOG_FILE" >&2 || true
        die "postgres failed to start (port $port in use?)"
    fi

    # Create the application database if missing (psql -X: ignore ~/.psqlrc).
    local psql=("$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U "$DB_USER")
    if [[ -z $("${psql[@]}" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'") ]]; then
        log "creating database $DB_NAME"
        "${psql[@]}" -d postgres -c "CREATE DATABASE $DB_NAME OWNER $DB_USER" >&2
    fi

    url_for "$port"
}

cmd_stop() {
    if is_running; then
        log "stopping ($PGDATA_DIR)"
        pg "$PGBIN/pg_ctl" stop -D "$PGDATA_DIR" -m fast -w -t 60 >&2
    else
        log "not running ($PGDATA_DIR)"
    fi
}

cmd_status() {
    if is_running; then
        url_for "$(running_port)"
    else
        log "not running ($PGDATA_DIR)"
        return 3
    fi
}

case $CMD in
    start)  [[ $# -le 3 ]] || usage; cmd_start "${3:-}" ;;
    stop)   [[ $# -eq 2 ]] || usage; cmd_stop ;;
    status) [[ $# -eq 2 ]] || usage; cmd_status ;;
    *)      usage ;;
esac
