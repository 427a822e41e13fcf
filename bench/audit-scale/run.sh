#!/usr/bin/env bash
# Audit at scale (issue 28): the delivery audit over N generated delivery rows, timed through
# push-api as the product runs it, on today's unpartitioned push_deliveries (the baseline) and on
# the delivery log partitioned by day (migration 015), side by side in one run:
#
#   bench/audit-scale/run.sh                       # N=100000000, both schemas (hours to generate)
#   N=5000000 SKIP_BUILD=1 bench/audit-scale/run.sh
#
# Two databases in one PostgreSQL: `unpartitioned` (the migrations before
# 015_partitioned_delivery_log.sql) and `partitioned` (every migration in sql/), both applied
# with pushctl migrate --directory. The same rows are generated in both with generate_series
# (plan.sql, deliveries.sql): DAYS days of jobs (campaigns and notifications to one user) to
# DEVICES devices of two apps, a mix of outcomes. Then each query kind is sent SAMPLES times to
# each schema's push-api (GET /admin/deliveries with jobId, userId, appCode, status, since,
# cursor; the console's devices page), alternating between the two, timed with curl's
# time_total: p50, p99, max per kind and schema, PASS when p99 < 50 ms. Each kind's SQL (read
# from DeliveryLog.swift) is EXPLAINed on both databases: the partitioned one's plan says how
# many partitions were read. See README.md.
#
# Knobs (environment):
#   N=100000000         delivery rows (the issue's figure)       DAYS=30     days of history
#   DEVICES=1000000     devices (bench 70 %, bench2 30 %)        JOBS_PER_DAY=5000  jobs a day
#   SCHEMA=both         both, partitioned or unpartitioned
#   SAMPLES=100         timed requests per kind and schema       WARMUP=10   untimed ones first, other ids
#   PAGES=10            keyset pages followed per walk (the page kinds take SAMPLES pages in all)
#   REGENERATE=1        generate again even when a database holds these knobs' rows (default: reuse)
#   SKIP_BUILD=1        never build; SKIP_BUILD=0 always build; unset: build only missing binaries
#   BIN_DIR=dir         push-api and pushctl (default .build/release)
#   BASELINE_BIN_DIR=dir  the push-api for the unpartitioned schema (default BIN_DIR): a push-api
#                       whose query names job_created_at cannot read that schema
#   BASELINE_UPTO=014   the last migration of the unpartitioned schema (default: the one before
#                       *_partitioned_delivery_log.sql)
#   DATABASE_URL=...    a PostgreSQL to use (its databases `unpartitioned` and `partitioned` are
#                       dropped and made again) instead of a local one in bench/out/audit-scale-pg
#   PG_PORT=55434       port of the local PostgreSQL   API_PORT=18090 (and API_PORT+1)
#
# Outputs in bench/out/: audit-scale-summary.txt, audit-scale-explain-{unpartitioned,partitioned}.txt,
# audit-scale-generate-{unpartitioned,partitioned}.txt (per day), audit-scale-samples/ (every timing),
# audit-scale-api-{unpartitioned,partitioned}.log.
# Exit status: 0 when every kind's p99 on the partitioned schema (the issue's target) is within
# 50 ms, 1 otherwise (or on any error).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."   # repo root: paths below are relative to it
BENCH=bench/audit-scale
source bench/lib/stack.sh   # log, die, now, elapsed, need_cmd, build_release, local PostgreSQL, stop_pid, wait_http
source bench/lib/cpu.sh     # machine_busy, busy_pct, pg_cluster_cpu_secs, cpu_secs
OUT=bench/out
mkdir -p "$OUT"

DATABASE_URL_GIVEN=${DATABASE_URL:-}
N=${N:-100000000}
DAYS=${DAYS:-30}
DEVICES=${DEVICES:-1000000}
JOBS_PER_DAY=${JOBS_PER_DAY:-5000}
SCHEMA=${SCHEMA:-both}
SAMPLES=${SAMPLES:-100}
WARMUP=${WARMUP:-10}
PAGES=${PAGES:-10}
REGENERATE=${REGENERATE:-0}
PG_PORT=${PG_PORT:-55434}
API_PORT=${API_PORT:-18090}
BIN=${BIN_DIR:-.build/release}
BASELINE_BIN=${BASELINE_BIN_DIR:-$BIN}
TARGET_P99_MS=50
ADMIN_TOKEN=audit-scale-bench-admin-token-0123456789
JWT_SECRET=audit-scale-bench-jwt-secret-0123456789abcdef
DELIVERY_LOG=Sources/DeviceRegistry/Deliveries/DeliveryLog.swift

for v in N DAYS DEVICES JOBS_PER_DAY SAMPLES PAGES PG_PORT API_PORT; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP must be a number, got '$WARMUP'"
(( DEVICES >= 10 )) || die "DEVICES must be at least 10"
case $SCHEMA in
both) SCHEMAS=(unpartitioned partitioned) ;;
partitioned | unpartitioned) SCHEMAS=("$SCHEMA") ;;
*) die "SCHEMA must be both, partitioned or unpartitioned, got '$SCHEMA'" ;;
esac

