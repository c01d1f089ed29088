#!/usr/bin/env bash
# Builds and runs one fuzz target on stable Rust, with or without cargo-fuzz installed: the same
# SanitizerCoverage instrumentation `cargo fuzz build -s none` asks rustc for (all stable -C flags;
# no sanitizer, so no nightly), libFuzzer from the libfuzzer-sys crate. The checked-in seeds in
# seeds/TARGET start the working corpus in corpus/TARGET; crashes land in artifacts/TARGET.
# Usage: fuzz/run.sh webhook|form [SECONDS] [extra libFuzzer flags...]
set -euo pipefail
cd "$(dirname "$0")"
target=${1:?usage: fuzz/run.sh webhook|form [SECONDS]}
seconds=${2:-60}
shift $(( $# < 2 ? $# : 2 ))
triple=$(rustc -vV | sed -n 's/^host: //p')
# --target keeps the flags off build scripts and proc macros (as cargo-fuzz does).
RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks" \
  cargo build --release --target "$triple" --bin "$target"
mkdir -p "corpus/$target" "artifacts/$target"
cp -n "seeds/$target"/* "corpus/$target/" 2>/dev/null || true
exec "target/$triple/release/$target" -max_total_time="$seconds" -artifact_prefix="artifacts/$target/" \
  -print_final_stats=1 "$@" "corpus/$target"
