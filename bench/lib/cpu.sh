# CPU accounting shared by the benchmarks (sourced, not run). Linux /proc only.

cpu_secs() {  # cpu_secs PID: utime + stime of a process, in seconds
    awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$1/stat"
}
# Every local postgres process, with the backends the postmaster has reaped (cutime, cstime);
# processes come and go while cat reads.
pg_cpu_secs() {
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v hz="$(getconf CLK_TCK)" '
        { sub(/^[0-9]+ \(/, ""); if ($0 !~ /^postgres\) /) next; sub(/^[^)]*\) /, "")
          t += $12 + $13 + $14 + $15 } END { printf "%.1f", t / hz }'
}
machine_busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
busy_pct() {  # busy_pct "BUSY0 TOTAL0" "BUSY1 TOTAL1"
    awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
        t = y[2] - x[2]; printf "%.0f", (t > 0 ? 100 * (y[1] - x[1]) / t : 0) }'
}
busy_secs() {  # busy_secs "BUSY0 TOTAL0" "BUSY1 TOTAL1": CPU seconds of the whole machine
    awk -v a="$1" -v b="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN { split(a, x, " "); split(b, y, " ");
        printf "%.1f", (y[1] - x[1]) / hz }'
}
delta() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }   # delta BEFORE AFTER
# One cluster's postgres processes: the postmaster PID (with the backends it has reaped: cutime,
# cstime) and its live children. Other clusters on the machine (a test suite's) are left out.
pg_cluster_cpu_secs() {  # pg_cluster_cpu_secs POSTMASTER_PID
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v hz="$(getconf CLK_TCK)" -v pm="$1" '
        { pid = $1; sub(/^[0-9]+ \([^)]*\) /, "")
          if (pid == pm) t += $12 + $13 + $14 + $15; else if ($2 == pm) t += $12 + $13 }
        END { printf "%.1f", t / hz }'
}
