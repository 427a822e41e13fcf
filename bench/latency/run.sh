#!/usr/bin/env bash
# Latency benchmark (issue 24, "Transactional pushes never wait behind campaigns"): how long a
# single notification (one user, one device) takes from its enqueue to its recorded FCM answer,
# idle and while a 200,000-device campaign runs, in one command from anywhere:
#
#   bench/latency/run.sh
#   SKIP_BUILD=1 bench/latency/run.sh          # the release binaries as they are
#
# One push-worker, fcm-emulator answering at once on 127.0.0.1, a throw-away PostgreSQL. Phases:
#   1 idle        SINGLES singles of app bench at SINGLES_RATE/s, nothing else
#   2 alone       a campaign to the N devices of app bench, nothing else: its rate
#   3 same app    the campaign again; singles of app bench while it runs
#   4 other app   the campaign again; singles of app bench2 (its own service account, N2 devices)
# Latency = push_deliveries.updated_at (the worker's write transaction; = created_at for a row
# written once with its result) - push_jobs.created_at (the enqueue transaction's now()), from
# the database's clock. Singles are written by singles.py into one psql session, one statement
# (and so one transaction) per single. See README.md.
#
# Knobs (environment):
#   N=200000            devices of app bench (users 1..N, one device each) = deliveries per campaign
#   N2=1000             devices of app bench2 (users 1..N2)
#   HISTORY=$N          sent deliveries of an earlier campaign seeded first (as bench/fanout; 0: none)
#   SINGLES=200         singles of the idle phase; the most per campaign phase
#   SINGLES_RATE=20     singles per second (open loop, steady pace)
#   SINGLES_LEAD=2      seconds after the campaign's enqueue the singles start (phases 3, 4)
#   SINGLES_TAIL=2      they stop this long before the campaign alone (phase 2) had ended
#   SEED=24             seed of the random user ids
#   WARMUP=1            first a campaign to the N devices, not measured (0: none): the worker's and the
#                       emulator's first campaign is slower (connections, memory), which would flatter
#                       the ratio of the campaign phases to the campaign alone
#   CONCURRENCY=1024    WORKER_CONCURRENCY
#   SKIP_BUILD=1        never build; SKIP_BUILD=0 always build; unset: build only missing binaries
#   JOB_TIMEOUT=        seconds to wait for each phase's jobs (default 120 + N/1000)
#   DATABASE_URL=...    use this database instead of a local one in bench/out/latency-pg
#                       (its push_devices, push_jobs, push_job_chunks and push_deliveries are TRUNCATED)
#   PG_PORT=55434       EMULATOR_PORT=18453       METRICS_PORT=19091
#
# Outputs in bench/out/: latency-summary.txt, latency-singles.csv (one line per single),
# latency-worker.log, latency-emulator.log, latency-enqueue-PHASE.txt (psql's output: job ids),
# latency-walstall-PHASE.txt (WAL flush stall samples, bench/lib/walstall.sh), latency-sa.json and
# latency-sa2.json (throw-away service accounts), latency-ca.pem, latency-pg/ (the cluster).
# Exit status: 0 when every target passes, 1 otherwise (or on any error).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."   # repo root: paths below are relative to it
source bench/lib/stack.sh   # log, die, sql and the stack's steps, shared with bench/fanout and bench/registration
source bench/lib/cpu.sh
source bench/lib/walstall.sh
BENCH=bench/latency
OUT=bench/out
mkdir -p "$OUT"

N=${N:-200000}
N2=${N2:-1000}
HISTORY=${HISTORY:-$N}
SINGLES=${SINGLES:-200}
SINGLES_RATE=${SINGLES_RATE:-20}
SINGLES_LEAD=${SINGLES_LEAD:-2}
SINGLES_TAIL=${SINGLES_TAIL:-2}
SEED=${SEED:-24}
WARMUP=${WARMUP:-1}
CONCURRENCY=${CONCURRENCY:-1024}
PG_PORT=${PG_PORT:-55434}
EMULATOR_PORT=${EMULATOR_PORT:-18453}
METRICS_PORT=${METRICS_PORT:-19091}
JOB_TIMEOUT=${JOB_TIMEOUT:-$((120 + N / 1000))}
BIN=${BIN_DIR:-.build/release}   # BIN_DIR: only to test this script with stand-ins
PROJECT=bench-project
PROJECT2=bench2-project

# Targets.
TARGET_IDLE_P50_MS=10
TARGET_IDLE_P99_MS=50
TARGET_BUSY_P99_MS=250     # singles behind a campaign, same app and other app
TARGET_RATE_RATIO=0.90     # campaign rate with singles / alone

