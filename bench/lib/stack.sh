# The benchmark stack's pieces (sourced, not run): release binaries, service accounts, the apps
# that use them, fcm-emulator and push-worker on loopback, and stopping what a script started.
# Written after bench/fanout/run.sh's own (inline) steps, so that later benchmarks share them
# instead of copying them; bench/latency/run.sh uses them.
#
# The caller defines log MESSAGE and die MESSAGE (print, and exit 1), and runs from the
# repository root.

# need_cmd COMMAND DEBIAN_PACKAGE: installs the package with apt-get when the command is missing
# (as root; otherwise dies saying what to install).
need_cmd() {
    command -v "$1" >/dev/null && return 0
    [[ $(id -u) -eq 0 ]] || die "install Debian package $2 for $1 (needs root)"
    log "installing $2"
    DEBIAN_FRONTEND=noninteractive apt-get install -y "$2" >&2 \
        || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y "$2" >&2; }
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
# on 127.0.0.1:PORT and waits for its settings line; sets EMULATOR_PID, FCM_BASE_URL,
# GOOGLE_TOKEN_URL and PUSH_CA_FILE.
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
    log "emulator: $settings"
}

# emulator_stats: GET /emulator/stats?devices=false (JSON), a few tries.
emulator_stats() {
    local i
    for i in 1 2 3 4 5; do
        curl -fsS --cacert "$PUSH_CA_FILE" "$FCM_BASE_URL/emulator/stats?devices=false" && return 0
        sleep 1
    done
    return 1
}
stat_field() { python3 -c 'import json,sys; print(json.load(sys.stdin).get(sys.argv[1], 0))' "$1"; }   # stat_field NAME <JSON

# start_worker BIN CONCURRENCY METRICS_PORT LOG_FILE: push-worker against DATABASE_URL and the
# emulator (FCM_BASE_URL, GOOGLE_TOKEN_URL, PUSH_CA_FILE), LOG_LEVEL warning; waits for /readyz.
# Sets WORKER_PID.
start_worker() {
    local bin=$1 concurrency=$2 metrics_port=$3 logf=$4 i
    DATABASE_URL=$DATABASE_URL FCM_BASE_URL=$FCM_BASE_URL GOOGLE_TOKEN_URL=$GOOGLE_TOKEN_URL \
        PUSH_CA_FILE=$PUSH_CA_FILE WORKER_CONCURRENCY=$concurrency LOG_LEVEL=warning METRICS_PORT=$metrics_port \
        "$bin/push-worker" >"$logf" 2>&1 &
    WORKER_PID=$!
    for i in $(seq 1 300); do   # up to 30 s
        curl -fs -o /dev/null --max-time 1 "http://127.0.0.1:$metrics_port/readyz" && break
        kill -0 "$WORKER_PID" 2>/dev/null || { tail -n 30 "$logf" >&2; die "push-worker exited during startup"; }
        [[ $i == 300 ]] && { tail -n 30 "$logf" >&2; die "push-worker not ready after 30 s"; }
        sleep 0.1
    done
}