# The unpartitioned schema: the migrations before the partitioned delivery log.
PARTITIONING=$(cd sql && ls -1 ./*_partitioned_delivery_log.sql 2>/dev/null | head -n1)
PARTITIONING=${PARTITIONING#./}
[[ -n $PARTITIONING ]] || die "no sql/*_partitioned_delivery_log.sql: nothing to compare against"
BASELINE_UPTO=${BASELINE_UPTO:-$(printf '%03d' $((10#${PARTITIONING%%_*} - 1)))}
[[ $BASELINE_UPTO =~ ^[0-9]{3}$ ]] || die "BASELINE_UPTO must be a migration number such as 014, got '$BASELINE_UPTO'"

# ------------------------------------------------------------------ cleanup
declare -A API_PID=() API_URL=()
STARTED_PG=0
cleanup() {
    local rc=$? s
    for s in "${!API_PID[@]}"; do stop_pid "${API_PID[$s]}" "push-api ($s)" 10; done
    stop_local_pg "$OUT/audit-scale-pg"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM   # route signals through the EXIT trap

# ------------------------------------------------------------------ tools, binaries, database
need_cmd psql postgresql-client
need_cmd curl curl
build_release "$BIN" push-api pushctl
[[ -x $BASELINE_BIN/push-api ]] || die "missing $BASELINE_BIN/push-api"
# A push-api whose delivery query names job_created_at answers every audit request on the
# unpartitioned schema with a 500 (column d.job_created_at does not exist).
if [[ $SCHEMA != partitioned ]] && grep -aq 'd.job_created_at' "$BASELINE_BIN/push-api"; then
    die "$BASELINE_BIN/push-api reads the partitioned schema's job_created_at and cannot serve the unpartitioned one: set BASELINE_BIN_DIR to a folder with a push-api built before it (e.g. a release build of the commit before $PARTITIONING), or SCHEMA=partitioned"
fi
start_local_pg "$OUT/audit-scale-pg" "$PG_PORT"
ADMIN_URL=$DATABASE_URL
# db_url NAME: DATABASE_URL with its database name replaced.
db_url() { sed -E "s|^(postgres(ql)?://[^/]*/)[^?]*|\1$1|" <<<"$ADMIN_URL"; }
# on NAME STATEMENT: stack.sh's sql against database NAME.
on() { DATABASE_URL=$(db_url "$1") sql "$2"; }

# What a push-api binary's delivery query does with a job filter: its SQL text is in the binary.
prunes_by_job() {
    if grep -aq 'd.job_created_at >= ' "$1/push-api"; then
        echo "yes (d.job_created_at within the job's day, bound as values: pruned before planning)"
    elif grep -aq 'job_created_at = (SELECT created_at FROM push_jobs WHERE id' "$1/push-api"; then
        echo "yes (d.job_created_at = the job's created_at, a subquery: pruned at execution)"
    else
        echo "no (job_id only)"
    fi
}

