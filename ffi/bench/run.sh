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
# machine lands on every mode rather than on one. A cross-core ping-pong
# (ffi/bench/pingpong.c, about 10 ms) is taken before, between and after
# the two runs of each pair: a pair whose probes differ by more than 1.5x
# ran in two machine states (a shared VM's vCPUs move between near and
# distant cores), and the median of the other pairs is printed beside the
# median of all.
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
gcc -std=c11 -O2 -Wall -Wextra -Wpedantic -Werror ffi/bench/pingpong.c -o target/release/pingpong -pthread
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((i = 0; i < pairs; i++)); do
  for mode in "${modes[@]}"; do
    p0=$(target/release/pingpong)
    if ((i % 2 == 0)); then
      c=$(target/release/bench_ffi "$n" "$mode")
      p1=$(target/release/pingpong)
      r=$(target/release/examples/rust_baseline "$n" "$mode")
    else
      r=$(target/release/examples/rust_baseline "$n" "$mode")
      p1=$(target/release/pingpong)
      c=$(target/release/bench_ffi "$n" "$mode")
    fi
    p2=$(target/release/pingpong)
    echo "$i ping $mode $p0 $p1 $p2" >> "$results"
    echo "$i c $c" >> "$results"
    echo "$i rust $r" >> "$results"
  done
done
python3 - "$results" "${modes[@]}" <<'PY'
import statistics, sys
# A pair ran in one machine state if its probes agree within this factor.
SPREAD = 1.5
lines = [line.split() for line in open(sys.argv[1])]
rows = [l for l in lines if l[1] != "ping"]
pings = {(int(l[0]), l[2]): [float(x) for x in l[3:]] for l in lines if l[1] == "ping"}
modes = sys.argv[2:]
print(f"{'mode':<16} {'C msgs/s':>12} {'Rust msgs/s':>12} {'C/Rust median':>14} {'worst pair':>10} "
      f"{'best pair':>10}  pairs in one machine state")
for mode in modes:
    c = {int(i): float(v) for i, lang, m, v in rows if lang == "c" and m == mode}
    r = {int(i): float(v) for i, lang, m, v in rows if lang == "rust" and m == mode}
    ratios = [c[i] / r[i] for i in sorted(c)]
    steady = [c[i] / r[i] for i in sorted(c) if max(pings[(i, mode)]) <= SPREAD * min(pings[(i, mode)])]
    one_state = f"{statistics.median(steady):.2f} ({len(steady)} of {len(ratios)})" if steady else f"none of {len(ratios)}"
    print(f"{mode:<16} {statistics.median(c.values()):>12.0f} {statistics.median(r.values()):>12.0f} "
          f"{statistics.median(ratios):>14.2f} {min(ratios):>10.2f} {max(ratios):>10.2f}  {one_state}")
every = [p for ps in pings.values() for p in ps]
print(f"cross-core ping-pong around the pairs: {min(every):.0f}-{max(every):.0f} ns per round trip")
PY
