#!/usr/bin/env bash
# Fan-out benchmark: one campaign to N devices through push-worker, in one command from anywhere:
#
#   bench/fanout/run.sh                 # N=100000
#   N=1000000 bench/fanout/run.sh       # the million-device run
#   ENDPOINT=nginx bench/fanout/run.sh  # FCM = nginx's canned answers (h2load on nginx too)
#   LATENCY='50%:30ms,39%:60ms,10%:150ms,1%:2s' bench/fanout/run.sh      # FCM's round trips
#   N=30000 LATENCY='50%:30ms,39%:60ms,10%:150ms,1%:2s' OUTAGE_AFTER=1 OUTAGE_FOR=90 bench/fanout/run.sh
#                                       # FCM unreachable for 90 s, 1 s into the campaign
#
# Seeds N active devices, starts fcm-emulator (the fake FCM, HTTP/2 + TLS on loopback) and the
# release push-worker, enqueues one campaign and measures deliveries/s from the enqueue to the
# last delivery row written, and the worker's peak RSS. Baselines on the same endpoint: h2load's
# raw request rate (the limit) and the Firebase Admin SDK for Python (send_each). See README.md.
#
# Knobs (environment):
#   N=100000            active devices, i.e. deliveries of the campaign
#   HISTORY=$N          sent deliveries of an earlier campaign seeded first (0: a fresh table)
#   CONCURRENCY=1024    WORKER_CONCURRENCY (FCM requests in flight in the worker; its default)
#   WORKERS=1           push-worker processes sharing the queue, each with CONCURRENCY (the Little's-law
#                       bound counts them all); every round shows PostgreSQL's CPU and WAL per delivery
#   ROUNDS=3            rounds of h2load then the campaign (default 1 when N > 200000); medians judged
#   N_H2=100000         h2load requests per run (one run with -c1, one with -c2 per round; best counts)
#   H2_STREAMS=100      h2load -m (concurrent streams per connection)
#   SDK_MESSAGES=5000   messages sent by the Admin SDK baseline (send_each, batches of 500)
#   SKIP_SDK=1          skip the Admin SDK baseline (its rows then FAIL: not a full result)
#   SKIP_BUILD=1        never build; SKIP_BUILD=0 always build; unset: build only missing binaries
#   JOB_TIMEOUT=        seconds to wait for the campaign (default 120 + N/1000; see OUTAGE_AFTER)
#   DATABASE_URL=...    use this database instead of a local one in bench/out/fanout-pg
#                       (its push_devices, push_jobs, push_job_chunks and push_deliveries are TRUNCATED)
#   PG_PORT=55433       port of the local PostgreSQL
#   EMULATOR_PORT=18443 fcm-emulator port          METRICS_PORT=19090  push-worker metrics port
#
# Modes (environment; with none of them set the run is the default one above):
#   ENDPOINT=emulator   where sends go: emulator (fcm-emulator), or nginx: nginx-light (/usr/sbin/nginx,
#                       installed when missing) over HTTP/2 + TLS answering every send with a canned 200,
#                       a throw-away child with its own prefix in bench/out/fanout-nginx (config from
#                       bench/fanout/nginx.conf.template); tokens still come from fcm-emulator, so
#                       PUSH_CA_FILE trusts both CAs. h2load runs against nginx; judged: rate, worker /
#                       h2load, every send answered once by nginx (its access log); SDK off by default.
#   NGINX_PORT=18444    nginx's port (ENDPOINT=nginx); NGINX_PORT+1 is a second listener for h2load
#   NGINX_KEEPALIVE_REQUESTS=1000000  nginx keepalive_requests: streams per connection before GOAWAY
#                       (nginx's own default is 1000: a new connection every 1000 sends). When smaller
#                       than an h2load connection's requests, h2load (which does not reconnect after a
#                       GOAWAY) measures the same nginx on NGINX_PORT+1, where it is 1000000.
#   LATENCY=PROFILE     fcm-emulator --latency PROFILE (e.g. '50%:30ms,39%:60ms,10%:150ms,1%:2s'): every
#                       send answered after a delay drawn from it. No h2load (itself latency-bound) and
#                       no SDK; judged: rate >= 10,000/s; shown: the Little's-law bound
#                       CONCURRENCY / mean delay of PROFILE and the rate's fraction of it. ROUNDS=1 default.
#   OUTAGE_AFTER=S      S seconds after the enqueue (checked by the wait loop), FCM becomes unreachable
#   OUTAGE_FOR=90         for OUTAGE_FOR seconds (emulator admin API POST /emulator/outage): connections
#                       reset, new ones refused, token endpoint included. N defaults to 30000, ROUNDS to 1,
#                       JOB_TIMEOUT gains S + OUTAGE_FOR + 91. No h2load, no SDK; judged: every delivery
#                       sent and none failed, the outage hit the campaign in flight; shown: requests the
#                       emulator accepted against deliveries (the difference: duplicates), deliveries
#                       with attempts > 1, the worker's push_sends_total not_sent and no_answer.
#                       With LATENCY too (recommended) the campaign is long enough to be hit mid-way.
#   In every mode the worker's peak RSS (< 150 MB) and its exit after SIGTERM are judged. SKIP_SDK=0
#   runs the Admin SDK in any mode (information only outside the default mode).
#
# Outputs in bench/out/: fanout-summary.txt, fanout-worker.log, fanout-emulator.log,
# fanout-h2load-rR-c1.txt and -c2.txt (round R), fanout-sdk.txt, fanout-worker-metrics.txt,
# fanout-emulator-stats.json, fanout-sa.json (throw-away service account), fanout-ca.pem;
# ENDPOINT=nginx: fanout-nginx/ (nginx.conf, access.log, error.log, its CA), fanout-ca-both.pem;
# LATENCY/OUTAGE_AFTER: fanout-worker-metrics-rR-before.txt (the worker's /metrics before round R).
# Exit status: 0 when every target passes, 1 otherwise (or on any error).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."   # repo root: paths below are relative to it
source bench/lib/stack.sh   # log, die, sql and the stack's steps, shared with bench/latency and bench/registration
BENCH=bench/fanout
OUT=bench/out
mkdir -p "$OUT"

