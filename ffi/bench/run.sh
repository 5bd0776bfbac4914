#!/usr/bin/env bash
# What the C ABI costs: runs ffi/bench/bench_ffi.c (C, through librill) and
# ffi/examples/rust_baseline.rs (the same work through the Rust API) in
# alternation, PAIRS times each, and prints the median and worst C/Rust ratio
# per mode.   usage: bash ffi/bench/run.sh [messages] [pairs]
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-2000000}
pairs=${2:-5}
cargo build --release -p rill-ffi --lib --example rust_baseline
# The SONAME is librill.so.0: the name the linked program asks for at run time.
ln -sf librill.so target/release/librill.so.0
gcc -std=c99 -O2 -Wall -Wextra -Wpedantic -Werror -Iinclude ffi/bench/bench_ffi.c -o target/release/bench_ffi \
  -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lrill -pthread
results=$(mktemp)
for ((i = 0; i < pairs; i++)); do
  target/release/bench_ffi "$n" | sed 's/^/c /' >> "$results"
  target/release/examples/rust_baseline "$n" | sed 's/^/rust /' >> "$results"
done
python3 - "$results" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
modes = ["publish", "publisher", "batch64"]
print(f"{'mode':<10} {'C msgs/s':>12} {'Rust msgs/s':>12} {'C/Rust median':>14} {'worst pair':>10}")
for mode in modes:
    c = [float(v) for lang, m, v in rows if lang == "c" and m == mode]
    r = [float(v) for lang, m, v in rows if lang == "rust" and m == mode]
    ratios = [a / b for a, b in zip(c, r)]
    print(f"{mode:<10} {statistics.median(c):>12.0f} {statistics.median(r):>12.0f} "
          f"{statistics.median(ratios):>14.2f} {min(ratios):>10.2f}")
PY
rm -f "$results"
