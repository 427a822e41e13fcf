#!/usr/bin/env bash
# Registration benchmark for POST /push/devices, in one command from anywhere:
#
#   bench/registration/run.sh
#
# Measures push-api with wrk, then the same SQL function with pgbench (the
# database's own limit), and compares them against the targets. See README.md.
#
# Knobs (environment):
#   DURATION=30         seconds per measured run (wrk and pgbench)
#   WARMUP=5            seconds of wrk warm-up before the measured run
#   CONNECTIONS=64      wrk connections          THREADS=2     wrk threads
#   PGBENCH_CLIENTS=16  pgbench clients          PGBENCH_THREADS=2
#   PGBENCH_ARGS=       extra pgbench options, e.g. "-M simple" (default: -M prepared, like push-api)
#   USERS=20000         distinct users (JWTs) driven by wrk
#   SEED_DEVICES=200000 devices already registered when each phase starts
#   SKIP_BUILD=1        use the existing .build/release binaries
#   BIN_DIR=dir         with SKIP_BUILD=1: take push-api and pushctl from dir (A/B runs against a kept build)
#   DATABASE_URL=...    use this database instead of a local one in bench/out/pg
#   PG_PORT=55432       port of the local PostgreSQL   API_PORT=18080
#   API_POOL_MAX=8      push-api's database connections (DATABASE_URL's ?pool_max=; see README.md)
#
# Outputs in bench/out/: registration-wrk.txt, registration-warmup.txt, registration-pgbench.txt,
# registration-pgbench-batch.txt, registration-metrics.txt, push-api.log, registration-summary.txt,
# registration-walstall-{wrk,pgbench,pgbench-batch}.txt (bench/lib/walstall.sh).
# Exit status: 0 when every target passes, 1 otherwise (or on any error).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."   # repo root: paths below are relative to it
BENCH=bench/registration
source bench/lib/stack.sh   # log, die and the stack's steps, shared with bench/fanout and bench/latency
source bench/lib/cpu.sh
source bench/lib/walstall.sh
OUT=bench/out
mkdir -p "$OUT"

DURATION=${DURATION:-30}
WARMUP=${WARMUP:-5}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
PGBENCH_CLIENTS=${PGBENCH_CLIENTS:-16}
PGBENCH_THREADS=${PGBENCH_THREADS:-2}
PGBENCH_ARGS=${PGBENCH_ARGS:-}
USERS=${USERS:-20000}
PG_PORT=${PG_PORT:-55432}
API_PORT=${API_PORT:-18080}
API_POOL_MAX=${API_POOL_MAX:-8}
BIN=${BIN_DIR:-.build/release}   # BIN_DIR: another build's push-api and pushctl (with SKIP_BUILD=1), for A/B runs

# Targets.
TARGET_RPS=3000
TARGET_P99_MS=25
TARGET_RATIO=0.50

# Fixed 40-byte secret: benchmark-only, shared by push-api and gen_tokens.py.
export JWT_SECRET="bench-registration-secret-0123456789abcd"