# Mode knobs first: they change other knobs' defaults.
ENDPOINT=${ENDPOINT:-emulator}
LATENCY=${LATENCY:-}
OUTAGE_AFTER=${OUTAGE_AFTER:-}
[[ -n $OUTAGE_AFTER || -z ${OUTAGE_FOR:-} ]] || die "OUTAGE_FOR needs OUTAGE_AFTER (seconds after the enqueue)"
OUTAGE_FOR=${OUTAGE_FOR:-90}
NGINX_PORT=${NGINX_PORT:-18444}
NGINX_KEEPALIVE_REQUESTS=${NGINX_KEEPALIVE_REQUESTS:-1000000}
NGINX_H2LOAD_PORT=$((${NGINX_PORT//[^0-9]/} + 1))
NGINX=/usr/sbin/nginx
[[ $ENDPOINT == emulator || $ENDPOINT == nginx ]] || die "ENDPOINT must be emulator or nginx, got '$ENDPOINT'"
if [[ $ENDPOINT == nginx ]]; then
    [[ -z $LATENCY ]] || die "LATENCY is fcm-emulator's: nginx answers at once (use one or the other)"
    [[ -z $OUTAGE_AFTER ]] || die "OUTAGE_AFTER is fcm-emulator's: it cannot cut nginx (use one or the other)"
fi
if [[ -n $OUTAGE_AFTER ]]; then
    [[ $OUTAGE_AFTER =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "OUTAGE_AFTER must be seconds (e.g. 1 or 0.5), got '$OUTAGE_AFTER'"
    [[ $OUTAGE_FOR =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v s="$OUTAGE_FOR" 'BEGIN { exit !(s > 0) }' \
        || die "OUTAGE_FOR must be seconds above 0, got '$OUTAGE_FOR'"
fi
# MODE: which figures are judged. default (no knob): as always; nginx; latency; outage (with or
# without LATENCY: the outage decides what is judged).
MODE=default
[[ $ENDPOINT == nginx ]] && MODE=nginx
[[ -n $LATENCY ]] && MODE=latency
[[ -n $OUTAGE_AFTER ]] && MODE=outage
# h2load is only a fair limit for an endpoint that answers at once: with LATENCY, h2load -c2 -m100
# is itself latency-bound (200 in flight), and an outage makes any rate meaningless.
RUN_H2=$([[ -z $LATENCY && -z $OUTAGE_AFTER ]] && echo 1 || echo 0)

N=${N:-$([[ $MODE == outage ]] && echo 30000 || echo 100000)}
HISTORY=${HISTORY:-$N}
CONCURRENCY=${CONCURRENCY:-1024}
WORKERS=${WORKERS:-1}
N_H2=${N_H2:-100000}
ROUNDS=${ROUNDS:-$((N > 200000 || RUN_H2 == 0 ? 1 : 3))}
H2_STREAMS=${H2_STREAMS:-100}
SDK_MESSAGES=${SDK_MESSAGES:-5000}
SKIP_SDK=${SKIP_SDK:-$([[ $MODE == default ]] && echo 0 || echo 1)}
PG_PORT=${PG_PORT:-55433}
EMULATOR_PORT=${EMULATOR_PORT:-18443}
METRICS_PORT=${METRICS_PORT:-19090}
# An outage adds its start and length, and the worker's circuit breaker (probes 1 s doubling to a
# minute, jittered) may wait up to a minute past its end.
OUTAGE_WAIT=$([[ -n $OUTAGE_AFTER ]] && awk -v a="$OUTAGE_AFTER" -v f="$OUTAGE_FOR" 'BEGIN { printf "%d", a + f + 91 }' || echo 0)
JOB_TIMEOUT=${JOB_TIMEOUT:-$((120 + N / 1000 + OUTAGE_WAIT))}
BIN=${BIN_DIR:-.build/release}   # BIN_DIR: only to test this script with stand-ins
VENV=$OUT/venv
PROJECT=bench-project

# Targets.
TARGET_DPS=10000        # deliveries/s
TARGET_H2_RATIO=0.50    # worker deliveries/s / h2load requests/s
TARGET_SDK_RATIO=10     # worker deliveries/s / Admin SDK messages/s
TARGET_RSS_MB=150       # worker peak RSS (VmHWM)
TARGET_STOP_S=30        # SIGTERM to exit

[[ $HISTORY =~ ^[0-9]+$ ]] || die "HISTORY must be a number, got '$HISTORY'"
for v in N ROUNDS CONCURRENCY WORKERS N_H2 H2_STREAMS SDK_MESSAGES JOB_TIMEOUT NGINX_PORT NGINX_KEEPALIVE_REQUESTS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done

# LATENCY's mean delay in ms, from the profile's text (PERCENT%:DELAY,... with ms or s, the
# percentages adding up to 100; fcm-emulator checks the same grammar): the Little's-law bound of
# the worker is CONCURRENCY sends in flight / this mean.
latency_mean_ms() {
    awk -v p="$1" 'BEGIN {
        n = split(p, e, ","); total = 0; sum = 0
        for (i = 1; i <= n; i++) {
            s = e[i]; gsub(/^[ \t]+|[ \t]+$/, "", s)
            if (s !~ /^[0-9]+(\.[0-9]+)?%:[0-9]+(\.[0-9]+)?m?s$/) exit 1
            split(s, kv, "%:"); d = kv[2]
            ms = (d ~ /ms$/) ? substr(d, 1, length(d) - 2) + 0 : 1000 * substr(d, 1, length(d) - 1)
            total += kv[1]; sum += kv[1] * ms
        }
        if (total < 99.9999 || total > 100.0001) exit 1
        printf "%.2f", sum / 100 }'
}
if [[ -n $LATENCY ]]; then
    LATENCY_MEAN_MS=$(latency_mean_ms "$LATENCY") \
        || die "LATENCY must be PERCENT%:DELAY,... adding up to 100% (e.g. 50%:30ms,39%:60ms,10%:150ms,1%:2s), got '$LATENCY'"
    LITTLE_BOUND=$(awk -v c="$((CONCURRENCY * WORKERS))" -v m="$LATENCY_MEAN_MS" 'BEGIN { printf "%.0f", (m > 0 ? c * 1000 / m : 0) }')
fi

# ------------------------------------------------------------------ cleanup
WORKER_PID=
EXTRA_WORKER_PIDS=()   # WORKERS > 1: the other push-workers
EMULATOR_PID=
NGINX_PID=
STARTED_PG=0
cleanup() {
    local rc=$?
    stop_pid "$WORKER_PID" push-worker 30
    for pid in "${EXTRA_WORKER_PIDS[@]}"; do stop_pid "$pid" push-worker 30; done
    stop_pid "$EMULATOR_PID" fcm-emulator 10
    stop_pid "$NGINX_PID" nginx 10   # SIGTERM: the master stops its worker (SIGKILL would leave it holding the port)
    stop_local_pg "$OUT/fanout-pg"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM   # route signals through the EXIT trap

# ------------------------------------------------------------------ tools
need_cmd h2load nghttp2-client
need_cmd psql postgresql-client
need_cmd curl curl
need_cmd openssl openssl
[[ $ENDPOINT != nginx ]] || [[ -x $NGINX ]] || apt_install nginx-light
[[ $ENDPOINT != nginx ]] || [[ -x $NGINX ]] || die "$NGINX not found after installing nginx-light"
command -v python3 >/dev/null || die "python3 not found"
python3 -c 'import cryptography' 2>/dev/null || apt_install python3-cryptography
python3 -c 'import cryptography' || die "python3 cannot import cryptography (pip install cryptography)"

if [[ $SKIP_SDK != 1 ]] && ! "$VENV/bin/python" -c 'import firebase_admin' 2>/dev/null; then
    log "creating $VENV with firebase-admin"
    python3 -m venv "$VENV" 2>/dev/null || { apt_install python3-venv; rm -rf "$VENV"; python3 -m venv "$VENV"; }
    "$VENV/bin/pip" install -q 'firebase-admin>=7,<8' >&2
fi

# ------------------------------------------------------------------ build
build_release "$BIN" push-worker fcm-emulator pushctl

# ------------------------------------------------------------------ ports
port_busy "$EMULATOR_PORT" && die "something already listens on 127.0.0.1:$EMULATOR_PORT; set EMULATOR_PORT"
port_busy "$METRICS_PORT" && die "something already listens on 127.0.0.1:$METRICS_PORT; set METRICS_PORT"
[[ $ENDPOINT != nginx ]] || ! port_busy "$NGINX_PORT" || die "something already listens on 127.0.0.1:$NGINX_PORT; set NGINX_PORT"
[[ $ENDPOINT != nginx ]] || ! port_busy "$NGINX_H2LOAD_PORT" || die "something already listens on 127.0.0.1:$NGINX_H2LOAD_PORT (NGINX_PORT + 1); set NGINX_PORT"

# ------------------------------------------------------------------ service account
# A throw-away RSA key each run; the emulator learns its public key from the same file.
SA=$OUT/fanout-sa.json
TOKEN_URL=https://127.0.0.1:$EMULATOR_PORT/token
make_service_account "$SA" "$PROJECT" "$TOKEN_URL"

# ------------------------------------------------------------------ database
start_local_pg "$OUT/fanout-pg" "$PG_PORT"

log "migrating"
"$BIN/pushctl" migrate

# A second run finds the app already there: then only its credentials are replaced.
app_with_credentials "$BIN" bench Bench "$SA"
APP_ID=$(sql "SELECT id FROM apps WHERE code = 'bench'")
[[ $APP_ID =~ ^[0-9]+$ ]] || die "no app with code 'bench' after pushctl app add"
log "app id: $APP_ID"

t0=$(now)
# The jobs' tables truncated, N active bench devices of this app (and nothing else; re-seeded
# unless they are there), and HISTORY sent deliveries of one earlier, completed campaign to the
# same devices: a service that has sent before, so push_deliveries has rows and statistics.
# Analyzed while empty, the planner believes the table stays tiny as it fills and drives the
# result write with a scan of the whole table per batch (see README.md, "A fresh
# push_deliveries"). HISTORY=0 measures that first-campaign case.
seed_campaign_tables "$HISTORY" "$APP_ID:bench:$N"
sql "VACUUM ANALYZE push_jobs"
sql "VACUUM ANALYZE push_deliveries"
T_SEED=$(elapsed "$t0")

# ------------------------------------------------------------------ fcm-emulator
log "starting fcm-emulator on 127.0.0.1:$EMULATOR_PORT${LATENCY:+, --latency $LATENCY} (log: $OUT/fanout-emulator.log)"
# EMULATOR_URL and EMULATOR_CA (the admin API, emulator and emulator_stats) stay the emulator's
# whatever FCM_BASE_URL and PUSH_CA_FILE become below.
start_emulator "$BIN" "$EMULATOR_PORT" "$OUT/fanout-ca.pem" "$OUT/fanout-emulator.out" "$OUT/fanout-emulator.log" \
    --service-account "$SA" --retain-messages 0 ${LATENCY:+--latency "$LATENCY"}
[[ $GOOGLE_TOKEN_URL == "$TOKEN_URL" ]] || die "emulator token URL $GOOGLE_TOKEN_URL, expected $TOKEN_URL"

# ------------------------------------------------------------------ nginx (ENDPOINT=nginx)
# FCM's sends go to nginx; the token endpoint stays the emulator's (GOOGLE_TOKEN_URL), so the
# worker's PUSH_CA_FILE must trust both CAs. nginx's certificates are made as
# Tests/TestSupport/NginxServer.swift makes them: a P-256 CA, and a server certificate it signs
# for 127.0.0.1 and localhost.
NGINX_DIR=$PWD/$OUT/fanout-nginx
make_nginx_certificates() {  # in $NGINX_DIR
    cat >"$NGINX_DIR/openssl.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = nginx bench CA
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
CNF
    local key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 -config "$NGINX_DIR/openssl.cnf" -extensions ca "${key[@]}" -keyout "$NGINX_DIR/ca.key" \
        -out "$NGINX_DIR/ca.pem" -days 7 -subj "/O=push-service bench/CN=nginx bench CA" 2>/dev/null
    openssl req -new -config "$NGINX_DIR/openssl.cnf" "${key[@]}" -keyout "$NGINX_DIR/server.key" \
        -out "$NGINX_DIR/server.csr" -subj "/CN=127.0.0.1" 2>/dev/null
    openssl x509 -req -in "$NGINX_DIR/server.csr" -CA "$NGINX_DIR/ca.pem" -CAkey "$NGINX_DIR/ca.key" \
        -set_serial "0x$(openssl rand -hex 16)" -days 7 -extfile "$NGINX_DIR/openssl.cnf" -extensions server \
        -out "$NGINX_DIR/server.pem" 2>/dev/null
}
nginx_lines() { if [[ -f $NGINX_DIR/access.log ]]; then wc -l <"$NGINX_DIR/access.log"; else echo 0; fi; }
# The access log is buffered with flush=1s: what nginx answered is in the file a second later.
nginx_log_settle() { sleep 1.5; }
nginx_cpu_secs() {  # the master and its worker
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v hz="$(getconf CLK_TCK)" -v p="$NGINX_PID" '
        { pid = $1; sub(/^[0-9]+ \([^)]*\) /, ""); if (pid == p || $2 == p) t += $12 + $13 }
        END { printf "%.1f", t / hz }'
}
if [[ $ENDPOINT == nginx ]]; then
    rm -rf "$NGINX_DIR"
    mkdir -p "$NGINX_DIR/temp"
    make_nginx_certificates
    sed -e "s|@PREFIX@|$NGINX_DIR|g" -e "s|@PORT@|$NGINX_PORT|g" -e "s|@H2LOAD_PORT@|$NGINX_H2LOAD_PORT|g" \
        -e "s|@KEEPALIVE_REQUESTS@|$NGINX_KEEPALIVE_REQUESTS|g" \
        "$BENCH/nginx.conf.template" >"$NGINX_DIR/nginx.conf"
    log "starting nginx on 127.0.0.1:$NGINX_PORT, keepalive_requests $NGINX_KEEPALIVE_REQUESTS (files: $NGINX_DIR)"
    # -e: the error log from the first line on (Debian's build default is stderr).
    "$NGINX" -p "$NGINX_DIR/" -c "$NGINX_DIR/nginx.conf" -e "$NGINX_DIR/error.log" \
        </dev/null >"$NGINX_DIR/output.log" 2>&1 &
    NGINX_PID=$!
    for i in $(seq 1 100); do   # up to 10 s
        port_busy "$NGINX_PORT" && break
        kill -0 "$NGINX_PID" 2>/dev/null || { cat "$NGINX_DIR/output.log" "$NGINX_DIR/error.log" >&2 || true; die "nginx exited during startup"; }
        [[ $i == 100 ]] && { cat "$NGINX_DIR/error.log" >&2 || true; die "nginx not listening on 127.0.0.1:$NGINX_PORT after 10 s"; }
        sleep 0.1
    done
    PUSH_CA_FILE=$PWD/$OUT/fanout-ca-both.pem
    { sed -e '$a\' "$NGINX_DIR/ca.pem"; cat "$EMULATOR_CA"; } >"$PUSH_CA_FILE"   # as NginxServer.caFile(alsoTrusting:)
    FCM_BASE_URL=https://127.0.0.1:$NGINX_PORT
    log "FCM endpoint: nginx at $FCM_BASE_URL; tokens: $GOOGLE_TOKEN_URL; PUSH_CA_FILE=$PUSH_CA_FILE (both CAs)"
fi
SEND_URL=$FCM_BASE_URL/v1/projects/$PROJECT/messages:send
H2LOAD_URL=$SEND_URL
if [[ $ENDPOINT == nginx ]] && (( NGINX_KEEPALIVE_REQUESTS < (N_H2 > 5000 ? N_H2 : 5000) )); then
    H2LOAD_URL=https://127.0.0.1:$NGINX_H2LOAD_PORT/v1/projects/$PROJECT/messages:send
    log "h2load on nginx's second listener ($H2LOAD_URL, keepalive_requests 1000000): it does not reconnect after a GOAWAY"
fi
source bench/lib/cpu.sh

# ------------------------------------------------------------------ baseline 1: h2load
ACCESS_TOKEN=$(python3 "$BENCH/fcm_token.py" --service-account "$SA" --ca-file "$PUSH_CA_FILE" --token-url "$GOOGLE_TOKEN_URL")
printf '%s' '{"message":{"token":"bench-h2load","notification":{"title":"Bench","body":"fan-out"},"data":{"k":"v"}}}' \
    >"$OUT/fanout-h2load-body.json"
# One send with curl first: a wrong token or body must fail loudly, not as a fast 4xx rate.
curl -fsS --cacert "$PUSH_CA_FILE" -H "authorization: Bearer $ACCESS_TOKEN" -H 'content-type: application/json' \
    --data-binary "@$OUT/fanout-h2load-body.json" "$SEND_URL" >/dev/null \
    || die "a single send to $SEND_URL failed"

run_h2load() {  # run_h2load CONNECTIONS REQUESTS OUTFILE
    h2load -n "$2" -c "$1" -m "$H2_STREAMS" -t 1 \
        -H "authorization: Bearer $ACCESS_TOKEN" -H 'content-type: application/json' \
        -d "$OUT/fanout-h2load-body.json" "$H2LOAD_URL" >"$3" 2>&1 || true
}
h2_rps() { sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' "$1"; }
h2_ok() {  # every request done, succeeded and 2xx, over h2
    grep -q '^Application protocol: h2$' "$1" \
        && grep -Eq "^requests: $2 total, $2 started, $2 done, $2 succeeded, 0 failed, 0 errored" "$1" \
        && grep -Eq "^status codes: $2 2xx, 0 3xx, 0 4xx, 0 5xx" "$1"
}
if [[ $RUN_H2 == 1 ]]; then
    log "h2load warm-up (5000 requests)"
    run_h2load 1 5000 "$OUT/fanout-h2load-warmup.txt"
    h2_ok "$OUT/fanout-h2load-warmup.txt" 5000 || { cat "$OUT/fanout-h2load-warmup.txt" >&2; die "h2load warm-up failed"; }
fi

h2load_round() {  # h2load_round ROUND: -c1 and -c2; sets H2_RPS_C1 H2_RPS_C2 H2_BEST, counts H2_ERR
    local c rps file
    H2_BEST=0
    for c in 1 2; do
        file=$OUT/fanout-h2load-r$1-c$c.txt
        log "round $1: h2load -n $N_H2 -c $c -m $H2_STREAMS -t 1"
        run_h2load "$c" "$N_H2" "$file"
        rps=$(h2_rps "$file"); rps=${rps:-0}
        if h2_ok "$file" "$N_H2"; then
            log "round $1: h2load -c $c: $rps req/s"
            if awk -v a="$rps" -v b="$H2_BEST" 'BEGIN { exit !(a > b) }'; then H2_BEST=$rps; fi
        else
            H2_ERR=$((H2_ERR + 1))
            grep -E '^(finished|requests|status codes|Application)' "$file" >&2 || cat "$file" >&2
            log "round $1: h2load -c $c had errors: not counted"
        fi
    done
    H2_RPS_C1=$(h2_rps "$OUT/fanout-h2load-r$1-c1.txt"); H2_RPS_C2=$(h2_rps "$OUT/fanout-h2load-r$1-c2.txt")
    H2_BEST=$(awk -v a="$H2_BEST" 'BEGIN { printf "%.0f", a }')
}

# ------------------------------------------------------------------ push-worker
log "starting push-worker, concurrency $CONCURRENCY (log: $OUT/fanout-worker.log)"
start_worker "$BIN" "$CONCURRENCY" "$METRICS_PORT" "$OUT/fanout-worker.log"   # FCM: the emulator or nginx
if (( WORKERS > 1 )); then
    first_worker=$WORKER_PID
    for i in $(seq 2 "$WORKERS"); do
        log "starting push-worker $i of $WORKERS (log: $OUT/fanout-worker-$i.log)"
        start_worker "$BIN" "$CONCURRENCY" "$((METRICS_PORT + i - 1))" "$OUT/fanout-worker-$i.log"
        EXTRA_WORKER_PIDS+=("$WORKER_PID")
    done
    WORKER_PID=$first_worker   # RSS, the metrics and the SIGTERM at the end are the first worker's
fi
workers_cpu_secs() {  # all push-workers' CPU seconds
    local total=0 pid
    for pid in "$WORKER_PID" "${EXTRA_WORKER_PIDS[@]}"; do total=$(awk -v a="$total" -v b="$(cpu_secs "$pid")" 'BEGIN { printf "%.2f", a + b }'); done
    echo "$total"
}
wal_lsn() { sql "SELECT pg_current_wal_lsn()"; }
sleep 1   # idle: listening for NOTIFY, nothing claimed
RSS_IDLE_KB=$(awk '/^VmRSS:/ { print $2 }' "/proc/$WORKER_PID/status")

since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }   # since T0: seconds, to the ms
worker_metrics() { curl -fs --max-time 5 "http://127.0.0.1:$METRICS_PORT/metrics" || true; }
metric_sum() {  # metric_sum FILE NAME [LABEL]: the sum of NAME's samples (with LABEL, e.g. outcome="no_answer")
    awk -v n="$2" -v l="${3:-}" 'index($0, n) == 1 && (substr($0, length(n) + 1, 1) ~ /[ {]/) && (l == "" || index($0, l)) { s += $NF }
        END { printf "%.6f", s }' "$1"
}
metric_delta() {  # metric_delta BEFORE AFTER NAME [LABEL]: an integer
    awk -v a="$(metric_sum "$1" "$3" "${4:-}")" -v b="$(metric_sum "$2" "$3" "${4:-}")" 'BEGIN { printf "%.0f", b - a }'
}

fanout_round() {  # fanout_round ROUND: one campaign to the N devices; sets the round's figures
    local status last_report=0 rss secs t0 w0 e0 p0 m0 wal0 n0=0 outage_end= nap left
    OUTAGE_AT=; OUTAGE_REQ=; OUTAGE_ROWS=
    # The emulator's counters are read before and after: a reset would also revoke the access
    # token the worker holds from the round before, and its first sends would be 401s.
    local before
    before=$(emulator_stats)
    if [[ $ENDPOINT == nginx ]]; then
        nginx_log_settle   # h2load's requests in the file: the round's are the lines after NGX_L0
        NGX_L0=$(nginx_lines)
        n0=$(nginx_cpu_secs)
    fi
    [[ $MODE == default || $MODE == nginx ]] || worker_metrics >"$OUT/fanout-worker-metrics-r$1-before.txt"
    w0=$(workers_cpu_secs); e0=$(cpu_secs "$EMULATOR_PID"); p0=$(pg_cpu_secs); m0=$(machine_busy); wal0=$(wal_lsn)
    log "round $1: enqueueing the campaign to $N devices"
    t0=$(now)
    JOB_ID=$(sql "SELECT push_enqueue_campaign(app_code => 'bench',
                  message => '{\"notification\":{\"title\":\"Bench\",\"body\":\"fan-out\"},\"data\":{\"k\":\"v\"}}')")
    [[ $JOB_ID =~ ^[0-9]+$ ]] || die "enqueue returned '$JOB_ID'"
    while :; do
        # OUTAGE_AFTER: FCM (the emulator, its token endpoint and admin API included) becomes
        # unreachable 0.1 s after its 202, for OUTAGE_FOR seconds. Checked first, as the nap below
        # ends on time for it (psql takes a while on a busy machine).
        if [[ -n $OUTAGE_AFTER && -z $OUTAGE_AT ]] && awk -v s="$(since "$t0")" -v a="$OUTAGE_AFTER" 'BEGIN { exit !(s >= a) }'; then
            OUTAGE_REQ=$(awk -v s="$(since "$t0")" 'BEGIN { printf "%.1f", s }')
            emulator POST /emulator/outage -H 'content-type: application/json' --data "{\"seconds\": $OUTAGE_FOR}" >/dev/null \
                || die "POST /emulator/outage failed"
            # The outage begins 0.1 s after the emulator's 202.
            OUTAGE_AT=$(awk -v s="$(since "$t0")" 'BEGIN { printf "%.1f", s + 0.1 }')
            outage_end=$(awk -v t="$(now)" -v f="$OUTAGE_FOR" 'BEGIN { printf "%.3f", t + 0.1 + f }')
            OUTAGE_ROWS=$(sql "SELECT count(*) FROM push_deliveries WHERE job_id = $JOB_ID AND status = 'sent'")
            log "t=${OUTAGE_AT}s: FCM unreachable for ${OUTAGE_FOR}s (POST /emulator/outage at ${OUTAGE_REQ}s); $OUTAGE_ROWS of $N deliveries sent by then"
        fi
        status=$(sql "SELECT status FROM push_jobs WHERE id = $JOB_ID")
        [[ $status == completed || $status == failed || $status == cancelled ]] && break
        kill -0 "$WORKER_PID" 2>/dev/null || { tail -n 30 "$OUT/fanout-worker.log" >&2; die "push-worker died during the fan-out (job $status)"; }
        rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$WORKER_PID/status" 2>/dev/null || echo 0)
        secs=$(elapsed "$t0")
        if awk -v s="$secs" -v l="$last_report" 'BEGIN { exit !(s - l >= 5) }'; then
            last_report=$secs
            log "t=${secs}s job $status: $(sql "SELECT string_agg(status || ' ' || n, ', ') FROM (SELECT status, count(*) n FROM push_deliveries WHERE job_id = $JOB_ID GROUP BY 1 ORDER BY 1) s"), worker RSS $((rss / 1024)) MB"
        fi
        if awk -v s="$secs" -v t="$JOB_TIMEOUT" 'BEGIN { exit !(s > t) }'; then
            log "job $JOB_ID not finished after ${JOB_TIMEOUT}s (status $status)"
            break
        fi
        # Each poll starts psql and a database backend: on 2 cores, polling every 0.2 s took ~7 % of
        # the CPU from the run. The figures come from the database's clocks, not from this loop.
        # Before a pending outage, the loop wakes up in time for it.
        nap=1
        if [[ -n $OUTAGE_AFTER && -z $OUTAGE_AT ]]; then
            nap=$(awk -v a="$OUTAGE_AFTER" -v s="$(since "$t0")" 'BEGIN { d = a - s; printf "%.3f", (d > 1 ? 1 : (d < 0.01 ? 0.01 : d)) }')
        fi
        sleep "$nap"
    done
    W_CPU=$(delta "$w0" "$(workers_cpu_secs)")
    E_CPU=$(delta "$e0" "$(cpu_secs "$EMULATOR_PID")")
    P_CPU=$(delta "$p0" "$(pg_cpu_secs)")
    MACHINE_BUSY=$(busy_pct "$m0" "$(machine_busy)")
    [[ $ENDPOINT != nginx ]] || N_CPU=$(delta "$n0" "$(nginx_cpu_secs)")
    if [[ -n $outage_end ]]; then   # the emulator's stats are out of reach until the outage ends
        left=$(awk -v e="$outage_end" -v t="$(now)" 'BEGIN { printf "%.1f", e - t + 0.5 }')
        if awk -v l="$left" 'BEGIN { exit !(l > 0) }'; then
            log "round $1: waiting ${left}s for the outage to end"
            sleep "$left"
        fi
    fi
    emulator_stats >"$OUT/fanout-emulator-stats.json"
    E_ACCEPTED=$(( $(stat_field accepted <"$OUT/fanout-emulator-stats.json") - $(stat_field accepted <<<"$before") ))
    E_REJECTED=$(( $(stat_field rejected <"$OUT/fanout-emulator-stats.json") - $(stat_field rejected <<<"$before") ))
    E_TOKENS=$(( $(stat_field token_exchanges <"$OUT/fanout-emulator-stats.json") - $(stat_field token_exchanges <<<"$before") ))
    E_DROPPED=$(( $(stat_field outage_dropped_streams <"$OUT/fanout-emulator-stats.json") - $(stat_field outage_dropped_streams <<<"$before") ))
    E_REFUSED=$(( $(stat_field outage_refused_connections <"$OUT/fanout-emulator-stats.json") - $(stat_field outage_refused_connections <<<"$before") ))

    # All figures from the database's own clocks: enqueue (created_at) to the last delivery row.
    IFS='|' read -r D_TOTAL D_SENT D_RETRIED FANOUT_S JOB_S EXPAND_S JOB_STATUS <<<"$(sql "
        SELECT count(d.id), count(d.id) FILTER (WHERE d.status = 'sent'),
               count(d.id) FILTER (WHERE d.attempts > 1),
               round(extract(epoch FROM max(d.updated_at) - j.created_at)::numeric, 3),
               round(extract(epoch FROM j.finished_at - j.created_at)::numeric, 3),
               round(extract(epoch FROM max(d.created_at) - j.created_at)::numeric, 3),
               j.status
        FROM push_jobs j LEFT JOIN push_deliveries d ON d.job_id = j.id
        WHERE j.id = $JOB_ID GROUP BY j.id")"
    DELIVERY_COUNTS=$(sql "SELECT string_agg(status || coalesce(':' || error_code, '') || ' ' || n, ', ')
        FROM (SELECT status, error_code, count(*) n FROM push_deliveries WHERE job_id = $JOB_ID GROUP BY 1, 2 ORDER BY 1, 2) s")
    DPS=$(awk -v n="$D_SENT" -v s="${FANOUT_S:-0}" 'BEGIN { printf "%.0f", (s > 0 ? n / s : 0) }')
    # PostgreSQL's cost of a delivery: its CPU and the WAL it wrote over the round (the audience's
    # chunks, the rows and their indexes, the job's updates), per delivery row.
    WAL_BYTES=$(sql "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$wal0')")
    PG_PER_DELIVERY=$(awk -v c="$P_CPU" -v w="$WAL_BYTES" -v n="$D_TOTAL" \
        'BEGIN { if (n > 0) printf "%.0f µs CPU, %.0f bytes of WAL", c * 1e6 / n, w / n; else printf "n/a" }')
    log "round $1: job $JOB_ID $JOB_STATUS: $DELIVERY_COUNTS; ${FANOUT_S}s to the last delivery: $DPS deliveries/s; PostgreSQL per delivery: $PG_PER_DELIVERY"

    if [[ $ENDPOINT == nginx ]]; then
        # nginx's access log, the lines after NGX_L0: requests, 200s to sends, connections, most
        # requests on one connection ($connection_requests).
        nginx_log_settle
        read -r NGX_REQ NGX_OK NGX_CONNS NGX_MAXREQ < <(tail -n +"$((NGX_L0 + 1))" "$NGINX_DIR/access.log" | awk '
            { n++; if ($4 == "POST" && $5 ~ /\/messages:send$/ && $6 == 200) ok++
              if (!($2 in c)) { c[$2] = 1; conns++ }; if ($3 + 0 > m) m = $3 + 0 }
            END { printf "%d %d %d %d\n", n, ok, conns, m }')
        NGX_DUP=$((NGX_REQ - D_TOTAL))
        log "round $1: nginx answered $NGX_REQ requests ($NGX_OK sends with 200) over $NGX_CONNS connections; deliveries $D_TOTAL"
    fi
    if [[ $MODE == latency || $MODE == outage ]]; then
        local mb=$OUT/fanout-worker-metrics-r$1-before.txt ma=$OUT/fanout-worker-metrics.txt
        worker_metrics >"$ma"
        M_NOT_SENT=$(metric_delta "$mb" "$ma" push_sends_total 'outcome="not_sent"')
        M_NO_ANSWER=$(metric_delta "$mb" "$ma" push_sends_total 'outcome="no_answer"')
        M_RETRY=$(metric_delta "$mb" "$ma" push_sends_total 'outcome="retry"')
        # The worker's own view of FCM's round trips (push_fcm_request_duration_seconds), and
        # Little's law backwards: the sends it kept in flight on average at that rate.
        RTT_MS=$(awk -v s0="$(metric_sum "$mb" push_fcm_request_duration_seconds_sum)" -v s1="$(metric_sum "$ma" push_fcm_request_duration_seconds_sum)" \
            -v c0="$(metric_sum "$mb" push_fcm_request_duration_seconds_count)" -v c1="$(metric_sum "$ma" push_fcm_request_duration_seconds_count)" \
            'BEGIN { printf "%.1f", (c1 > c0 ? 1000 * (s1 - s0) / (c1 - c0) : 0) }')
        IN_FLIGHT=$(awk -v d="$DPS" -v r="$RTT_MS" 'BEGIN { printf "%.0f", d * r / 1000 }')
    fi
    if [[ $MODE == outage ]]; then
        # Hit in flight: the outage began before every delivery was recorded sent.
        OUTAGE_HIT=$([[ -n $OUTAGE_AT && ${OUTAGE_ROWS:-0} -lt $N ]] && echo 1 || echo 0)
        OUTAGE_RECOVERY=$([[ -n $OUTAGE_AT ]] && awk -v f="$FANOUT_S" -v a="$OUTAGE_AT" -v d="$OUTAGE_FOR" 'BEGIN { printf "%.1f", f - a - d }' || echo "")
    fi
}

# ------------------------------------------------------------------ rounds
# Each round measures h2load, then the campaign right after it: this VM's speed drifts by 20-30 %
# over minutes (every process's CPU per request moves together), so a ratio is only fair between
# figures taken side by side, and the median of several rounds is what the summary judges.
median() { tr ' ' '\n' <<<"$*" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
H2_ERR=0; ALL_DONE=1; ALL_ACCEPTED=1
ROUND_DPS=(); ROUND_RATIO=(); ROUND_H2=(); ROUND_LINES=()
H2_BEST=0; H2_RPS_C1=; H2_RPS_C2=
ALL_HIT=1; SUM_ACCEPTED=0; SUM_DELIVERIES=0; SUM_RETRIED=0; SUM_NOT_SENT=0; SUM_NO_ANSWER=0; SUM_DROPPED=0
t_rounds=$(now)
for round in $(seq 1 "$ROUNDS"); do
    [[ $RUN_H2 == 0 ]] || h2load_round "$round"
    fanout_round "$round"
    ratio=$(awk -v a="$DPS" -v b="$H2_BEST" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
    [[ $JOB_STATUS == completed && $D_TOTAL == "$N" && $D_SENT == "$N" ]] || ALL_DONE=0
    ROUND_DPS+=("$DPS"); ROUND_RATIO+=("$ratio"); ROUND_H2+=("$H2_BEST")
    case $MODE in
    default)
        [[ $E_ACCEPTED == "$N" && $E_REJECTED == 0 ]] || ALL_ACCEPTED=0
        ROUND_LINES+=("round $round: h2load -c1 ${H2_RPS_C1:-?} / -c2 ${H2_RPS_C2:-?} req/s; worker $DPS deliveries/s (${FANOUT_S}s), ratio $ratio; CPU worker ${W_CPU}s, emulator ${E_CPU}s, PostgreSQL ${P_CPU}s, machine ${MACHINE_BUSY}% busy; job $JOB_STATUS, $DELIVERY_COUNTS, retried $D_RETRIED, token exchanges $E_TOKENS")
        ;;
    nginx)
        [[ $NGX_REQ == "$N" && $NGX_OK == "$N" && $E_REJECTED == 0 ]] || ALL_ACCEPTED=0
        ROUND_LINES+=("round $round: h2load -c1 ${H2_RPS_C1:-?} / -c2 ${H2_RPS_C2:-?} req/s; worker $DPS deliveries/s (${FANOUT_S}s), ratio $ratio; CPU worker ${W_CPU}s, nginx ${N_CPU}s, PostgreSQL ${P_CPU}s, machine ${MACHINE_BUSY}% busy; job $JOB_STATUS, $DELIVERY_COUNTS, retried $D_RETRIED, token exchanges $E_TOKENS; nginx answered $NGX_REQ requests ($NGX_OK sends with 200, duplicates $NGX_DUP) on $NGX_CONNS connections, at most $NGX_MAXREQ on one")
        ;;
    latency)
        [[ $E_ACCEPTED == "$N" && $E_REJECTED == 0 ]] || ALL_ACCEPTED=0
        ROUND_LINES+=("round $round: worker $DPS deliveries/s (${FANOUT_S}s), $(awk -v d="$DPS" -v b="$LITTLE_BOUND" 'BEGIN { printf "%.2f", (b > 0 ? d / b : 0) }') of the bound; FCM round trip seen by the worker ${RTT_MS} ms on average, so ~${IN_FLIGHT} sends in flight; CPU worker ${W_CPU}s, emulator ${E_CPU}s, PostgreSQL ${P_CPU}s, machine ${MACHINE_BUSY}% busy; job $JOB_STATUS, $DELIVERY_COUNTS, retried $D_RETRIED, token exchanges $E_TOKENS; emulator accepted $E_ACCEPTED, rejected $E_REJECTED; worker sends not_sent $M_NOT_SENT, no_answer $M_NO_ANSWER, retry $M_RETRY")
        ;;
    outage)
        [[ $OUTAGE_HIT == 1 ]] || ALL_HIT=0
        SUM_ACCEPTED=$((SUM_ACCEPTED + E_ACCEPTED)); SUM_DELIVERIES=$((SUM_DELIVERIES + D_SENT))
        SUM_RETRIED=$((SUM_RETRIED + D_RETRIED)); SUM_NOT_SENT=$((SUM_NOT_SENT + M_NOT_SENT))
        SUM_NO_ANSWER=$((SUM_NO_ANSWER + M_NO_ANSWER)); SUM_DROPPED=$((SUM_DROPPED + E_DROPPED))
        if [[ -n $OUTAGE_AT ]]; then
            outage_text="outage (requested at ${OUTAGE_REQ}s) from ~${OUTAGE_AT}s for ${OUTAGE_FOR}s with $OUTAGE_ROWS of $N deliveries sent by then, the last one ${OUTAGE_RECOVERY}s after it ended"
        else
            outage_text="NO outage: the job ended before ${OUTAGE_AFTER}s"
        fi
        ROUND_LINES+=("round $round: $outage_text; worker $DPS deliveries/s (${FANOUT_S}s, the outage included); CPU worker ${W_CPU}s, emulator ${E_CPU}s, PostgreSQL ${P_CPU}s, machine ${MACHINE_BUSY}% busy; job $JOB_STATUS, $DELIVERY_COUNTS, attempts > 1: $D_RETRIED, token exchanges $E_TOKENS; emulator accepted $E_ACCEPTED for $D_SENT sent (duplicates $((E_ACCEPTED - D_SENT))), rejected $E_REJECTED, streams cut unanswered $E_DROPPED, connections refused $E_REFUSED; worker sends not_sent $M_NOT_SENT, no_answer $M_NO_ANSWER, retry $M_RETRY${RTT_MS:+; FCM round trip seen by the worker ${RTT_MS} ms on average}")
        ;;
    esac
    ROUND_LINES[${#ROUND_LINES[@]} - 1]+="; PostgreSQL per delivery: $PG_PER_DELIVERY"
done
T_ROUNDS=$(elapsed "$t_rounds")
RSS_PEAK_KB=$(awk '/^VmHWM:/ { print $2 }' "/proc/$WORKER_PID/status")
[[ $MODE == latency || $MODE == outage ]] \
    || curl -fs --max-time 5 "http://127.0.0.1:$METRICS_PORT/metrics" >"$OUT/fanout-worker-metrics.txt" || true
DPS=$(median "${ROUND_DPS[@]}")
H2_RATIO=$(median "${ROUND_RATIO[@]}")
H2_MEDIAN=$(median "${ROUND_H2[@]}")

term_worker "$TARGET_STOP_S"   # sets WORKER_RC and T_STOP; cleanup kills the worker when it did not stop

# ------------------------------------------------------------------ baseline 2: Admin SDK
t0=$(now)
SDK_RATE=0; SDK_SUCCESS=0; SDK_RC=skipped
if [[ $SKIP_SDK != 1 ]]; then
    log "Admin SDK baseline: send_each, $SDK_MESSAGES messages in batches of 500"
    SDK_RC=0
    "$VENV/bin/python" "$BENCH/admin_sdk_baseline.py" --service-account "$SA" --fcm-base-url "$FCM_BASE_URL" \
        --ca-file "$PUSH_CA_FILE" --messages "$SDK_MESSAGES" >"$OUT/fanout-sdk.txt" 2>&1 || SDK_RC=$?
    sdk_result=$(grep '^RESULT ' "$OUT/fanout-sdk.txt" || true)
    if [[ -z $sdk_result ]]; then
        tail -n 30 "$OUT/fanout-sdk.txt" >&2
        log "Admin SDK baseline printed no RESULT (rc $SDK_RC)"
    else
        SDK_RATE=$(sed -n 's/.* rate=\([0-9.]*\).*/\1/p' <<<"$sdk_result")
        SDK_SUCCESS=$(sed -n 's/.* success=\([0-9]*\).*/\1/p' <<<"$sdk_result")
        log "Admin SDK: $sdk_result"
    fi
fi
T_SDK=$(elapsed "$t0")

# ------------------------------------------------------------------ summary
check() { awk -v a="$1" -v b="$3" "BEGIN { exit !(a $2 b) }" && echo PASS || echo FAIL; }
yes_no() { [[ $1 == 1 ]] && echo yes || echo no; }
pass_if() { [[ $1 == 1 ]] && echo PASS || echo FAIL; }
RSS_PEAK_MB=$(awk -v k="$RSS_PEAK_KB" 'BEGIN { printf "%.1f", k / 1024 }')
RSS_IDLE_MB=$(awk -v k="$RSS_IDLE_KB" 'BEGIN { printf "%.1f", k / 1024 }')
SDK_RATIO=$(awk -v a="$DPS" -v b="$SDK_RATE" 'BEGIN { printf "%.1f", (b > 0 ? a / b : 0) }')
R_SDK_OK=$([[ $SDK_RC == 0 && $SDK_SUCCESS == "$SDK_MESSAGES" ]] && echo PASS || echo FAIL)
# The table: every row's result is PASS, FAIL or empty (shown, not judged); any FAIL fails the run.
OVERALL=PASS
ROWS=()
row() {  # row METRIC VALUE TARGET RESULT
    ROWS+=("$(printf '%-32s %16s %12s  %s' "$1" "$2" "$3" "$4")")
    [[ $4 != FAIL ]] || OVERALL=FAIL
}
case $MODE in
default | nginx | latency)
    row "worker deliveries/s" "$DPS" ">= $TARGET_DPS" "$(check "$DPS" ">=" "$TARGET_DPS")"
    if [[ $MODE == latency ]]; then
        row "Little's-law bound (deliv./s)" "$LITTLE_BOUND" "" ""
        row "worker / bound" "$(awk -v d="$DPS" -v b="$LITTLE_BOUND" 'BEGIN { printf "%.2f", (b > 0 ? d / b : 0) }')" "" ""
    fi
    row "every round: all N sent" "$(yes_no $ALL_DONE)" "all" "$(pass_if $ALL_DONE)"
    if [[ $MODE == nginx ]]; then
        row "every round: nginx answered N" "$(yes_no $ALL_ACCEPTED)" "N, 0 dup." "$(pass_if $ALL_ACCEPTED)"
    else
        row "every round: emulator got N" "$(yes_no $ALL_ACCEPTED)" "N / 0" "$(pass_if $ALL_ACCEPTED)"
    fi
    ;;
outage)
    row "worker deliveries/s (outage in)" "$DPS" "" ""
    row "every delivery sent, 0 failed" "$(yes_no $ALL_DONE)" "all" "$(pass_if $ALL_DONE)"
    row "outage hit the campaign" "$(yes_no $ALL_HIT)" "in flight" "$(pass_if $ALL_HIT)"
    row "emulator accepted / sent" "$SUM_ACCEPTED / $SUM_DELIVERIES" "" ""
    row "duplicates (accepted - sent)" "$((SUM_ACCEPTED - SUM_DELIVERIES))" "" ""
    row "deliveries with attempts > 1" "$SUM_RETRIED" "" ""
    row "worker sends not_sent/no_answer" "$SUM_NOT_SENT / $SUM_NO_ANSWER" "" ""
    row "streams the outage cut" "$SUM_DROPPED" "" ""
    ;;
esac
row "worker peak RSS (MB, VmHWM)" "$RSS_PEAK_MB" "< $TARGET_RSS_MB" "$(check "$RSS_PEAK_MB" "<" "$TARGET_RSS_MB")"
row "worker idle RSS (MB)" "$RSS_IDLE_MB" "" ""
row "worker SIGTERM exit (rc, s)" "$WORKER_RC, $T_STOP" "0, < $TARGET_STOP_S" "$([[ $WORKER_RC == 0 ]] && echo PASS || echo FAIL)"
if [[ $RUN_H2 == 1 ]]; then
    row "h2load best req/s (raw limit)" "$H2_MEDIAN" "" ""
    row "ratio worker / h2load" "$H2_RATIO" ">= $TARGET_H2_RATIO" \
        "$([[ $H2_ERR == 0 && $H2_MEDIAN != 0 ]] && check "$H2_RATIO" ">=" "$TARGET_H2_RATIO" || echo FAIL)"
else
    row "h2load" "skipped" "" ""
fi
if [[ $MODE == default ]]; then   # judged (skipped: FAIL, not a full result)
    row "Admin SDK messages/s" "$SDK_RATE" "" ""
    row "Admin SDK successes" "$SDK_SUCCESS / $SDK_MESSAGES" "all" "$R_SDK_OK"
    row "ratio worker / Admin SDK" "$SDK_RATIO" ">= $TARGET_SDK_RATIO" \
        "$([[ $R_SDK_OK == PASS ]] && check "$SDK_RATIO" ">=" "$TARGET_SDK_RATIO" || echo FAIL)"
elif [[ $SKIP_SDK != 1 ]]; then   # information only
    row "Admin SDK messages/s" "$SDK_RATE" "" ""
    row "Admin SDK successes" "$SDK_SUCCESS / $SDK_MESSAGES" "" ""
    row "ratio worker / Admin SDK" "$SDK_RATIO" "" ""
else
    row "Admin SDK" "skipped" "" ""
fi
row "OVERALL" "" "" "$OVERALL"

case $MODE in
nginx) ENDPOINT_TEXT="nginx (canned 200s; tokens from fcm-emulator)" ;;
*) ENDPOINT_TEXT=fcm-emulator ;;
esac
{
    echo "Fan-out benchmark: one campaign through push-worker to $ENDPOINT_TEXT  ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
    if [[ $MODE == default ]]; then
        echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo none)$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty)'), $(nproc) cores, N=$N devices, WORKER_CONCURRENCY=$CONCURRENCY, h2load -n $N_H2 -m $H2_STREAMS, Admin SDK $SDK_MESSAGES messages"
        echo "$ROUNDS round(s) of h2load then the campaign; deliveries/s, h2load and the ratio are the rounds' medians"
    else
        echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo none)$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty)'), $(nproc) cores, N=$N devices, WORKERS=$WORKERS x WORKER_CONCURRENCY=$CONCURRENCY$([[ $RUN_H2 == 1 ]] && echo ", h2load -n $N_H2 -m $H2_STREAMS"), Admin SDK $([[ $SKIP_SDK == 1 ]] && echo skipped || echo "$SDK_MESSAGES messages (not judged)")"
        if [[ $RUN_H2 == 1 ]]; then
            echo "$ROUNDS round(s) of h2load then the campaign; deliveries/s, h2load and the ratio are the rounds' medians"
        else
            echo "$ROUNDS round(s) of the campaign, no h2load$([[ -n $LATENCY ]] && echo " (with FCM's latency h2load -c2 -m$H2_STREAMS is latency-bound itself)"); deliveries/s is the rounds' median"
        fi
    fi
    [[ $MODE != nginx ]] || echo "mode ENDPOINT=nginx: nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///'), worker_processes 1, http2_max_concurrent_streams 128 (default), keepalive_requests $NGINX_KEEPALIVE_REQUESTS (nginx's default: 1000)$([[ $H2LOAD_URL == "$SEND_URL" ]] || echo " (h2load: 1000000, on port $NGINX_H2LOAD_PORT)"), answering before it reads the body, then RST_STREAM(NO_ERROR)"
    [[ -z $LATENCY ]] || echo "mode LATENCY=$LATENCY: mean ${LATENCY_MEAN_MS} ms; Little's-law bound WORKERS x WORKER_CONCURRENCY / mean = $((CONCURRENCY * WORKERS)) / ${LATENCY_MEAN_MS} ms = $LITTLE_BOUND deliveries/s$([[ $MODE == outage ]] && echo " (not judged with an outage)")"
    [[ -z $OUTAGE_AFTER ]] || echo "mode OUTAGE_AFTER=$OUTAGE_AFTER OUTAGE_FOR=$OUTAGE_FOR: FCM (fcm-emulator, its token endpoint included) unreachable for ${OUTAGE_FOR}s from ${OUTAGE_AFTER}s after the enqueue; JOB_TIMEOUT ${JOB_TIMEOUT}s"
    echo
    printf '%-32s %16s %12s  %s\n' "metric" "value" "target" "result"
    printf '%s\n' "${ROWS[@]}"
    echo
    printf '%s\n' "${ROUND_LINES[@]}"
    echo "last round: enqueue -> last delivery ${FANOUT_S}s, -> job completed ${JOB_S}s, -> audience expanded ${EXPAND_S}s"
    echo "phases (wall s): seed/reset $T_SEED, rounds $T_ROUNDS, worker stop $T_STOP, Admin SDK $T_SDK"
    [[ $H2_ERR == 0 ]] || echo "NOTE: an h2load run had errors (see $OUT/fanout-h2load-r*-c*.txt); it was not counted."
    [[ $ALL_DONE == 1 ]] || echo "NOTE: not every delivery was sent: the fan-out figures are NOT a valid result (see $OUT/fanout-worker.log)."
    [[ $MODE != outage || $ALL_HIT == 1 ]] || echo "NOTE: the outage did not hit a campaign in flight (the job ended, or every delivery was sent, first): lower OUTAGE_AFTER, raise N, or set LATENCY."
} | tee "$OUT/fanout-summary.txt"

[[ $OVERALL == PASS ]]
