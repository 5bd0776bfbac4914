#!/usr/bin/env bash
# What the C ABI costs: runs ffi/bench/bench_ffi.c (C, through librill) and
# ffi/examples/rust_baseline.rs (the same work through the Rust API), PAIRS
# pairs per mode, and prints the median and worst C/Rust ratio per mode.
#   usage: bash ffi/bench/run.sh [messages] [pairs] [mode...]
#
# Each run is its own process doing one mode (a fresh broker and heap, no
# earlier mode warming or fragmenting it); the order within a pair alternates
# (C then Rust, then Rust then C, ...), so neither side always runs first;
# the modes are interleaved pair by pair, so a burst of load on a shared
# machine lands on every mode rather than on one.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-2000000}
pairs=${2:-5}
shift $(($# < 2 ? $# : 2))
modes=("$@")
if ((${#modes[@]} == 0)); then
  modes=(publish publisher batch64 publish/nosub publisher/nosub batch64/nosub)
fi
cargo build --release -p rill-ffi --lib --example rust_baseline
# The SONAME is librill.so.0: the name the linked program asks for at run time.
ln -sf librill.so target/release/librill.so.0
# -O3, as the Rust side's release profile (opt-level 3) is: at -O2 gcc 12
# leaves the C handler's byte-by-byte sum unvectorised, which LLVM
# vectorises in the Rust one, and the "with a subscriber" modes then
# compared the compilers (callgrind, publisher mode: 934 instructions a
# message at -O2, 721 at -O3, the Rust program 821).
gcc -std=c99 -O3 -Wall -Wextra -Wpedantic -Werror -Iinclude ffi/bench/bench_ffi.c -o target/release/bench_ffi \
  -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lrill -pthread
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((i = 0; i < pairs; i++)); do
  for mode in "${modes[@]}"; do
    if ((i % 2 == 0)); then
      c=$(target/release/bench_ffi "$n" "$mode")
      r=$(target/release/examples/rust_baseline "$n" "$mode")
    else
      r=$(target/release/examples/rust_baseline "$n" "$mode")
      c=$(target/release/bench_ffi "$n" "$mode")
    fi
    echo "$i c $c" >> "$results"
    echo "$i rust $r" >> "$results"
  done
done
python3 - "$results" "${modes[@]}" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
modes = sys.argv[2:]
print(f"{'mode':<16} {'C msgs/s':>12} {'Rust msgs/s':>12} {'C/Rust median':>14} {'worst pair':>10} {'best pair':>10}")
for mode in modes:
    c = {int(i): float(v) for i, lang, m, v in rows if lang == "c" and m == mode}
    r = {int(i): float(v) for i, lang, m, v in rows if lang == "rust" and m == mode}
    ratios = [c[i] / r[i] for i in sorted(c)]
    print(f"{mode:<16} {statistics.median(c.values()):>12.0f} {statistics.median(r.values()):>12.0f} "
          f"{statistics.median(ratios):>14.2f} {min(ratios):>10.2f} {max(ratios):>10.2f}")
PY