# ------------------------------------------------------------------ cleanup
API_PID=
STARTED_PG=0
cleanup() {
    local rc=$?
    walstall_stop
    stop_pid "$API_PID" push-api 10   # graceful shutdown gets 10 s, then it is forced
    stop_local_pg "$OUT/pg"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM   # route signals through the EXIT trap

# ------------------------------------------------------------------ tools
need_cmd wrk wrk
need_cmd psql postgresql-client
need_cmd pgbench postgresql-client
need_cmd curl curl
command -v python3 >/dev/null || die "python3 not found"

# ------------------------------------------------------------------ build
# Here SKIP_BUILD=1 uses the binaries as they are and anything else (unset too) builds both
# (build_release's SKIP_BUILD=0).
SKIP_BUILD=$([[ ${SKIP_BUILD:-0} == 1 ]] && echo 1 || echo 0) build_release "$BIN" push-api pushctl

# ------------------------------------------------------------------ database
start_local_pg "$OUT/pg" "$PG_PORT"

sql() { psql "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -tA -c "$1"; }   # stack.sh's, but with the NOTICEs shown

log "migrating"
"$BIN/pushctl" migrate

# A second run finds the app already there; the SELECT below catches real failures.
if ! app_out=$("$BIN/pushctl" app add --code bench --name Bench 2>&1); then
    grep -qi "exist" <<<"$app_out" || echo "$app_out" >&2
fi
APP_ID=$(sql "SELECT id FROM apps WHERE code = 'bench'")
[[ $APP_ID =~ ^[0-9]+$ ]] || die "no app with code 'bench' (pushctl app add output: ${app_out:-ok})"
log "app id: $APP_ID"

JWT_FILE=$OUT/registration-jwts.txt
python3 "$BENCH/gen_tokens.py" --app-id "$APP_ID" --count "$USERS" --out "$JWT_FILE"

# ------------------------------------------------------------------ push-api
API_URL=http://127.0.0.1:$API_PORT
# Refuse to benchmark whatever else might already listen on the port.
if curl -s -o /dev/null --max-time 1 "$API_URL/healthz"; then
    die "something already listens on $API_URL; stop it or set API_PORT"
fi
log "starting push-api on $API_URL (log: $OUT/push-api.log)"
# pool_max joins the URL's query (a local cluster's URL already has one).
API_DATABASE_URL="$DATABASE_URL$([[ $DATABASE_URL == *\?* ]] && echo '&' || echo '?')pool_max=$API_POOL_MAX"
# wrk drives each user several times a minute, far more often than an app does: the per-user rate
# limit is lifted so that the run measures registrations, not 429s (the device cap stays).
DATABASE_URL=$API_DATABASE_URL JWT_SECRET=$JWT_SECRET API_PORT=$API_PORT LOG_LEVEL=warning \
    REGISTRATIONS_PER_USER_PER_MINUTE=60000 "$BIN/push-api" >"$OUT/push-api.log" 2>&1 &
API_PID=$!
wait_http "$API_URL/healthz" "$API_PID" push-api "$OUT/push-api.log" healthy

# ------------------------------------------------------------------ wrk
run_wrk() {  # run_wrk SECONDS RUN_ID: args after "--" go to register.lua
    BENCH_RUN_ID=$2 wrk "-t$THREADS" "-c$CONNECTIONS" "-d$1s" --latency \
        -s "$BENCH/register.lua" "$API_URL" -- "$JWT_FILE" "$THREADS"
}

# A registry that already holds devices, with fresh statistics: PL/pgSQL caches its plans, and
# plans made while the table is empty (right after a TRUNCATE) scan it whole until autovacuum's
# ANALYZE catches up, which a 30 s run never sees. Both phases start from the same state.
#
# Each phase also starts right after a checkpoint, so neither one pays for a checkpoint that the
# other's writes (or the seeding) triggered: the first change to each page after a checkpoint
# writes the whole page to the WAL, and one falling inside a 30 s run took its p99 from ~30 ms to
# 170-380 ms. The seeding then takes those full-page writes, before the measured run.
reset_registry() {
    sql "CHECKPOINT" 2>/dev/null || log "CHECKPOINT refused (needs superuser or pg_checkpoint); a checkpoint may fall inside a run"
    sql "TRUNCATE push_devices RESTART IDENTITY CASCADE"
    sql "INSERT INTO push_devices (user_id, app_id, token, platform, device_id)
         SELECT 1000000 + g, $APP_ID, 'seed-' || g || '-' || md5(g::text) || repeat('x', 100), 'android', 'seed-dev-' || g
           FROM generate_series(1, ${SEED_DEVICES:-200000}) g"
    sql "ANALYZE push_devices"
    sync   # the seeding's writes leave the page cache now, not in the kernel's flush 30 s later, mid-run
}

reset_registry
log "warm-up ${WARMUP}s"
# Distinct run ids keep warm-up tokens apart from the measured run's tokens.
run_wrk "$WARMUP" "warm$RANDOM" >"$OUT/registration-warmup.txt"
grep -q "^ERROR" "$OUT/registration-warmup.txt" && { cat "$OUT/registration-warmup.txt" >&2; die "errors during warm-up"; }

log "wrk ${DURATION}s, $THREADS threads, $CONNECTIONS connections"
A_CPU0=$(cpu_secs "$API_PID"); P_CPU0=$(pg_cpu_secs); M0=$(machine_busy)
walstall_watch "$DATABASE_URL" "$OUT/registration-walstall-wrk.txt"
run_wrk "$DURATION" "main$RANDOM" | tee "$OUT/registration-wrk.txt"
walstall_stop
# Where the machine's CPU went: push-api, PostgreSQL, and the rest (mostly wrk).
A_CPU=$(delta "$A_CPU0" "$(cpu_secs "$API_PID")"); P_CPU=$(delta "$P_CPU0" "$(pg_cpu_secs)")
M_CPU=$(busy_secs "$M0" "$(machine_busy)")
# Registrations per database statement over warm-up and run (push-api's RegistrationBatcher).
curl -fs --max-time 5 "$API_URL/metrics" >"$OUT/registration-metrics.txt" || true
BATCH_MEAN=$(awk '/^registration_batch_size_sum/ { s = $2 } /^registration_batch_size_count/ { c = $2 }
    END { printf "%.1f", (c > 0 ? s / c : 0) }' "$OUT/registration-metrics.txt")
kill -0 "$API_PID" 2>/dev/null || die "push-api died during the benchmark (see $OUT/push-api.log)"

# ------------------------------------------------------------------ pgbench
reset_registry
log "pgbench ${DURATION}s, $PGBENCH_CLIENTS clients (push-api idle)"
pgbench_rc=0
PB_P_CPU0=$(pg_cpu_secs); PB_M0=$(machine_busy)
walstall_watch "$DATABASE_URL" "$OUT/registration-walstall-pgbench.txt"
# shellcheck disable=SC2086  # PGBENCH_ARGS is deliberately word-split
pgbench -n -M prepared -c "$PGBENCH_CLIENTS" -j "$PGBENCH_THREADS" -T "$DURATION" $PGBENCH_ARGS \
    -f "$BENCH/pgbench_register.sql" -D "app_id=$APP_ID" "$DATABASE_URL" \
    2>&1 | tee "$OUT/registration-pgbench.txt" || pgbench_rc=$?
walstall_stop
PB_P_CPU=$(delta "$PB_P_CPU0" "$(pg_cpu_secs)"); PB_M_CPU=$(busy_secs "$PB_M0" "$(machine_busy)")

# A second baseline: the database's limit for the statement push-api actually sent, batches of
# its mean size. Reported beside the first; the target stays on the first (the issue's).
BATCH=$(awk -v m="$BATCH_MEAN" 'BEGIN { b = int(m + 0.5); print (b < 1 ? 1 : b) }')
reset_registry
log "pgbench ${DURATION}s, $PGBENCH_CLIENTS clients, batches of $BATCH (push-api idle)"
pgbench_batch_rc=0
walstall_watch "$DATABASE_URL" "$OUT/registration-walstall-pgbench-batch.txt"
# shellcheck disable=SC2086
pgbench -n -M prepared -c "$PGBENCH_CLIENTS" -j "$PGBENCH_THREADS" -T "$DURATION" $PGBENCH_ARGS \
    -f "$BENCH/pgbench_register_batch.sql" -D "app_id=$APP_ID" -D "batch=$BATCH" "$DATABASE_URL" \
    2>&1 | tee "$OUT/registration-pgbench-batch.txt" || pgbench_batch_rc=$?
walstall_stop

# ------------------------------------------------------------------ summary
# One "RESULT key=value ..." line comes from register.lua's done().
result=$(grep '^RESULT ' "$OUT/registration-wrk.txt" || true)
[[ -n $result ]] || die "no RESULT line in $OUT/registration-wrk.txt"
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$result"; }
RPS=$(field rps); P50=$(field p50_ms); P99=$(field p99_ms); WRK_SECS=$(field duration_s)
NON2XX=$(field non2xx); SOCK=$(field socket_errors); REQS=$(field requests); REREG=$(field rereg)
TPS=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time).*/\1/p' "$OUT/registration-pgbench.txt")
PGFAIL=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$OUT/registration-pgbench.txt")
TPS=$(awk -v t="${TPS:-0}" 'BEGIN { printf "%.1f", t }'); PGFAIL=${PGFAIL:-unknown}
BATCH_TPS=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time).*/\1/p' "$OUT/registration-pgbench-batch.txt")
BATCH_RPS=$(awk -v t="${BATCH_TPS:-0}" -v b="$BATCH" 'BEGIN { printf "%.1f", t * b }')
BATCH_RATIO=$(awk -v a="$RPS" -v b="$BATCH_RPS" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
[[ $pgbench_batch_rc == 0 ]] || BATCH_RPS="failed (rc $pgbench_batch_rc)"

# awk does the float arithmetic; prints PASS/FAIL.
check() { awk -v a="$1" -v b="$3" "BEGIN { exit !(a $2 b) }" && echo PASS || echo FAIL; }
RATIO=$(awk -v a="$RPS" -v b="$TPS" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
REREG_PCT=$(awk -v a="$REREG" -v b="$REQS" 'BEGIN { printf "%.1f", (b > 0 ? 100 * a / b : 0) }')
R_RPS=$(check "$RPS" ">=" "$TARGET_RPS")
R_P99=$(check "$P99" "<" "$TARGET_P99_MS")
R_RATIO=$(check "$RATIO" ">=" "$TARGET_RATIO")
# wrk stops early on Ctrl-C and still reports: a short run is not a result.
R_DUR=$(check "$WRK_SECS" ">=" "$(awk -v d="$DURATION" 'BEGIN { print d * 0.95 }')")
R_ERR=$([[ $NON2XX == 0 && $SOCK == 0 ]] && echo PASS || echo FAIL)
R_PG=$([[ $pgbench_rc == 0 && $PGFAIL == 0 ]] && echo PASS || echo FAIL)
OVERALL=PASS
for r in "$R_RPS" "$R_P99" "$R_RATIO" "$R_ERR" "$R_PG" "$R_DUR"; do [[ $r == PASS ]] || OVERALL=FAIL; done

{
    echo "Registration benchmark: POST /push/devices  ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo none)$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty)'), $(nproc) cores, ${DURATION}s runs, wrk -t$THREADS -c$CONNECTIONS, pgbench -c$PGBENCH_CLIENTS -j$PGBENCH_THREADS${PGBENCH_ARGS:+ $PGBENCH_ARGS}, push-api pool_max=$API_POOL_MAX, $USERS users"
    echo
    printf '%-28s %12s %10s  %s\n' "metric" "value" "target" "result"
    printf '%-28s %12s %10s  %s\n' "wrk requests/s" "$RPS" ">= $TARGET_RPS" "$R_RPS"
    printf '%-28s %12s %10s  %s\n' "wrk latency p50 (ms)" "$P50" "" ""
    printf '%-28s %12s %10s  %s\n' "wrk latency p99 (ms)" "$P99" "< $TARGET_P99_MS" "$R_P99"
    printf '%-28s %12s %10s  %s\n' "wrk non-2xx / socket errors" "$NON2XX / $SOCK" "0 / 0" "$R_ERR"
    printf '%-28s %12s %10s  %s\n' "wrk measured seconds" "$WRK_SECS" "$DURATION" "$R_DUR"
    printf '%-28s %12s %10s  %s\n' "wrk re-registrations (%)" "$REREG_PCT" "~10" ""
    printf '%-28s %12s %10s  %s\n' "pgbench tps (baseline)" "$TPS" "" ""
    printf '%-28s %12s %10s  %s\n' "pgbench failed txns / rc" "$PGFAIL / $pgbench_rc" "0 / 0" "$R_PG"
    printf '%-28s %12s %10s  %s\n' "ratio wrk / pgbench" "$RATIO" ">= $TARGET_RATIO" "$R_RATIO"
    printf '%-28s %12s %10s  %s\n' "OVERALL" "" "" "$OVERALL"
    echo
    echo "registrations per database statement (mean, push-api): $BATCH_MEAN"
    echo "pgbench in batches of $BATCH, registrations/s: $BATCH_RPS; wrk / that: $BATCH_RATIO (no target)"
    per_req() { awk -v c="$1" -v n="$2" 'BEGIN { printf "%.0f", (n > 0 ? 1e6 * c / n : 0) }'; }
    PB_TXNS=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$OUT/registration-pgbench.txt")
    echo "CPU per request (µs): push-api $(per_req "$A_CPU" "$REQS"), PostgreSQL $(per_req "$P_CPU" "$REQS"), rest of the machine (mostly wrk) $(per_req "$(delta "$(awk -v a="$A_CPU" -v p="$P_CPU" 'BEGIN { print a + p }')" "$M_CPU")" "$REQS")"
    echo "CPU per pgbench transaction (µs): PostgreSQL $(per_req "$PB_P_CPU" "${PB_TXNS:-0}"), rest of the machine (mostly pgbench) $(per_req "$(delta "$PB_P_CPU" "$PB_M_CPU")" "${PB_TXNS:-0}")"
    stalls() { read -r count longest < <(walstall_summary "$OUT/registration-walstall-$1.txt"); echo "$count (longest $longest ms)"; }
    WRK_STALLS=$(stalls wrk)
    echo "WAL flush stalls of ${WALSTALL_MIN_MS} ms or more (every busy backend waiting on the WAL fsync): wrk $WRK_STALLS, pgbench $(stalls pgbench), batched pgbench $(stalls pgbench-batch)"
    [[ $R_P99 == PASS || ${WRK_STALLS%% *} == 0 ]] || echo "NOTE: the disk stalled the WAL during the wrk run; wrk's p99 counts the requests a stall held back (see README.md, \"WAL flush stalls\")."
    [[ $R_ERR == PASS ]] || echo "NOTE: the run had HTTP errors; it is NOT a valid result (see $OUT/registration-wrk.txt, $OUT/push-api.log)."
} | tee "$OUT/registration-summary.txt"

[[ $OVERALL == PASS ]]