# ------------------------------------------------------------------ generation
# The migrations of a schema, in a folder of their own for pushctl migrate --directory.
migrations_dir() {  # migrations_dir SCHEMA: prints the folder
    local dir=$OUT/audit-scale-migrations-$1 f
    rm -rf "$dir"; mkdir -p "$dir"
    for f in sql/[0-9][0-9][0-9]_*.sql; do
        [[ $1 == partitioned ]] || [[ ${f#sql/} < ${BASELINE_UPTO}_~ ]] || continue
        cp "$f" "$dir/"
    done
    echo "$dir"
}

# generated SCHEMA: whether the database holds a complete generation with these knobs and these
# very migrations (pushctl records each file's SHA-256: an edited one means generating again).
generated() {
    local want have
    want="$N|$DAYS|$DEVICES|$JOBS_PER_DAY|true|$(cd "$(migrations_dir "$1")" && sha256sum -- *.sql | awk '{ sub(/\.sql$/, "", $2); printf "%s:%s ", $2, $1 }')"
    have=$(on "$1" "SELECT s.n || '|' || s.days || '|' || s.devices || '|' || s.jobs_per_day || '|' || s.complete || '|'
                        || (SELECT string_agg(version || ':' || checksum, ' ' ORDER BY version) || ' ' FROM schema_migrations)
                      FROM bench.settings s" 2>/dev/null) || return 1
    [[ $have == "$want" ]]
}

# The bulk load drops push_deliveries' keys, foreign keys and indexes, and makes them again from
# their own definitions afterwards: one sorted build each instead of 100 million random inserts.
# Checks and NOT NULLs stay. For a partitioned table the definitions are the parent's (ON ONLY
# dropped, so each partition gets its own).
save_and_drop_keys() {  # save_and_drop_keys SCHEMA: prints the statements that make them again
    local db=$1
    on "$db" "SELECT 'ALTER TABLE push_deliveries ADD CONSTRAINT ' || quote_ident(conname) || ' ' || pg_get_constraintdef(oid) || ';'
                FROM pg_constraint WHERE conrelid = 'push_deliveries'::regclass AND contype IN ('p', 'u', 'f')
               ORDER BY CASE contype WHEN 'p' THEN 0 WHEN 'u' THEN 1 ELSE 2 END, conname"
    on "$db" "SELECT replace(pg_get_indexdef(i.indexrelid), ' ON ONLY ', ' ON ') || ';'
                FROM pg_index i WHERE i.indrelid = 'push_deliveries'::regclass
                 AND NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid)
               ORDER BY i.indexrelid"
    PGOPTIONS="-c client_min_messages=warning" psql "$(db_url "$db")" -X -q -v ON_ERROR_STOP=1 -tA >/dev/null <<'EOF'
SELECT format('ALTER TABLE push_deliveries DROP CONSTRAINT %I', conname)
  FROM pg_constraint WHERE conrelid = 'push_deliveries'::regclass AND contype IN ('f', 'u', 'p')
 ORDER BY CASE contype WHEN 'f' THEN 0 WHEN 'u' THEN 1 ELSE 2 END \gexec
SELECT format('DROP INDEX %I', c.relname) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = 'push_deliveries'::regclass \gexec
EOF
}

declare -A GEN_S=() GEN_ROWS=()
generate() {  # generate SCHEMA
    local db=$1 dir t0 t1 day days_list keys jc_col= jc_val= d_rows d_t0 total=0
    dir=$(migrations_dir "$db")
    log "$db: creating the database, migrating ($(ls "$dir" | head -n1) .. $(ls "$dir" | tail -n1))"
    sql "DROP DATABASE IF EXISTS $db WITH (FORCE)"
    sql "CREATE DATABASE $db"
    DATABASE_URL=$(db_url "$db") "$BIN/pushctl" migrate --directory "$dir" >&2
    t0=$(now)
    log "$db: planning $DEVICES devices and $((DAYS * JOBS_PER_DAY)) jobs"
    PGOPTIONS="-c client_min_messages=warning" psql "$(db_url "$db")" -X -q -v ON_ERROR_STOP=1 \
        -v n="$N" -v days="$DAYS" -v devices="$DEVICES" -v jobs_per_day="$JOBS_PER_DAY" -f "$BENCH/plan.sql" >/dev/null
    days_list=$(on "$db" "SELECT DISTINCT utc_day FROM bench.jobs ORDER BY 1")
    if [[ $db == partitioned ]]; then
        jc_col=", job_created_at, app_id"; jc_val=", r.job_created_at, r.app_id"
        # Each day's partition before its rows (the migration made today's and the next week's).
        on "$db" "SELECT count(*) FILTER (WHERE push_create_delivery_partition(utc_day)) FROM (SELECT DISTINCT utc_day FROM bench.jobs) d" >/dev/null
    fi
    keys=$(save_and_drop_keys "$db")
    T_PLAN=$(elapsed "$t0")
    : >"$OUT/audit-scale-generate-$db.txt"
    t1=$(now)
    for day in $days_list; do
        d_t0=$(now)
        PGOPTIONS="-c client_min_messages=warning" psql "$(db_url "$db")" -X -q -v ON_ERROR_STOP=1 \
            -v day="$day" -v jc_col="$jc_col" -v jc_val="$jc_val" -f "$BENCH/deliveries.sql" >/dev/null
        d_rows=$(on "$db" "SELECT coalesce(sum(size), 0) FROM bench.jobs WHERE utc_day = '$day'")
        total=$((total + d_rows))
        echo "$day $d_rows rows $(elapsed "$d_t0") s" >>"$OUT/audit-scale-generate-$db.txt"
        log "$db: $day: $d_rows rows in $(elapsed "$d_t0") s ($total of ~$N, $(elapsed "$t1") s)"
    done
    T_INSERT=$(elapsed "$t1")
    t1=$(now)
    log "$db: keys and indexes"
    PGOPTIONS="-c client_min_messages=warning -c maintenance_work_mem=1GB" \
        psql "$(db_url "$db")" -X -q -v ON_ERROR_STOP=1 -c "$keys" >/dev/null
    on "$db" "SELECT setval(pg_get_serial_sequence('push_deliveries', 'id'), (SELECT max(id) FROM push_deliveries))" >/dev/null
    T_KEYS=$(elapsed "$t1")
    t1=$(now)
    log "$db: VACUUM ANALYZE"
    on "$db" "VACUUM (ANALYZE) push_deliveries"
    on "$db" "VACUUM (ANALYZE) push_jobs"
    on "$db" "VACUUM (ANALYZE) push_devices"
    on "$db" "ANALYZE apps"
    T_VACUUM=$(elapsed "$t1")
    on "$db" "UPDATE bench.settings SET complete = true"
    GEN_S[$db]=$(elapsed "$t0")
    GEN_ROWS[$db]=$total
    echo "plan ${T_PLAN} s, insert ${T_INSERT} s, keys and indexes ${T_KEYS} s, vacuum analyze ${T_VACUUM} s, total ${GEN_S[$db]} s" \
        >>"$OUT/audit-scale-generate-$db.txt"
    log "$db: generated $total rows in ${GEN_S[$db]} s (plan $T_PLAN, insert $T_INSERT, keys $T_KEYS, vacuum $T_VACUUM)"
}

# Room for the rows: ~260 bytes a row unpartitioned, ~415 partitioned (tables and indexes, measured
# at 10 million with migration 016's indexes), with 10 % and the WAL's 4 GB to spare, where a local cluster keeps its files
# (a database made again frees its old files first).
if [[ -z $DATABASE_URL_GIVEN ]]; then
    need_gb=0
    free_gb=$(df -P -B1G "$OUT/audit-scale-pg" | awk 'NR == 2 { print $4 }')
    for s in "${SCHEMAS[@]}"; do
        [[ $REGENERATE != 1 ]] && generated "$s" && continue
        need_gb=$(awk -v a="$need_gb" -v n="$N" -v b="$([[ $s == partitioned ]] && echo 415 || echo 260)" 'BEGIN { printf "%.0f", a + n * b * 1.1 / 1e9 }')
        free_gb=$((free_gb + $(sql "SELECT (coalesce(sum(pg_database_size(datname)), 0) / 1e9)::bigint FROM pg_database WHERE datname = '$s'")))
    done
    (( need_gb == 0 || need_gb + 4 <= free_gb )) \
        || die "generating N=$N needs about $((need_gb + 4)) GB under $OUT/audit-scale-pg, and $free_gb GB are free (SCHEMA=partitioned or unpartitioned halves it)"
fi
for s in "${SCHEMAS[@]}"; do
    if [[ $REGENERATE != 1 ]] && generated "$s"; then
        log "$s: reusing the generated rows (REGENERATE=1 to make them again)"
    else
        generate "$s"
    fi
done
sql "CHECKPOINT" >/dev/null 2>&1 || true

# The same rows in both: a fingerprint of each.
fingerprint() { on "$1" "SELECT count(*) || ' rows, ids ' || sum(id) || ', devices ' || sum(device_id) || ', '
                             || string_agg(DISTINCT status, '/') FROM push_deliveries"; }
declare -A PRINT=()
for s in "${SCHEMAS[@]}"; do PRINT[$s]=$(fingerprint "$s"); log "$s: ${PRINT[$s]}"; done
if [[ ${#SCHEMAS[@]} == 2 && ${PRINT[unpartitioned]} != "${PRINT[partitioned]}" ]]; then
    die "the two databases hold different rows (${PRINT[unpartitioned]} / ${PRINT[partitioned]}): REGENERATE=1"
fi
S0=${SCHEMAS[0]}
ROWS=$(on "$S0" "SELECT count(*) FROM push_deliveries")
MAX_ID=$(on "$S0" "SELECT max(id) FROM push_deliveries")
ENDS_AT=$(on "$S0" "SELECT to_char(ends_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM bench.settings")

# ------------------------------------------------------------------ push-api
declare -A API_BIN=()
i=0
for s in "${SCHEMAS[@]}"; do
    API_BIN[$s]=$([[ $s == unpartitioned ]] && echo "$BASELINE_BIN" || echo "$BIN")
    port=$((API_PORT + i)); i=$((i + 1))
    API_URL[$s]=http://127.0.0.1:$port
    curl -s -o /dev/null --max-time 1 "${API_URL[$s]}/healthz" && die "something already listens on ${API_URL[$s]}; set API_PORT"
    log "starting push-api ($s) on ${API_URL[$s]} from ${API_BIN[$s]} (log: $OUT/audit-scale-api-$s.log)"
    DATABASE_URL=$(db_url "$s") PUSH_ADMIN_TOKEN=$ADMIN_TOKEN JWT_SECRET=$JWT_SECRET API_PORT=$port LOG_LEVEL=warning \
        "${API_BIN[$s]}/push-api" >"$OUT/audit-scale-api-$s.log" 2>&1 &
    API_PID[$s]=$!
    wait_http "${API_URL[$s]}/readyz" "${API_PID[$s]}" "push-api ($s)" "$OUT/audit-scale-api-$s.log"
done

# The console's session for the devices page: its sign-in form, then the admin token.
console_sign_in() {  # console_sign_in SCHEMA
    local jar=$OUT/audit-scale-cookies-$1.txt form code
    rm -f "$jar"
    form=$(curl -fsS -c "$jar" "${API_URL[$1]}/console/sign-in") || die "GET /console/sign-in ($1) failed"
    form=$(sed -n 's/.*name="csrf" value="\([^"]*\)".*/\1/p' <<<"$form" | head -n1)
    [[ -n $form ]] || die "no csrf field in the console's sign-in form ($1)"
    code=$(curl -sS -b "$jar" -c "$jar" -o /dev/null -w '%{http_code}' --data-urlencode "csrf=$form" \
        --data-urlencode "token=$ADMIN_TOKEN" "${API_URL[$1]}/console/sign-in")
    [[ $code == 303 || $code == 302 ]] || die "console sign-in ($1) answered $code"
}
for s in "${SCHEMAS[@]}"; do console_sign_in "$s"; done

# ------------------------------------------------------------------ samples
# Ids and times to ask for, the same for both schemas, hashed from the plan: WARMUP + SAMPLES of
# each (repeating when there are fewer).
NEED=$((WARMUP + SAMPLES))
WALKS=$(( (SAMPLES + PAGES - 1) / PAGES ))
NEED_WALKS=$((WARMUP > 0 ? WALKS + 1 : WALKS))
pick() {  # pick QUERY: one value a line, NEED of them, cycling
    local -a v
    mapfile -t v < <(on "$S0" "$1")
    (( ${#v[@]} > 0 )) || die "no sample values from: $1"
    for ((k = 0; k < NEED; k++)); do echo "${v[k % ${#v[@]}]}"; done
}
mapfile -t CAMPAIGN < <(pick "SELECT id FROM bench.jobs WHERE kind = 'campaign' ORDER BY hashint8(id) LIMIT $NEED")
mapfile -t SINGLE < <(pick "SELECT id FROM bench.jobs WHERE kind = 'single' ORDER BY hashint8(id) LIMIT $NEED")
# Users of app bench (each also has devices in bench2 when its number is low enough).
mapfile -t USER_A < <(pick "SELECT 1 + abs(hashint8extended(g, 21)) % (4 * (count_a / 5)) FROM bench.settings, generate_series(1, $NEED) g")
mapfile -t CURSOR < <(pick "SELECT 1 + abs(hashint8extended(g, 22)) % $MAX_ID FROM generate_series(1, $NEED) g")
# Since: from a minute to DAYS days before the rows' end.
mapfile -t SINCE < <(pick "SELECT to_char((ends_at - (1 + abs(hashint8extended(g, 23)) % (days * 1440)) * interval '1 minute') AT TIME ZONE 'UTC',
                                         'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM bench.settings, generate_series(1, $NEED) g")
DAY_BEFORE_END=$(on "$S0" "SELECT to_char((ends_at - interval '1 day') AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM bench.settings")

# Each kind: its request for sample k, as the API's query string (or a console path), and the
# parameters of DeliveryLog's query it runs: job user app status since device cursor limit (SQL
# literals). The page kinds (walk) follow nextCursor PAGES times; their first page is not counted.
KINDS=(job-campaign job-campaign-pages job-campaign-failed job-single user user-app user-since app-bench2
       status-failed status-skipped status-pending failed-since all-pages device-console)
declare -A DESCRIBE=(
    [job-campaign]="jobId=<a campaign>: its first page"
    [job-campaign-pages]="jobId=<a campaign>, keyset pages 2..$((PAGES + 1)) (cursor)"
    [job-campaign-failed]="jobId=<a campaign>&status=failed"
    [job-single]="jobId=<a notification to one user>"
    [user]="userId=<a user> (both apps)"
    [user-app]="userId=<a user>&appCode=bench"
    [user-since]="userId=<a user>&since=<a day before the end>"
    [app-bench2]="appCode=bench2&cursor=<a random id>"
    [status-failed]="status=failed&cursor=<a random id>"
    [status-skipped]="status=skipped&cursor=<a random id>"
    [status-pending]="status=pending (none are)"
    [failed-since]="status=failed&since=<1 min .. DAYS days before the end>"
    [all-pages]="no filter, keyset pages from a random id, $PAGES pages (cursor)"
    [device-console]="console /console/devices?app=bench&user=<a user>: their devices, 5 deliveries each by device"
)
request() {  # request KIND K: sets PATH_Q (to GET) and ARGS (the SQL parameters)
    local k=$2
    case $1 in
    job-campaign | job-campaign-pages)
        PATH_Q="/admin/deliveries?jobId=${CAMPAIGN[k]}"; ARGS="${CAMPAIGN[k]}, NULL, NULL, NULL, NULL, NULL, NULL, 101" ;;
    job-campaign-failed)
        PATH_Q="/admin/deliveries?jobId=${CAMPAIGN[k]}&status=failed"; ARGS="${CAMPAIGN[k]}, NULL, NULL, 'failed', NULL, NULL, NULL, 101" ;;
    job-single) PATH_Q="/admin/deliveries?jobId=${SINGLE[k]}"; ARGS="${SINGLE[k]}, NULL, NULL, NULL, NULL, NULL, NULL, 101" ;;
    user) PATH_Q="/admin/deliveries?userId=${USER_A[k]}"; ARGS="NULL, ${USER_A[k]}, NULL, NULL, NULL, NULL, NULL, 101" ;;
    user-app) PATH_Q="/admin/deliveries?userId=${USER_A[k]}&appCode=bench"; ARGS="NULL, ${USER_A[k]}, 'bench', NULL, NULL, NULL, NULL, 101" ;;
    user-since)
        PATH_Q="/admin/deliveries?userId=${USER_A[k]}&since=$DAY_BEFORE_END"
        ARGS="NULL, ${USER_A[k]}, NULL, NULL, '$DAY_BEFORE_END', NULL, NULL, 101" ;;
    app-bench2) PATH_Q="/admin/deliveries?appCode=bench2&cursor=${CURSOR[k]}"; ARGS="NULL, NULL, 'bench2', NULL, NULL, NULL, ${CURSOR[k]}, 101" ;;
    status-failed) PATH_Q="/admin/deliveries?status=failed&cursor=${CURSOR[k]}"; ARGS="NULL, NULL, NULL, 'failed', NULL, NULL, ${CURSOR[k]}, 101" ;;
    status-skipped) PATH_Q="/admin/deliveries?status=skipped&cursor=${CURSOR[k]}"; ARGS="NULL, NULL, NULL, 'skipped', NULL, NULL, ${CURSOR[k]}, 101" ;;
    status-pending) PATH_Q="/admin/deliveries?status=pending"; ARGS="NULL, NULL, NULL, 'pending', NULL, NULL, NULL, 101" ;;
    failed-since)
        PATH_Q="/admin/deliveries?status=failed&since=${SINCE[k]}"; ARGS="NULL, NULL, NULL, 'failed', '${SINCE[k]}', NULL, NULL, 101" ;;
    all-pages) PATH_Q="/admin/deliveries?cursor=${CURSOR[k]}"; ARGS="NULL, NULL, NULL, NULL, NULL, NULL, ${CURSOR[k]}, 101" ;;
    device-console)
        PATH_Q="/console/devices?app=bench&user=${USER_A[k]}"
        # The page's delivery query for the user's first device (unpartitioned: a query a device;
        # partitioned: one query for the page's devices, here the first; 6 rows deep in both).
        ARGS="NULL, NULL, NULL, NULL, NULL, DEVICE, NULL, 6" ;;
    *) die "unknown kind $1" ;;
    esac
}
is_walk() { [[ $1 == job-campaign-pages || $1 == all-pages ]]; }

