#!/usr/bin/env bash
# Wall time and peak RSS of HolisticTraceAnalysis against `canifinetune trace`
# on one generated Kineto trace. Not run by CI (it takes minutes and measures
# the machine as much as the code).
#
# Usage: trace/hta/bench.sh [MB]      (default 100)
#
# The trace is trace/bench_test.go's generator (TestWriteSynthetic): Kineto-
# shaped events at the density of the HTA sample traces, a ProfilerStep every
# 2,000 GPU ops. HTA runs what TraceAnalysis users run: load the trace, then
# its temporal, kernel and idle time breakdowns; canifinetune runs `trace
# --json`, which computes those figures and the rest of its report. Each is
# measured by /usr/bin/time -v: elapsed wall clock, CPU (user + system; the
# fairer figure on a shared machine) and maximum resident set size.
#
# Environment: HTA_PYTHON (default: the environment scripts/python-env.sh
# creates for trace/hta/requirements.lock), BENCH_DIR (default: a temporary
# directory, removed afterwards).
set -euo pipefail
cd "$(dirname "$0")/../.."
mb="${1:-100}"
py="${HTA_PYTHON:-$(scripts/python-env.sh trace/hta/requirements.lock)/bin/python}"
dir="${BENCH_DIR:-}"
if [ -z "$dir" ]; then
	dir=$(mktemp -d)
	trap 'rm -rf "$dir"' EXIT
fi
tr="$dir/synthetic-${mb}mb.json"
bin="$dir/canifinetune"

go build -o "$bin" ./cmd/canifinetune
if [ ! -f "$tr" ]; then
	go test ./trace -run '^TestWriteSynthetic$' -count=1 -synthetic "$tr" -synthetic-mb "$mb" >/dev/null
fi
bytes=$(stat -c %s "$tr")

measure() { # label, command...
	local label=$1 log="$dir/time.log"
	shift
	/usr/bin/time -v "$@" >/dev/null 2>"$log" || { tail -20 "$log"; echo "$label failed" >&2; exit 1; }
	local wall rss cpu secs
	wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$log")
	rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$log")
	cpu=$(sed -n 's/.*\(User\|System\) time (seconds): //p' "$log" | awk '{s+=$1} END {print s}')
	secs=$(echo "$wall" | awk -F: '{s=0; for (i=1;i<=NF;i++) s=s*60+$i; print s}')
	awk -v l="$label" -v w="$secs" -v c="$cpu" -v r="$rss" -v b="$bytes" 'BEGIN {
		printf "%-13s wall %7.2f s  cpu %7.2f s  peak RSS %7.1f MiB  %6.1f MB/s of wall, %6.1f MB/s of cpu\n", l, w, c, r/1024, b/1e6/w, b/1e6/c }'
}

echo "trace: $bytes bytes of JSON ($(grep -c '"cat": "kernel"' "$tr") kernels)"
measure canifinetune "$bin" trace --json "$tr"
measure HTA "$py" -c '
import sys, warnings
warnings.simplefilter("ignore", FutureWarning)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_files={0: sys.argv[1]}, trace_dir="/")
ta.get_temporal_breakdown(visualize=False)
ta.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
ta.get_idle_time_breakdown(visualize=False)
' "$tr"
