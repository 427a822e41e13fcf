# WAL flush stalls: moments when every busy PostgreSQL backend waits for the WAL to reach the
# disk (sourced, not run). A commit waits for its WAL fsync; when the disk takes hundreds of
# milliseconds for one, every commit waits behind it, and with a closed-loop client every
# connection stops at once. Sampling pg_stat_activity every 20 ms finds them.

WALSTALL_INTERVAL_MS=20
WALSTALL_MIN_MS=100   # shorter waits are ordinary commit latency under load

# walstall_watch URL FILE: samples in the background until walstall_stop; one line per sample:
# epoch milliseconds, busy client backends, those of them waiting on the WAL's write or fsync.
walstall_watch() {
    psql "$1" -X -q -tA -F' ' >"$2" 2>/dev/null <<SQL &
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
       count(*) FILTER (WHERE state = 'active'),
       count(*) FILTER (WHERE state = 'active' AND wait_event_type IN ('IO', 'LWLock') AND wait_event LIKE 'WAL%')
  FROM pg_stat_activity
 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
\\watch $(awk -v ms="$WALSTALL_INTERVAL_MS" 'BEGIN { print ms / 1000 }')
SQL
    WALSTALL_PID=$!
}
walstall_stop() {
    if [[ -n ${WALSTALL_PID:-} ]]; then
        kill "$WALSTALL_PID" 2>/dev/null
        wait "$WALSTALL_PID" 2>/dev/null || true   # psql ends by the signal
    fi
    WALSTALL_PID=
}

# walstall_summary FILE: "COUNT LONGEST_MS" of the stalls of at least WALSTALL_MIN_MS. A stall
# runs from its first sample to the first sample after it (within one interval of the truth).
walstall_summary() {
    awk -v min="$WALSTALL_MIN_MS" '
        NF == 3 { stalled = ($2 > 0 && $3 == $2)
                  if (stalled && !open) { start = $1; open = 1 }
                  else if (!stalled && open) { d = $1 - start; if (d >= min) { n++; if (d > max) max = d } open = 0 } }
        END { printf "%d %d\n", n, max }' "$1"
}