for v in N N2 SINGLES CONCURRENCY JOB_TIMEOUT; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[[ $WARMUP == 0 || $WARMUP == 1 ]] || die "WARMUP must be 0 or 1, got '$WARMUP'"
for v in HISTORY SEED; do [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number, got '${!v}'"; done
for v in SINGLES_RATE SINGLES_LEAD SINGLES_TAIL; do
    [[ ${!v} =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "$v must be a number of (per) seconds, got '${!v}'"
done
awk -v r="$SINGLES_RATE" 'BEGIN { exit !(r > 0) }' || die "SINGLES_RATE must be above 0"

# ------------------------------------------------------------------ cleanup
WORKER_PID=
EMULATOR_PID=
SINGLES_PID=
STARTED_PG=0
cleanup() {
    local rc=$?
    [[ -z $SINGLES_PID ]] || kill "$SINGLES_PID" 2>/dev/null || true
    walstall_stop
    stop_pid "$WORKER_PID" push-worker 30
    stop_pid "$EMULATOR_PID" fcm-emulator 10
    stop_local_pg "$OUT/latency-pg"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM   # route signals through the EXIT trap

# ------------------------------------------------------------------ tools, build, ports
need_cmd psql postgresql-client
need_cmd curl curl
need_cmd openssl openssl
command -v python3 >/dev/null || die "python3 not found"
build_release "$BIN" push-worker fcm-emulator pushctl
port_busy "$EMULATOR_PORT" && die "something already listens on 127.0.0.1:$EMULATOR_PORT; set EMULATOR_PORT"
port_busy "$METRICS_PORT" && die "something already listens on 127.0.0.1:$METRICS_PORT; set METRICS_PORT"

# ------------------------------------------------------------------ service accounts
# Throw-away RSA keys each run, one per app (each its own Firebase project); the emulator learns
# both public keys from the same files.
TOKEN_URL=https://127.0.0.1:$EMULATOR_PORT/token
SA=$OUT/latency-sa.json
SA2=$OUT/latency-sa2.json
make_service_account "$SA" "$PROJECT" "$TOKEN_URL"
make_service_account "$SA2" "$PROJECT2" "$TOKEN_URL"

# ------------------------------------------------------------------ database
DATABASE_URL_GIVEN=${DATABASE_URL:-}
start_local_pg "$OUT/latency-pg" "$PG_PORT"
# The CPU of our cluster only (a test suite's clusters may run beside it); any postgres process
# with DATABASE_URL given.
PG_PID=
[[ ! -r $OUT/latency-pg/pgdata/postmaster.pid ]] || PG_PID=$(head -n1 "$OUT/latency-pg/pgdata/postmaster.pid")
if [[ -n $PG_PID && -z ${DATABASE_URL_GIVEN:-} ]]; then our_pg_cpu() { pg_cluster_cpu_secs "$PG_PID"; }; else our_pg_cpu() { pg_cpu_secs; }; fi

log "migrating"
"$BIN/pushctl" migrate
app_with_credentials "$BIN" bench Bench "$SA"
app_with_credentials "$BIN" bench2 "Bench 2" "$SA2"
APP_ID=$(sql "SELECT id FROM apps WHERE code = 'bench'")
APP2_ID=$(sql "SELECT id FROM apps WHERE code = 'bench2'")
[[ $APP_ID =~ ^[0-9]+$ && $APP2_ID =~ ^[0-9]+$ ]] || die "apps bench and bench2 not found (ids '$APP_ID', '$APP2_ID')"
log "app ids: bench $APP_ID, bench2 $APP2_ID"

# push_jobs.priority and the priority parameter of push_enqueue and push_enqueue_campaign
# (defaults: user-targeted high, campaign bulk) are detected, so that a build from before
# priorities can be measured as a baseline. This script never passes one: the defaults are what
# is measured.
PRIORITY_COLUMN=$(sql "SELECT column_name FROM information_schema.columns WHERE table_name = 'push_jobs' AND column_name = 'priority'")
PRIORITY_PARAM=$(sql "SELECT count(*) FROM pg_proc WHERE proname IN ('push_enqueue', 'push_enqueue_campaign')
                      AND pg_get_function_arguments(oid) ~ '\mpriority\M'")
if [[ -n $PRIORITY_COLUMN ]]; then
    PRIORITY_TEXT="push_jobs.priority exists ($PRIORITY_PARAM of push_enqueue/push_enqueue_campaign take a priority): the defaults are measured (none passed)"
else
    PRIORITY_TEXT="no push_jobs.priority column (before issue 24): no priority passed or stored"
fi
log "priority: $PRIORITY_TEXT"
SCHEMA_VERSION=$(sql "SELECT max(version) FROM schema_migrations")

t0=$(now)
# As bench/fanout: the jobs' tables truncated, exactly N active bench devices and N2 active
# bench2 devices (re-seeded unless they are there), and one earlier, completed campaign of bench
# to the same devices, so push_deliveries has rows and statistics, as in a service that has
# sent before.
seed_campaign_tables "$HISTORY" "$APP_ID:bench:$N" "$APP2_ID:bench2:$N2"
T_SEED=$(elapsed "$t0")
FIRST_JOB=$(sql "SELECT coalesce(max(id), 0) FROM push_jobs")   # the jobs of this run come after it

# ------------------------------------------------------------------ fcm-emulator, push-worker
log "starting fcm-emulator on 127.0.0.1:$EMULATOR_PORT (log: $OUT/latency-emulator.log)"
start_emulator "$BIN" "$EMULATOR_PORT" "$OUT/latency-ca.pem" "$OUT/latency-emulator.out" "$OUT/latency-emulator.log" \
    --service-account "$SA" --service-account "$SA2" --retain-messages 0
[[ $GOOGLE_TOKEN_URL == "$TOKEN_URL" ]] || die "emulator token URL $GOOGLE_TOKEN_URL, expected $TOKEN_URL"

log "starting push-worker, concurrency $CONCURRENCY (log: $OUT/latency-worker.log)"
start_worker "$BIN" "$CONCURRENCY" "$METRICS_PORT" "$OUT/latency-worker.log"
sleep 1   # idle: listening for NOTIFY, nothing claimed

# ------------------------------------------------------------------ phase pieces
CSV=$OUT/latency-singles.csv
echo "phase,job_id,app,user_id,job_status,deliveries,sent,enqueued_at,delivered_at,latency_ms,counted" >"$CSV"
max_job() { sql "SELECT coalesce(max(id), 0) FROM push_jobs"; }
# Before each phase: the earlier campaigns' delivery rows of this run deleted (otherwise each
# campaign runs on a table 200,000 rows larger than the one before, and its rate is compared
# with a campaign that had it easier), then vacuumed and analyzed, so autovacuum does not start
# in the middle of the next phase: every phase starts from the same state.
settle() {
    sql "DELETE FROM push_deliveries WHERE job_id IN (SELECT id FROM push_jobs WHERE id > $FIRST_JOB AND user_ids IS NULL)"
    sql "VACUUM (ANALYZE) push_jobs, push_deliveries, push_job_chunks"
    sleep 1
}

# start_singles PHASE APP USERS COUNT START_AT: singles.py into one psql session, in the
# background; psql's output (the job ids) in latency-enqueue-PHASE.txt. Sets SINGLES_PID.
start_singles() {
    local phase=$1 app=$2 users=$3 count=$4 start_at=$5
    log "$phase: $count singles of app $app at ${SINGLES_RATE}/s (users 1..$users)"
    python3 "$BENCH/singles.py" --app "$app" --users "$users" --count "$count" --rate "$SINGLES_RATE" \
        --start-at "$start_at" --seed "$SEED" \
        | PGOPTIONS="-c client_min_messages=warning" psql "$DATABASE_URL" -X -q -tA -v ON_ERROR_STOP=1 \
            >"$OUT/latency-enqueue-$phase.txt" 2>"$OUT/latency-enqueue-$phase.err" &
    SINGLES_PID=$!
}
finish_singles() {  # finish_singles PHASE: waits for psql's end; sets ENQUEUED (job ids it printed)
    wait "$SINGLES_PID" || log "$1: the enqueue session ended with an error: $(head -c 500 "$OUT/latency-enqueue-$1.err")"
    SINGLES_PID=
    ENQUEUED=$(grep -c '^[0-9][0-9]*$' "$OUT/latency-enqueue-$1.txt" || true)
}

# wait_jobs AFTER CAMPAIGN: until every job with id > AFTER has ended (CAMPAIGN, if not 0, first
# of all; progress every 5 s), or JOB_TIMEOUT. Polls once a second: each poll is a psql process,
# and the figures come from the database's clocks, not from this loop.
wait_jobs() {
    local after=$1 campaign=$2 t0 open last=0 secs
    t0=$(now)
    while :; do
        open=$(sql "SELECT count(*) FROM push_jobs WHERE id > $after AND status NOT IN ('completed', 'failed', 'cancelled')")
        [[ $open == 0 ]] && return 0
        kill -0 "$WORKER_PID" 2>/dev/null || { tail -n 30 "$OUT/latency-worker.log" >&2; die "push-worker died ($open jobs open)"; }
        secs=$(elapsed "$t0")
        if awk -v s="$secs" -v l="$last" 'BEGIN { exit !(s - l >= 5) }'; then
            last=$secs
            log "t=${secs}s: $open jobs open$([[ $campaign == 0 ]] || echo "; campaign: $(sql "SELECT string_agg(status || ' ' || n, ', ') FROM (SELECT status, count(*) n FROM push_deliveries WHERE job_id = $campaign GROUP BY 1 ORDER BY 1) s")")"
        fi
        if awk -v s="$secs" -v t="$JOB_TIMEOUT" 'BEGIN { exit !(s > t) }'; then
            log "jobs still open after ${JOB_TIMEOUT}s: $open"
            return 0
        fi
        sleep 1
    done
}

enqueue_campaign() {  # sets CAMPAIGN_ID
    CAMPAIGN_ID=$(sql "SELECT push_enqueue_campaign(app_code => 'bench',
                  message => '{\"notification\":{\"title\":\"Bench\",\"body\":\"campaign\"},\"data\":{\"k\":\"v\"}}')")
    [[ $CAMPAIGN_ID =~ ^[0-9]+$ ]] || die "push_enqueue_campaign returned '$CAMPAIGN_ID'"
}

# campaign_figures JOB: C_TOTAL C_SENT C_SECONDS (enqueue to the last delivery row written)
# C_STATUS C_COUNTS C_RATE (sent / C_SECONDS).
campaign_figures() {
    IFS='|' read -r C_TOTAL C_SENT C_SECONDS C_STATUS <<<"$(sql "
        SELECT count(d.id), count(d.id) FILTER (WHERE d.status = 'sent'),
               round(extract(epoch FROM max(d.updated_at) - j.created_at)::numeric, 3), j.status
          FROM push_jobs j LEFT JOIN push_deliveries d ON d.job_id = j.id
         WHERE j.id = $1 GROUP BY j.id")"
    C_COUNTS=$(sql "SELECT string_agg(status || coalesce(':' || error_code, '') || ' ' || n, ', ')
        FROM (SELECT status, error_code, count(*) n FROM push_deliveries WHERE job_id = $1 GROUP BY 1, 2 ORDER BY 1, 2) s")
    C_RATE=$(awk -v n="$C_SENT" -v s="${C_SECONDS:-0}" 'BEGIN { printf "%.0f", (s > 0 ? n / s : 0) }')
}

# The singles of a phase: the user-targeted jobs with id > AFTER. Each must have ended
# completed with exactly one delivery, sent. Latency: the delivery row's updated_at (its
# created_at unless a retry updated it later) - the job's created_at. With CAMPAIGN (not 0), only
# singles enqueued while it ran count: created_at from the campaign's created_at to its last
# delivery row.
singles_cte() {  # singles_cte AFTER CAMPAIGN
    cat <<SQL
WITH c AS (SELECT j.created_at AS c_start, max(d.updated_at) AS c_end
             FROM push_jobs j JOIN push_deliveries d ON d.job_id = j.id WHERE j.id = $2 GROUP BY j.id),
s AS (SELECT j.id, a.code, j.user_ids[1] AS user_id, j.status, j.created_at,
             count(d.id) AS deliveries, count(d.id) FILTER (WHERE d.status = 'sent') AS sent,
             count(d.id) FILTER (WHERE d.updated_at > d.created_at) AS updated_later,
             max(d.updated_at) AS delivered_at
        FROM push_jobs j JOIN apps a ON a.id = j.app_id LEFT JOIN push_deliveries d ON d.job_id = j.id
       WHERE j.id > $1 AND j.user_ids IS NOT NULL
       GROUP BY j.id, a.code),
t AS (SELECT s.*, (s.status = 'completed' AND s.deliveries = 1 AND s.sent = 1) AS ok,
             1000 * extract(epoch FROM s.delivered_at - s.created_at) AS latency_ms,
             ($2 = 0 OR (s.created_at >= c.c_start AND s.created_at <= c.c_end)) AS counted,
             (s.delivered_at > c.c_end) AS after_campaign
        FROM s LEFT JOIN c ON true)
SQL
}
# singles_figures PHASE AFTER CAMPAIGN: appends the phase's singles to the CSV; sets S_TOTAL
# S_OK S_COUNTED S_EXCLUDED S_COUNTED_OK P50 P99 PMAX PMIN S_UPDATED S_AFTER_CAMPAIGN.
singles_figures() {
    local cte
    cte=$(singles_cte "$2" "$3")
    sql "COPY ($cte SELECT '$1', id, code, user_id, status, deliveries, sent, created_at, delivered_at,
                         round(latency_ms::numeric, 3), counted FROM t ORDER BY id) TO STDOUT WITH (FORMAT csv)" >>"$CSV"
    IFS='|' read -r S_TOTAL S_OK S_COUNTED S_EXCLUDED S_COUNTED_OK P50 P99 PMAX PMIN S_UPDATED S_AFTER_CAMPAIGN <<<"$(sql "$cte
        SELECT count(*), count(*) FILTER (WHERE ok), count(*) FILTER (WHERE counted), count(*) FILTER (WHERE NOT counted),
               count(*) FILTER (WHERE counted AND ok),
               coalesce(round((percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms) FILTER (WHERE counted AND ok))::numeric, 1)::text, 'none'),
               coalesce(round((percentile_cont(0.99) WITHIN GROUP (ORDER BY latency_ms) FILTER (WHERE counted AND ok))::numeric, 1)::text, 'none'),
               coalesce(round((max(latency_ms) FILTER (WHERE counted AND ok))::numeric, 1)::text, 'none'),
               coalesce(round((min(latency_ms) FILTER (WHERE counted AND ok))::numeric, 1)::text, 'none'),
               coalesce(sum(updated_later), 0), count(*) FILTER (WHERE counted AND after_campaign)
          FROM t")"
}

# phase_begin NAME / phase_end NAME: the phase's CPU (below), the sends the emulator accepted, and
# WAL flush stalls (bench/lib/walstall.sh: moments of 100 ms or more when every busy backend waits
# for the WAL to reach the disk; samples in latency-walstall-NAME.txt).
phase_begin() { cpu_begin; walstall_watch "$DATABASE_URL" "$OUT/latency-walstall-$1.txt"; }
phase_end() {  # sets WAL_TEXT too
    local count longest
    walstall_stop
    cpu_end
    read -r count longest < <(walstall_summary "$OUT/latency-walstall-$1.txt")
    WAL_TEXT="WAL flush stalls >= ${WALSTALL_MIN_MS} ms: $count$( (( count == 0 )) || echo " (longest $longest ms)")"
    WAL_STALLS=$((WAL_STALLS + count))
}
# The CPU of the phase: the worker, the emulator, our PostgreSQL cluster, the machine.
cpu_begin() { CPU0_T=$(now); CPU0_W=$(cpu_secs "$WORKER_PID"); CPU0_E=$(cpu_secs "$EMULATOR_PID"); CPU0_P=$(our_pg_cpu); CPU0_M=$(machine_busy)
              STATS0=$(emulator_stats); }
# "everything else": the machine's CPU less these three (the script's psql and python3 included,
# a few tenths of a second): more than a second or so means another program competed for the CPU.
cpu_end() {   # sets CPU_TEXT, E_ACCEPTED (sends the emulator accepted during the phase)
    local w e p m
    w=$(delta "$CPU0_W" "$(cpu_secs "$WORKER_PID")"); e=$(delta "$CPU0_E" "$(cpu_secs "$EMULATOR_PID")")
    p=$(delta "$CPU0_P" "$(our_pg_cpu)"); m=$(machine_busy)
    OTHER_CPU=$(awk -v t="$(busy_secs "$CPU0_M" "$m")" -v w="$w" -v e="$e" -v p="$p" 'BEGIN { printf "%.1f", t - w - e - p }')
    # Its share of the machine's capacity over the phase: the most of any phase is shown.
    OTHER_PCT=$(awk -v o="$OTHER_CPU" -v s="$(elapsed "$CPU0_T")" -v c="$(nproc)" 'BEGIN { printf "%.0f", (s > 0 ? 100 * o / (s * c) : 0) }')
    (( OTHER_PCT <= OTHER_MAX_PCT )) || OTHER_MAX_PCT=$OTHER_PCT
    CPU_TEXT="CPU worker ${w}s, emulator ${e}s, PostgreSQL ${p}s, everything else ${OTHER_CPU}s (${OTHER_PCT}% of the machine); machine $(busy_pct "$CPU0_M" "$m")% busy"
    local after
    after=$(emulator_stats)
    E_ACCEPTED=$(( $(stat_field accepted <<<"$after") - $(stat_field accepted <<<"$STATS0") ))
}

PHASE_LINES=()
OTHER_MAX_PCT=0
WAL_STALLS=0
OTHER_NOTE_PCT=10   # above this, the summary warns that other programs competed for the CPU
ALL_ACCEPTED_MATCH=1

# ------------------------------------------------------------------ warm-up
T_WARMUP=0
WARMUP_TEXT="no warm-up campaign (WARMUP=0)"
if [[ $WARMUP == 1 ]]; then
    settle
    log "warm-up: a campaign to the $N devices (not measured)"
    t_phase=$(now)
    base=$(max_job)
    enqueue_campaign
    wait_jobs "$base" "$CAMPAIGN_ID"
    campaign_figures "$CAMPAIGN_ID"
    T_WARMUP=$(elapsed "$t_phase")
    WARMUP_TEXT="warm-up campaign (not judged): job $CAMPAIGN_ID $C_STATUS, $C_COUNTS, $C_RATE deliveries/s (${C_SECONDS}s)"
    log "warm-up: $C_RATE deliveries/s (${C_SECONDS}s, $C_COUNTS)"
fi

# ------------------------------------------------------------------ phase 1: idle
settle
log "phase 1 (idle): $SINGLES singles at ${SINGLES_RATE}/s"
phase_begin idle
t_phase=$(now)
base=$(max_job)
start_singles idle bench "$N" "$SINGLES" "$(awk -v t="$(now)" 'BEGIN { printf "%.3f", t + 0.5 }')"
finish_singles idle
IDLE_ENQUEUED=$ENQUEUED
wait_jobs "$base" 0
phase_end idle
singles_figures idle "$base" 0
IDLE=("$S_TOTAL" "$S_OK" "$P50" "$P99" "$PMAX" "$PMIN" "$S_UPDATED")
(( E_ACCEPTED == S_TOTAL )) || ALL_ACCEPTED_MATCH=0
PHASE_LINES+=("1 idle: $S_TOTAL singles (psql printed $IDLE_ENQUEUED job ids), $S_OK completed with their one delivery sent; latency min $PMIN, p50 $P50, p99 $P99, max $PMAX ms; rows updated after their insert $S_UPDATED; emulator accepted $E_ACCEPTED; $CPU_TEXT; $WAL_TEXT; $(elapsed "$t_phase") s")
log "phase 1: p50 $P50 ms, p99 $P99 ms, max $PMAX ms ($S_OK/$S_TOTAL sent)"

# ------------------------------------------------------------------ phase 2: the campaign alone
settle
log "phase 2 (campaign alone): $N devices"
phase_begin alone
t_phase=$(now)
base=$(max_job)
enqueue_campaign
ALONE_ID=$CAMPAIGN_ID
wait_jobs "$base" "$CAMPAIGN_ID"
phase_end alone
campaign_figures "$CAMPAIGN_ID"
ALONE=("$C_RATE" "$C_SECONDS" "$C_SENT" "$C_TOTAL" "$C_STATUS")
(( E_ACCEPTED == C_TOTAL )) || ALL_ACCEPTED_MATCH=0
PHASE_LINES+=("2 campaign alone: job $CAMPAIGN_ID $C_STATUS, $C_COUNTS; ${C_SECONDS}s to the last delivery: $C_RATE deliveries/s; emulator accepted $E_ACCEPTED; $CPU_TEXT; $WAL_TEXT; $(elapsed "$t_phase") s")
log "phase 2: $C_RATE deliveries/s (${C_SECONDS}s, $C_COUNTS)"

# The singles of phases 3 and 4 run from SINGLES_LEAD s after the enqueue to SINGLES_TAIL s
# before the campaign alone had ended: at most SINGLES.
BUSY_COUNT=$(awk -v d="${C_SECONDS:-0}" -v l="$SINGLES_LEAD" -v t="$SINGLES_TAIL" -v r="$SINGLES_RATE" -v m="$SINGLES" \
    'BEGIN { n = int((d - l - t) * r); if (n > m) n = m; if (n < 0) n = 0; print n }')
(( BUSY_COUNT > 0 )) || die "the campaign alone took ${C_SECONDS}s: no room for singles from ${SINGLES_LEAD}s to ${SINGLES_TAIL}s before its end (raise N or SINGLES_RATE)"
log "phases 3 and 4: $BUSY_COUNT singles each, from ${SINGLES_LEAD}s after the campaign's enqueue"

# ------------------------------------------------------------------ phases 3, 4: singles behind a campaign
busy_phase() {  # busy_phase NUMBER NAME APP USERS: sets BUSY_* arrays' entries by NAME
    local number=$1 name=$2 app=$3 users=$4 t_enq
    settle
    log "phase $number ($name): campaign to $N devices, $BUSY_COUNT singles of app $app while it runs"
    phase_begin "$name"
    t_phase=$(now)
    base=$(max_job)
    enqueue_campaign
    t_enq=$(now)
    start_singles "$name" "$app" "$users" "$BUSY_COUNT" "$(awk -v t="$t_enq" -v l="$SINGLES_LEAD" 'BEGIN { printf "%.3f", t + l }')"
    wait_jobs "$base" "$CAMPAIGN_ID"
    finish_singles "$name"
    wait_jobs "$base" 0   # singles enqueued after the campaign's end
    phase_end "$name"
    campaign_figures "$CAMPAIGN_ID"
    singles_figures "$name" "$base" "$CAMPAIGN_ID"
    (( E_ACCEPTED == C_TOTAL + S_TOTAL )) || ALL_ACCEPTED_MATCH=0
    RATIO=$(awk -v a="$C_RATE" -v b="${ALONE[0]}" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
    PHASE_LINES+=("$number $name: campaign job $CAMPAIGN_ID $C_STATUS, $C_COUNTS; ${C_SECONDS}s to the last delivery: $C_RATE deliveries/s ($RATIO of alone); $S_TOTAL singles of app $app (psql printed $ENQUEUED job ids), $S_OK completed with their one delivery sent, $S_COUNTED enqueued while the campaign ran (counted), $S_EXCLUDED not (excluded); counted: latency min $PMIN, p50 $P50, p99 $P99, max $PMAX ms, $S_AFTER_CAMPAIGN delivered after the campaign's last delivery; rows updated after their insert $S_UPDATED; emulator accepted $E_ACCEPTED; $CPU_TEXT; $WAL_TEXT; $(elapsed "$t_phase") s")
    log "phase $number: singles p50 $P50 ms, p99 $P99 ms, max $PMAX ms ($S_COUNTED counted, $S_EXCLUDED excluded, $S_OK/$S_TOTAL sent); campaign $C_RATE deliveries/s ($RATIO of alone)"
    # name -> figures
    printf -v "BUSY_${name//-/_}" '%s|' "$S_TOTAL" "$S_OK" "$S_COUNTED" "$S_EXCLUDED" "$S_COUNTED_OK" "$P50" "$P99" "$PMAX" \
        "$C_RATE" "$RATIO" "$C_SENT" "$C_TOTAL" "$C_STATUS" "$C_SECONDS"
}
busy_phase 3 same-app bench "$N"
busy_phase 4 other-app bench2 "$N2"

# Priorities as stored, when the column exists: what the defaults gave each kind of job.
PRIORITY_STORED=
if [[ -n $PRIORITY_COLUMN ]]; then
    PRIORITY_STORED=$(sql "SELECT string_agg(kind || ': ' || p, '; ' ORDER BY kind) FROM (
        SELECT kind, string_agg(coalesce(priority::text, 'NULL') || ' x' || n, ', ' ORDER BY priority::text) p FROM (
            SELECT CASE WHEN user_ids IS NULL THEN 'campaigns' ELSE 'singles' END kind, priority, count(*) n
              FROM push_jobs WHERE id > $FIRST_JOB GROUP BY 1, 2) a GROUP BY kind) b")
fi

# ------------------------------------------------------------------ stop the worker
term_worker 30   # sets WORKER_RC and T_STOP

# ------------------------------------------------------------------ summary
check() { [[ $1 != none ]] && awk -v a="$1" -v b="$3" "BEGIN { exit !(a $2 b) }" && echo PASS || echo FAIL; }
OVERALL=PASS
ROWS=()
row() {  # row METRIC VALUE TARGET RESULT (empty: shown, not judged)
    ROWS+=("$(printf '%-40s %16s %10s  %s' "$1" "$2" "$3" "$4")")
    [[ $4 != FAIL ]] || OVERALL=FAIL
}
all_sent() { [[ $1 == "$2" && $1 -gt 0 ]] && echo PASS || echo FAIL; }

row "idle: singles sent / enqueued" "${IDLE[1]} / ${IDLE[0]}" "all" "$(all_sent "${IDLE[1]}" "${IDLE[0]}")"
row "idle: singles p50 (ms)" "${IDLE[2]}" "< $TARGET_IDLE_P50_MS" "$(check "${IDLE[2]}" "<" "$TARGET_IDLE_P50_MS")"
row "idle: singles p99 (ms)" "${IDLE[3]}" "< $TARGET_IDLE_P99_MS" "$(check "${IDLE[3]}" "<" "$TARGET_IDLE_P99_MS")"
row "idle: singles max (ms)" "${IDLE[4]}" "" ""
row "alone: campaign deliveries/s" "${ALONE[0]}" "" ""
row "alone: campaign sent / N" "${ALONE[2]} / $N" "all" "$([[ ${ALONE[2]} == "$N" && ${ALONE[3]} == "$N" && ${ALONE[4]} == completed ]] && echo PASS || echo FAIL)"
for name in same-app other-app; do
    var=BUSY_${name//-/_}
    IFS='|' read -r b_total b_ok b_counted b_excluded b_counted_ok b_p50 b_p99 b_max c_rate ratio c_sent c_total c_status c_secs <<<"${!var}"
    row "$name: singles sent / enqueued" "$b_ok / $b_total" "all" "$(all_sent "$b_ok" "$b_total")"
    row "$name: singles counted (excluded)" "$b_counted ($b_excluded)" "" ""
    row "$name: singles p50 (ms)" "$b_p50" "" ""
    row "$name: singles p99 (ms)" "$b_p99" "< $TARGET_BUSY_P99_MS" "$(check "$b_p99" "<" "$TARGET_BUSY_P99_MS")"
    row "$name: singles max (ms)" "$b_max" "" ""
    row "$name: campaign deliveries/s" "$c_rate" "" ""
    row "$name: campaign rate / alone" "$ratio" ">= $TARGET_RATE_RATIO" "$(check "$ratio" ">=" "$TARGET_RATE_RATIO")"
    row "$name: campaign sent / N" "$c_sent / $N" "all" "$([[ $c_sent == "$N" && $c_total == "$N" && $c_status == completed ]] && echo PASS || echo FAIL)"
done
row "other programs' CPU, worst phase (%)" "$OTHER_MAX_PCT" "" ""
row "WAL flush stalls >= ${WALSTALL_MIN_MS} ms, all phases" "$WAL_STALLS" "" ""
row "push-worker exit after SIGTERM (rc, s)" "$WORKER_RC, $T_STOP" "" ""
row "OVERALL" "" "" "$OVERALL"

{
    echo "Latency benchmark: single notifications, idle and behind a campaign, through one push-worker to fcm-emulator  ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
    echo "tree at $(git rev-parse --short HEAD 2>/dev/null || echo none)$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty)'); binaries $BIN (push-worker built $(date -u -r "$BIN/push-worker" +%Y-%m-%dT%H:%M:%SZ)), schema at migration $SCHEMA_VERSION; $(nproc) cores"
    echo "N=$N devices of bench, N2=$N2 of bench2, HISTORY=$HISTORY, WORKER_CONCURRENCY=$CONCURRENCY"
    echo "singles: one psql session fed by singles.py, one push_enqueue per transaction, ${SINGLES_RATE}/s; idle $SINGLES; behind a campaign $BUSY_COUNT from ${SINGLES_LEAD}s after its enqueue (seed $SEED)"
    echo "latency = push_deliveries.updated_at - push_jobs.created_at (database clock); percentiles: percentile_cont over the counted singles"
    echo "priority: $PRIORITY_TEXT${PRIORITY_STORED:+; stored: $PRIORITY_STORED}"
    echo
    printf '%-40s %16s %10s  %s\n' "metric" "value" "target" "result"
    printf '%s\n' "${ROWS[@]}"
    echo
    printf '%s\n' "${PHASE_LINES[@]}"
    echo "$WARMUP_TEXT"
    echo "seeding/reset ${T_SEED}s, warm-up ${T_WARMUP}s; per-single figures: $CSV"
    (( OTHER_MAX_PCT <= OTHER_NOTE_PCT )) || echo "NOTE: programs other than the worker, the emulator and PostgreSQL used up to $OTHER_MAX_PCT % of the machine's CPU in a phase (a build or tests?): the figures are not those of a quiet machine."
    [[ $ALL_ACCEPTED_MATCH == 1 ]] || echo "NOTE: in some phase the emulator accepted a different number of sends than there are deliveries (duplicates, or sends of another phase): see the phase lines."
} | tee "$OUT/latency-summary.txt"

[[ $OVERALL == PASS ]]
