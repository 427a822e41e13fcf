# The benchmark stack's pieces (sourced, not run): tools, release binaries, a local PostgreSQL,
# the bench devices and an earlier campaign, service accounts, the apps that use them,
# fcm-emulator and push-worker on loopback, and stopping what a script started. Written after
# bench/fanout/run.sh's own steps; bench/fanout, bench/latency and bench/registration use them.
#
# The caller runs from the repository root.

log() { echo "==> $*" >&2; }
die() { echo "run.sh: error: $*" >&2; exit 1; }   # die MESSAGE: print, and exit 1
# sql STATEMENT: psql against DATABASE_URL, unaligned tuples only, NOTICEs left out.
sql() { PGOPTIONS="-c client_min_messages=warning" psql "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -tA -c "$1"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }   # elapsed T0: seconds since, to the tenth

# apt_install DEBIAN_PACKAGE: apt-get install (as root; otherwise dies saying what to install).
apt_install() {
    [[ $(id -u) -eq 0 ]] || die "install Debian package $1 (needs root)"
    log "installing $1"
    DEBIAN_FRONTEND=noninteractive apt-get install -y "$1" >&2 \
        || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y "$1" >&2; }
}

# need_cmd COMMAND DEBIAN_PACKAGE: installs the package with apt-get when the command is missing
# (as root; otherwise dies saying what to install).
need_cmd() {
    command -v "$1" >/dev/null && return 0
    [[ $(id -u) -eq 0 ]] || die "install Debian package $2 for $1 (needs root)"
    apt_install "$2"
    command -v "$1" >/dev/null || die "$1 not found after installing $2"
}

# build_release BIN PRODUCT...: SKIP_BUILD unset: build the missing ones; 1: never; 0: always.
build_release() {
    local bin=$1 p
    shift
    for p in "$@"; do
        if [[ ${SKIP_BUILD:-} == 0 ]] || { [[ -z ${SKIP_BUILD:-} ]] && [[ ! -x $bin/$p ]]; }; then
            log "building $p (release)"
            swift build -c release --product "$p"
        fi
        [[ -x $bin/$p ]] || die "missing $bin/$p (build it, or unset SKIP_BUILD)"
    done
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }   # port_busy PORT

stop_pid() {  # stop_pid PID NAME SECONDS: SIGTERM, wait, then SIGKILL
    local pid=$1 name=$2 secs=$3
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 $((secs * 10))); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
}

# wait_http URL PID NAME LOG_FILE [STATE]: up to 30 s for URL to answer 2xx while process PID
# runs; dies with LOG_FILE's tail when PID exits first or the time is up ("NAME not STATE after
# 30 s"; STATE: ready).
wait_http() {
    local url=$1 pid=$2 name=$3 logf=$4 state=${5:-ready} i
    for i in $(seq 1 300); do   # up to 30 s
        curl -fs -o /dev/null --max-time 1 "$url" && return 0
        kill -0 "$pid" 2>/dev/null || { tail -n 30 "$logf" >&2; die "$name exited during startup"; }
        [[ $i == 300 ]] && { tail -n 30 "$logf" >&2; die "$name not $state after 30 s"; }
        sleep 0.1
    done
}

# start_local_pg DIR PORT: unless DATABASE_URL is set, a throw-away cluster in DIR
# (scripts/pg-local.sh) on PORT, started when not running (then STARTED_PG=1, for
# stop_local_pg); exports DATABASE_URL.
start_local_pg() {
    if [[ -z ${DATABASE_URL:-} ]]; then
        # Only stop PostgreSQL at the end if this run started it.
        scripts/pg-local.sh status "$1" >/dev/null 2>&1 || STARTED_PG=1
        DATABASE_URL=$(scripts/pg-local.sh start "$1" "$2" | tail -n1)
    fi
    export DATABASE_URL
    log "database: $DATABASE_URL"
}
stop_local_pg() {  # stop_local_pg DIR: the cluster start_local_pg started (STARTED_PG=1), if any
    if [[ ${STARTED_PG:-0} == 1 ]]; then
        log "stopping local PostgreSQL"
        scripts/pg-local.sh stop "$1" || true
    fi
}