SAMPLE_DIR=$OUT/audit-scale-samples
rm -rf "$SAMPLE_DIR"; mkdir -p "$SAMPLE_DIR"
BODY=$OUT/audit-scale-body.txt
declare -A LAST_CURSOR=() ERRORS=()
# get SCHEMA PATH: one GET, its status and time in ms in GOT_CODE / GOT_MS, the body in $BODY.
get() {
    local out auth=(-H "authorization: Bearer $ADMIN_TOKEN")
    [[ $2 == /console/* ]] && auth=(-b "$OUT/audit-scale-cookies-$1.txt")
    out=$(curl -s -o "$BODY" -w '%{http_code} %{time_total}' --max-time 60 "${auth[@]}" "${API_URL[$1]}$2") || true
    GOT_CODE=${out% *}
    GOT_MS=$(awk -v t="${out#* }" 'BEGIN { printf "%.2f", t * 1000 }')
}
next_cursor() { sed -n 's/.*"nextCursor" *: *"\([0-9]*\)".*/\1/p' "$BODY"; }
record() {  # record SCHEMA KIND TIMED: the last get's time, when TIMED
    if [[ $GOT_CODE != 200 ]]; then
        ERRORS[$1/$2]=$(( ${ERRORS[$1/$2]:-0} + 1 ))
        [[ ${ERRORS[$1/$2]} == 1 ]] && log "$1 $2: HTTP $GOT_CODE for $PATH_Q: $(head -c 300 "$BODY")"
    fi
    [[ $3 == 1 ]] && echo "$GOT_MS $GOT_CODE" >>"$SAMPLE_DIR/$1-$2.txt"
    return 0
}
run_kind() {  # run_kind KIND: WARMUP untimed requests, then SAMPLES timed ones, alternating schemas
    local kind=$1 k s p timed cursor walks
    if is_walk "$kind"; then
        for ((k = 0; k < NEED_WALKS; k++)); do
            timed=$(( WARMUP > 0 && k == 0 ? 0 : 1 ))
            request "$kind" $((WARMUP > 0 ? (k == 0 ? 0 : WARMUP + k - 1) : k))
            for s in "${SCHEMAS[@]}"; do
                get "$s" "$PATH_Q"; record "$s" "$kind" 0   # the walk's first page: not counted
                local base=$PATH_Q
                for ((p = 1; p <= PAGES; p++)); do
                    cursor=$(next_cursor)
                    [[ -n $cursor ]] || break
                    PATH_Q="${base%%&cursor=*}"; PATH_Q="${PATH_Q%%\?cursor=*}"
                    PATH_Q="$PATH_Q$([[ $PATH_Q == *\?* ]] && echo '&' || echo '?')cursor=$cursor"
                    get "$s" "$PATH_Q"; record "$s" "$kind" "$timed"
                    [[ $timed == 1 && -z ${LAST_CURSOR[$kind]:-} && $s == "${SCHEMAS[0]}" && $p == "$PAGES" ]] && LAST_CURSOR[$kind]=$cursor
                done
                PATH_Q=$base
            done
        done
    else
        for ((k = 0; k < NEED; k++)); do
            timed=$((k >= WARMUP ? 1 : 0))
            request "$kind" "$k"
            for s in "${SCHEMAS[@]}"; do get "$s" "$PATH_Q"; record "$s" "$kind" "$timed"; done
        done
    fi
}
# The machine is shared: how busy it was while the requests ran, and how much of that was this run's
# PostgreSQL (a local cluster's) and push-apis.
PM_FILE=$OUT/audit-scale-pg/pgdata/postmaster.pid
bench_cpu() {
    local t=0 s
    [[ -z $DATABASE_URL_GIVEN && -r $PM_FILE ]] && t=$(pg_cluster_cpu_secs "$(head -n1 "$PM_FILE")")
    for s in "${SCHEMAS[@]}"; do t=$(awk -v a="$t" -v b="$(cpu_secs "${API_PID[$s]}")" 'BEGIN { printf "%.1f", a + b }'); done
    echo "$t"
}
M0=$(machine_busy); C0=$(bench_cpu)
T_QUERIES0=$(now)
for kind in "${KINDS[@]}"; do
    log "timing $kind: ${DESCRIBE[$kind]}"
    run_kind "$kind"
done
T_QUERIES=$(elapsed "$T_QUERIES0")
BUSY="machine $(busy_pct "$M0" "$(machine_busy)") % busy, $(busy_secs "$M0" "$(machine_busy)") CPU s, of which this run's PostgreSQL and push-api $(delta "$C0" "$(bench_cpu)") s"

# ------------------------------------------------------------------ EXPLAIN
# DeliveryLog.each's SQL as the working tree has it, with $1.. for its interpolations (as
# PostgresNIO binds them; each statement is planned with its values, as unnamed statements are).
# The unpartitioned schema gets the file as it was before the partitioning migration was
# committed (or HEAD's while it is not), the query a push-api for that schema runs.
query_of() {  # query_of < DeliveryLog.swift: prints the SQL with $1..$12 ($9, $10: the job's UTC day; $11: the first day changed since; $12: a day from now)
    # The multi-line string literal that starts with SELECT d.id, d.job_id (the one query there).
    awk 'in_q && /"""/ { in_q = 0; if (q ~ /^[[:space:]]*SELECT d\.id, d\.job_id/) { printf "%s", q; exit }; next }
         /^[[:space:]]*"""[[:space:]]*$/ { in_q = 1; q = ""; next }
         in_q { q = q $0 "\n" }' |
        sed -e 's/\\(filter\.jobID)/$1/g' -e 's/\\(filter\.userID)/$2/g' -e 's/\\(filter\.appCode)/$3/g' \
            -e 's/\\(filter\.status)/$4/g' -e 's/\\(filter\.since)/$5/g' -e 's/\\(filter\.deviceID)/$6/g' \
            -e 's/\\(cursor)/$7/g' -e 's/\\(limit)/$8/g' -e 's/\\(jobDay?\.lowerBound)/$9/g' -e 's/\\(jobDay?\.upperBound)/$10/g' \
            -e 's/\\(days\.job?\.lowerBound)/$9/g' -e 's/\\(days\.job?\.upperBound)/$10/g' -e 's/\\(days\.changedFrom)/$11/g' -e 's/\\(days\.before)/$12/g'
}
SQL_NEW=$(query_of <"$DELIVERY_LOG")
# The console's devices page reads each device's newest deliveries in one statement of its own
# (DeliveryLog.newest(ofDevices:each:)), here for one device ($6) and $8 rows.
SQL_DEVICES=$(awk 'in_q && /"""/ { in_q = 0; if (q ~ /unnest\(\\\(devices\)/) { printf "%s", q; exit }; next }
                   /^[[:space:]]*"""[[:space:]]*$/ { in_q = 1; q = ""; next }
                   in_q { q = q $0 "\n" }' <"$DELIVERY_LOG" |
    sed -e 's/\\(devices)::bigint\[\]/ARRAY[$6]::bigint[]/g' -e 's/\\(each)/$8/g' -e 's/\\(before)/$12/g')
added=$(git log --diff-filter=A --format=%H -- "Sources/DeviceRegistry/Migrations/$PARTITIONING" | tail -n1)   # sql/ is a link: git knows the file by its own path
old_rev=${added:+$added^}
SQL_OLD=$(git show "${old_rev:-HEAD}:$DELIVERY_LOG" | query_of)
for q in "$SQL_NEW" "$SQL_OLD" "$SQL_DEVICES"; do
    [[ -n $q && $q != *'\('* ]] || die "cannot read DeliveryLog.each's query (an interpolation this script does not know?): $q"
done
declare -A PARTS_READ=() EXEC_MS=()
explain_all() {  # explain_all SCHEMA SQL
    local s=$1 file=$OUT/audit-scale-explain-$1.txt kind plan total q
    total=$(on "$s" "SELECT count(*) FROM pg_inherits WHERE inhparent = 'push_deliveries'::regclass")
    : >"$file"
    for kind in "${KINDS[@]}"; do
        request "$kind" "$WARMUP"
        q=$2
        [[ $kind != device-console || $s != partitioned ]] || q=$SQL_DEVICES
        if is_walk "$kind" && [[ -n ${LAST_CURSOR[$kind]:-} ]]; then ARGS=$(sed -E "s/, [^,]+, 101$/, ${LAST_CURSOR[$kind]}, 101/" <<<"$ARGS"); fi
        [[ $kind != device-console ]] || ARGS=${ARGS/DEVICE/$(on "$s" "SELECT min(d.id) FROM push_devices d JOIN apps a ON a.id = d.app_id
                                                                       WHERE a.code = 'bench' AND d.user_id = ${USER_A[WARMUP]}")}
        # The job's day, which DeliveryLog looks up first and binds ($9, $10; unused by older SQL).
        local job=${ARGS%%,*} day="NULL, NULL"
        [[ $job == NULL ]] || day=$(on "$s" "SELECT quote_literal(d) || ', ' || quote_literal(d + interval '1 day')
                                               FROM (SELECT date_trunc('day', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS d
                                                       FROM push_jobs WHERE id = $job) x")
        # The first day changed since, which DeliveryLog looks up first and binds ($11).
        local since changed=NULL
        since=$(awk -F', ' '{ print $5 }' <<<"$ARGS")
        [[ $since == NULL || $s != partitioned ]] \
            || changed=$(on "$s" "SELECT coalesce(quote_literal(push_first_day_changed_since($since)), 'NULL')")
        plan=$(PGOPTIONS="-c client_min_messages=warning -c plan_cache_mode=force_custom_plan" \
            psql "$(db_url "$s")" -X -q -v ON_ERROR_STOP=1 -tA 2>&1 <<EOF
PREPARE audit(bigint, bigint, text, text, timestamptz, bigint, bigint, bigint, timestamptz, timestamptz, timestamptz, timestamptz) AS $q;
EXPLAIN (ANALYZE, BUFFERS) EXECUTE audit($ARGS, $day, $changed, now() + interval '1 day');
\\echo ===
EXPLAIN (ANALYZE, BUFFERS) EXECUTE audit($ARGS, $day, $changed, now() + interval '1 day');
EOF
        ) || plan="EXPLAIN failed: $plan"
        # The second run: a session's first statement also fills its catalog caches, which push-api's
        # pooled connections have done long before (it doubled the planning time).
        [[ $plan != *$'\n===\n'* ]] || plan=$(sed -n '/^===$/,$p' <<<"$plan" | tail -n +2)
        { echo "=== $kind: ${DESCRIBE[$kind]}"; echo "parameters: $ARGS"; echo "$plan"; echo; } >>"$file"
        EXEC_MS[$s/$kind]="$(sed -n 's/^Planning Time: \([0-9.]*\) ms/\1/p' <<<"$plan") + $(sed -n 's/^Execution Time: \([0-9.]*\) ms/\1/p' <<<"$plan")"
        if (( total > 0 )); then
            # Partitions in the plan, less those the executor pruned ("never executed"); the planner's
            # pruning leaves them out of the plan altogether.
            local in_plan never
            in_plan=$(grep -Ec ' on push_deliveries_([0-9]{8}|default) ' <<<"$plan" || true)
            never=$(grep -E ' on push_deliveries_([0-9]{8}|default) ' <<<"$plan" | grep -c 'never executed' || true)
            PARTS_READ[$kind]="$((in_plan - never)) of $total"
        fi
    done
}
for s in "${SCHEMAS[@]}"; do
    log "EXPLAIN ANALYZE of each kind's query on $s ($OUT/audit-scale-explain-$s.txt)"
    explain_all "$s" "$([[ $s == partitioned ]] && echo "$SQL_NEW" || echo "$SQL_OLD")"
done

# ------------------------------------------------------------------ summary
pct() {  # pct FILE: "p50 p99 max count" in ms (nearest rank)
    sort -g "$1" | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "- - - 0"; exit }
        i50 = int(NR * 0.50 + 0.999999); i99 = int(NR * 0.99 + 0.999999)
        printf "%.1f %.1f %.1f %d\n", v[i50], v[i99], v[NR], NR }'
}
# A table's or index's partitions (pg_partition_tree has none for a table that is not partitioned).
tree() { echo "(SELECT relid FROM pg_partition_tree($1) UNION SELECT $1::regclass)"; }
sizes() {  # sizes SCHEMA: heap and index sizes of push_deliveries (all partitions)
    on "$1" "SELECT pg_size_pretty(sum(pg_table_size(relid))) || ' table, ' || pg_size_pretty(sum(pg_indexes_size(relid))) || ' indexes ('
                    || round(sum(pg_total_relation_size(relid)) / greatest(1, $ROWS)::numeric) || ' bytes a row: '
                    || round(sum(pg_total_relation_size(relid)) * 1e8 / greatest(1, $ROWS)::numeric / 1e9) || ' GB at 100 million)'
               FROM $(tree "'push_deliveries'") t"
}
index_sizes() {  # index_sizes SCHEMA: each index of push_deliveries, all partitions together
    on "$1" "SELECT string_agg(c.relname || ' ' || pg_size_pretty(t.bytes), ', ' ORDER BY c.relname)
               FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
              CROSS JOIN LATERAL (SELECT sum(pg_relation_size(relid)) AS bytes FROM $(tree i.indexrelid) p) t
              WHERE i.indrelid = 'push_deliveries'::regclass"
}
OVERALL=PASS
{
    echo "Audit at scale: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD)$([[ -z $(git status --porcelain -- "$DELIVERY_LOG" sql/) ]] || echo ' + working tree (DeliveryLog.swift or sql/ changed)')"
    echo "rows: $ROWS deliveries over $DAYS days (ending $ENDS_AT), $DEVICES devices, $JOBS_PER_DAY jobs a day ($(on "$S0" "SELECT campaigns_per_day FROM bench.settings") campaigns); machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "schemas: unpartitioned = migrations up to $BASELINE_UPTO; partitioned = every migration in sql/ (to $(ls sql/ | grep -E '^[0-9]{3}_' | tail -n1))"
    for s in "${SCHEMAS[@]}"; do
        echo "push-api ($s): ${API_BIN[$s]}/push-api, built $(date -u -r "${API_BIN[$s]}/push-api" +%Y-%m-%dT%H:%MZ); its query filters a job by partition: $(prunes_by_job "${API_BIN[$s]}")"
    done
    for s in "${SCHEMAS[@]}"; do
        if [[ -n ${GEN_S[$s]:-} ]]; then
            echo "generation ($s): ${GEN_S[$s]} s for ${GEN_ROWS[$s]} rows, $(awk -v t="${GEN_S[$s]}" -v n="${GEN_ROWS[$s]}" 'BEGIN { printf "%.1f", t * 1e6 / n }') s per million ($(tail -n1 "$OUT/audit-scale-generate-$s.txt")); 100 million: ~$(awk -v t="${GEN_S[$s]}" -v n="${GEN_ROWS[$s]}" 'BEGIN { printf "%.1f", t * 1e8 / n / 3600 }') h at this rate"
        else
            echo "generation ($s): reused from an earlier run"
        fi
        echo "size ($s): $(sizes "$s"); $(index_sizes "$s")"
    done
    echo "timing: $SAMPLES requests per kind and schema after $WARMUP untimed (the page kinds: walks of $PAGES pages), schemas alternating; ${T_QUERIES} s; $BUSY"
    echo
    printf '%-20s' kind
    for s in "${SCHEMAS[@]}"; do printf ' | %-36s' "$s p50 / p99 / max ms (n, errors)"; done
    printf ' | %-10s' "parts read"
    for s in "${SCHEMAS[@]}"; do printf ' | %-17s' "${s:0:1} plan + exec ms"; done
    printf ' | %s\n' "p99 < ${TARGET_P99_MS} ms"
    for kind in "${KINDS[@]}"; do
        printf '%-20s' "$kind"
        verdicts=
        for s in "${SCHEMAS[@]}"; do
            f=$SAMPLE_DIR/$s-$kind.txt
            touch "$f"
            read -r p50 p99 max n < <(pct "$f")
            errs=${ERRORS[$s/$kind]:-0}
            printf ' | %-36s' "$p50 / $p99 / $max ($n, $errs)"
            v=$([[ $n -gt 0 && $errs == 0 ]] && awk -v a="$p99" -v b="$TARGET_P99_MS" 'BEGIN { exit !(a < b) }' && echo PASS || echo FAIL)
            verdicts+="${verdicts:+ }$s $v"
            [[ $s == partitioned && $v == FAIL ]] && OVERALL=FAIL
            [[ $SCHEMA == unpartitioned && $v == FAIL ]] && OVERALL=FAIL
        done
        printf ' | %-10s' "${PARTS_READ[$kind]:--}"
        for s in "${SCHEMAS[@]}"; do printf ' | %-17s' "${EXEC_MS[$s/$kind]:--}"; done
        printf ' | %s\n' "$verdicts"
    done
    echo
    for kind in "${KINDS[@]}"; do echo "  $kind: ${DESCRIBE[$kind]}"; done
    echo "  parts read: partitions of push_deliveries the partitioned schema's EXPLAIN ANALYZE read (in the plan, not pruned"
    echo "  at execution); plan + exec ms: EXPLAIN ANALYZE's planning and execution time of the kind's SQL on each schema"
    echo "  (u: unpartitioned, p: partitioned; one sample, the query alone, without HTTP; every request is planned afresh)."
    echo "  token: no audit surface filters by device token (the admin API, the console and pushctl take job, user,"
    echo "  app, status, since); a token's deliveries are its device's, on the console's devices page."
    echo
    echo "OVERALL: $OVERALL (p99 < ${TARGET_P99_MS} ms for every kind on $([[ $SCHEMA == unpartitioned ]] && echo 'the unpartitioned' || echo 'the partitioned') schema)"
} >"$OUT/audit-scale-summary.txt"   # not a pipe into tee: OVERALL is set in here
cat "$OUT/audit-scale-summary.txt"
[[ $OVERALL == PASS ]]
