#!/usr/bin/env bash
# Instructions per payment of the HTTP section's process (the worker engine, the Stripe adapter and
# the in-process simulator; not Postgres), counted by callgrind: repeatable to about a percent
# whatever else the machine runs, unlike a wall-clock rate. `payonce-bench --only http` (no ceiling
# run) drains SMALL and then LARGE operations under `valgrind --tool=callgrind`; the difference of
# the two totals over the difference of the drains is the cost of one more payment, without the
# start-up, the bulk load and the checks that both runs pay once. Also prints the functions with
# the most inclusive instructions in the larger run (callgrind_annotate), to find what to make
# cheaper. Under callgrind the process runs about 50 times slower, so the drain is CPU-bound: the
# claims and writes group as the 1 ms ceiling's do, whatever the latency.
#
#   bench/scripts/http-instructions.sh                      # 512 and 1,536 operations, 200 ms, 512 in flight
#   SMALL=256 LARGE=768 bench/scripts/http-instructions.sh
#
# Environment: PAYONCE_BENCH (default target/release/payonce-bench), SMALL, LARGE, LATENCY_MS (200),
# CONCURRENCY (512), BATCH (128), OUT (default /tmp/payonce-http-instructions; callgrind files kept
# there), TOP (functions listed, default 40). PAYONCE_BENCH_DATABASE_URL as for the bench.
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${PAYONCE_BENCH:-target/release/payonce-bench}
small=${SMALL:-512} large=${LARGE:-1536}
latency=${LATENCY_MS:-200} concurrency=${CONCURRENCY:-512} batch=${BATCH:-128}
out=${OUT:-/tmp/payonce-http-instructions} top=${TOP:-40}
mkdir -p "$out"
total() {
  # The `summary:` line of a callgrind output file: every instruction of every thread.
  sed -n 's/^summary: *//p' "$1" | awk '{print $1}'
}
for n in "$small" "$large"; do
  valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.$n" \
    "$bench" --only http --http-ceiling false --http-operations "$n" --http-latency-ms "$latency" \
    --http-concurrency "$concurrency" --http-batch "$batch" >"$out/table.$n" 2>"$out/log.$n"
done
a=$(total "$out/callgrind.$small") b=$(total "$out/callgrind.$large")
echo "instructions: $a for $small operations, $b for $large"
awk -v a="$a" -v b="$b" -v s="$small" -v l="$large" \
  'BEGIN { printf "instructions per payment (worker + adapter + simulator, one process): %.0f\n", (b - a) / (l - s) }'
callgrind_annotate --inclusive=yes "$out/callgrind.$large" 2>/dev/null | sed -n "1,$((top + 25))p" >"$out/inclusive.txt"
callgrind_annotate "$out/callgrind.$large" 2>/dev/null | sed -n "1,$((top + 25))p" >"$out/self.txt"
echo "top functions: $out/inclusive.txt (inclusive), $out/self.txt (self)"