# seed_campaign_tables HISTORY APP_ID:PREFIX:COUNT...: push_deliveries, push_job_chunks and
# push_jobs truncated (a partitioned push_deliveries gets its 30 days behind); push_devices re-seeded (truncated, filled, VACUUM ANALYZE) unless it holds
# exactly COUNT active devices of each APP_ID whose tokens start with PREFIX- and nothing else.
# Devices of an app: users 1..COUNT, one each, token PREFIX-USER-md5(USER) and 100 x's (~145
# characters; FCM's are ~150-165); no fcm-emulator prefix rule (unregistered-, invalid-, ...)
# matches a bench prefix. Then, with HISTORY > 0, one earlier, completed campaign of the first
# app to its first HISTORY devices, every delivery sent: a service that has sent before, so
# push_deliveries has rows and statistics (see bench/fanout/README.md, "A fresh push_deliveries").
seed_campaign_tables() {
    local history=$1 spec app prefix count filters= want= what= total=0 have
    shift
    for spec in "$@"; do
        IFS=: read -r app prefix count <<<"$spec"
        [[ $app =~ ^[0-9]+$ && $prefix =~ ^[a-z0-9]+$ && $count =~ ^[0-9]+$ ]] \
            || die "seed_campaign_tables: APP_ID:PREFIX:COUNT expected, got '$spec'"
        filters+="count(*) FILTER (WHERE app_id = $app AND is_active AND token LIKE '$prefix-%'), "
        want+="$count|"
        what+="${what:+, }$count $prefix- devices of app $app"
        total=$((total + count))
    done
    sql "TRUNCATE push_deliveries, push_job_chunks, push_jobs RESTART IDENTITY CASCADE"
    # A partitioned log (migration 015) as it stands with 30 days kept: the days behind exist,
    # and every statement on push_deliveries is planned with them.
    # An older schema (a baseline's binaries) has neither, nor job_created_at.
    local partitioned by_app
    partitioned=$(sql "SELECT to_regprocedure('push_create_delivery_partition(date,text)') IS NOT NULL")
    # Migration 016 gave each row its job's app.
    by_app=$(sql "SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'push_deliveries'::regclass AND attname = 'app_id')")
    if [[ $partitioned == t ]]; then
        sql "SELECT count(push_create_delivery_partition((now() AT TIME ZONE 'UTC')::date - g)) FROM generate_series(1, 30) g" >/dev/null
        log "push_deliveries: $(sql "SELECT count(*) FROM pg_inherits WHERE inhparent = 'push_deliveries'::regclass") partitions"
    fi
    have=$(sql "SELECT ${filters}count(*) FROM push_devices")
    if [[ $have != "$want$total" ]]; then
        log "seeding $what (per app, then all rows: had $have, want $want$total)"
        sql "TRUNCATE push_devices RESTART IDENTITY CASCADE"
        for spec in "$@"; do
            IFS=: read -r app prefix count <<<"$spec"
            sql "INSERT INTO push_devices (user_id, app_id, token, platform)
                 SELECT g, $app, '$prefix-' || g || '-' || md5(g::text) || repeat('x', 100), 'android'
                 FROM generate_series(1, $count) g"
        done
        sql "VACUUM ANALYZE push_devices"
    else
        log "reusing the seeded devices ($what)"
    fi
    if (( history > 0 )); then
        IFS=: read -r app prefix count <<<"$1"
        log "seeding an earlier campaign: $history sent deliveries"
        sql "WITH job AS (
                 INSERT INTO push_jobs (app_id, status, message, audience_cursor, audience_complete, started_at, finished_at)
                 VALUES ($app, 'completed', '{\"notification\":{\"title\":\"Earlier\"}}', $count, true, now(), now())
                 RETURNING id, created_at)
             INSERT INTO push_deliveries (job_id, device_id, status, attempts, fcm_message_id$([[ $partitioned == t ]] && echo ', job_created_at')$([[ $by_app == t ]] && echo ', app_id'))
             SELECT job.id, d.id, 'sent', 1, 'projects/bench/messages/' || d.id$([[ $partitioned == t ]] && echo ', job.created_at')$([[ $by_app == t ]] && echo ", $app")
               FROM job, push_devices d WHERE d.app_id = $app ORDER BY d.id LIMIT $history"
    fi
}

# make_service_account FILE PROJECT TOKEN_URL: a throw-away RSA-2048 service account in the shape
# of a Google JSON key (client_email bench@PROJECT...); fcm-emulator learns its public key from
# the same file (--service-account FILE).
make_service_account() {
    local file=$1 project=$2 token_url=$3
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$file.key.pem" 2>/dev/null \
        || die "openssl genpkey failed"
    python3 - "$file.key.pem" "$file" "$project" "$token_url" <<'EOF'
import json, sys
key_file, out, project, token_uri = sys.argv[1:]
with open(key_file, encoding="ascii") as f:
    pem = f.read()
account = {"type": "service_account", "project_id": project, "private_key_id": "bench-key",
           "private_key": pem, "client_email": f"bench@{project}.iam.gserviceaccount.com",
           "token_uri": token_uri}
with open(out, "w", encoding="utf-8") as f:
    json.dump(account, f, indent=2)
EOF
    rm -f "$file.key.pem"
}

# app_with_credentials BIN CODE NAME SERVICE_ACCOUNT: pushctl app add, or, when the app exists
# (a second run), app set-credentials. DATABASE_URL must be exported.
app_with_credentials() {
    local bin=$1 code=$2 name=$3 sa=$4 out
    if ! out=$("$bin/pushctl" app add --code "$code" --name "$name" --service-account "$sa" 2>&1); then
        grep -qi "exist" <<<"$out" || { echo "$out" >&2; die "pushctl app add --code $code failed"; }
        "$bin/pushctl" app set-credentials --code "$code" --service-account "$sa"
    fi
}

# start_emulator BIN PORT CA_OUT STDOUT_FILE LOG_FILE [fcm-emulator ARGS...]: starts fcm-emulator
# on 127.0.0.1:PORT (ARGS: --service-account FILE, --retain-messages 0, --latency PROFILE, ...)
# and waits for its settings line; sets EMULATOR_PID, FCM_BASE_URL, GOOGLE_TOKEN_URL and
# PUSH_CA_FILE (what push-worker is given), and EMULATOR_URL and EMULATOR_CA: the emulator's own
# (its admin API, below), which stay when a script sends FCM's traffic elsewhere (bench/fanout's
# ENDPOINT=nginx changes FCM_BASE_URL and PUSH_CA_FILE).
start_emulator() {
    local bin=$1 port=$2 ca=$3 out=$4 logf=$5 settings= i
    shift 5
    "$bin/fcm-emulator" --port "$port" --ca-out "$ca" "$@" >"$out" 2>"$logf" &
    EMULATOR_PID=$!
    for i in $(seq 1 300); do   # up to 30 s
        settings=$(grep -m1 '^FCM_BASE_URL=' "$out" || true)
        [[ -n $settings ]] && break
        kill -0 "$EMULATOR_PID" 2>/dev/null || { cat "$logf" >&2; die "fcm-emulator exited during startup"; }
        [[ $i == 300 ]] && { cat "$logf" >&2; die "fcm-emulator printed no settings in 30 s"; }
        sleep 0.1
    done
    FCM_BASE_URL=$(tr ' ' '\n' <<<"$settings" | sed -n 's/^FCM_BASE_URL=//p')
    GOOGLE_TOKEN_URL=$(tr ' ' '\n' <<<"$settings" | sed -n 's/^GOOGLE_TOKEN_URL=//p')
    PUSH_CA_FILE=$(tr ' ' '\n' <<<"$settings" | sed -n 's/^PUSH_CA_FILE=//p')
    [[ -r $PUSH_CA_FILE ]] || die "emulator CA file $PUSH_CA_FILE not readable"
    EMULATOR_URL=$FCM_BASE_URL
    EMULATOR_CA=$PUSH_CA_FILE
    log "emulator: $settings"
}

emulator() {  # emulator METHOD PATH [CURL ARGS...]: the emulator's admin API
    local method=$1 path=$2
    shift 2
    curl -fsS --cacert "$EMULATOR_CA" -X "$method" "$@" "$EMULATOR_URL$path"
}
# emulator_stats: GET /emulator/stats?devices=false (JSON), a few tries: just after an outage
# (bench/fanout's OUTAGE_AFTER) the emulator may still refuse a connection.
emulator_stats() {
    local i
    for i in 1 2 3 4 5; do
        emulator GET '/emulator/stats?devices=false' && return 0
        sleep 1
    done
    return 1
}
stat_field() { python3 -c 'import json,sys; print(json.load(sys.stdin).get(sys.argv[1], 0))' "$1"; }   # stat_field NAME <JSON

# start_worker BIN CONCURRENCY METRICS_PORT LOG_FILE: push-worker against DATABASE_URL and the
# FCM of FCM_BASE_URL, GOOGLE_TOKEN_URL and PUSH_CA_FILE, LOG_LEVEL warning; waits for /readyz.
# Sets WORKER_PID.
start_worker() {
    local bin=$1 concurrency=$2 metrics_port=$3 logf=$4
    DATABASE_URL=$DATABASE_URL FCM_BASE_URL=$FCM_BASE_URL GOOGLE_TOKEN_URL=$GOOGLE_TOKEN_URL \
        PUSH_CA_FILE=$PUSH_CA_FILE WORKER_CONCURRENCY=$concurrency LOG_LEVEL=warning METRICS_PORT=$metrics_port \
        "$bin/push-worker" >"$logf" 2>&1 &
    WORKER_PID=$!
    wait_http "http://127.0.0.1:$metrics_port/readyz" "$WORKER_PID" push-worker "$logf"
}

# term_worker SECONDS: SIGTERM to push-worker (WORKER_PID), then up to SECONDS for it to exit;
# sets WORKER_RC (its exit status, or timeout) and T_STOP (seconds). WORKER_PID is emptied once
# it exited; otherwise the caller's cleanup (stop_pid) kills it.
term_worker() {
    local t0
    log "SIGTERM to push-worker"
    t0=$(now)
    kill -TERM "$WORKER_PID"
    WORKER_RC=timeout
    for _ in $(seq 1 $(($1 * 10))); do
        kill -0 "$WORKER_PID" 2>/dev/null || break
        sleep 0.1
    done
    if ! kill -0 "$WORKER_PID" 2>/dev/null; then
        WORKER_RC=0; wait "$WORKER_PID" || WORKER_RC=$?
        WORKER_PID=
    fi
    T_STOP=$(elapsed "$t0")
}
