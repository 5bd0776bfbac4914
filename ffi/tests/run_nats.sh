#!/usr/bin/env bash
# The NATS bridge's C face: builds librill with the nats feature, runs the C
# test (plain and under AddressSanitizer + UBSan) beside a nats-server that
# bindings/python/tests/nats_helper.py starts (JetStream, free loopback port,
# temporary store) and stops, and checks rill_nats.h compiles as C++. Needs
# nats-server on PATH. Called by .ci/test; run it alone with
# `bash ffi/tests/run_nats.sh`.
#
# The library is the debug build: it reuses the async-nats and Tokio that
# `cargo test --workspace` compiled, where a release build would compile them
# all again (minutes on CI's two cores) to test behaviour, not speed.
# RILL_NATS_INSTALL_CHECK=1 also builds the release library with
# `ffi/install.sh --with-nats` into a scratch prefix and checks what it
# installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=$root/target/ctest
mkdir -p "$out"

step() { printf '\n==> %s\n' "$*"; }

step "building librill with the nats feature (debug)"
cargo build -p rill-ffi --features nats
lib=$out/natslib
rm -rf "$lib" && mkdir -p "$lib"
cp "$root/target/debug/librill.so" "$lib/librill.so.0"
ln -s librill.so.0 "$lib/librill.so"

CWARN=(-Wall -Wextra -Wpedantic -Werror)
SAN=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
build() { # name [extra flags...]
  local name=$1; shift
  gcc -std=c99 "${CWARN[@]}" -g -O1 -I"$root/include" ffi/tests/c/test_nats.c -o "$out/$name" \
    -L"$lib" -Wl,-rpath,"$lib" -lrill -pthread "$@"
}
helper=(python3 bindings/python/tests/nats_helper.py --stream 'RILL:rill.>' --)

step "C test of the bridge against nats-server"
build test_nats
"${helper[@]}" "$out/test_nats"

step "the same under AddressSanitizer + UBSan"
build test_nats_asan "${SAN[@]}"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "${helper[@]}" "$out/test_nats_asan"

step "the examples gallery's bridge in C (plain and under ASan+UBSan) and C++, against nats-server"
# bindings/c/examples/nats_bridge.c and bindings/cpp/examples/nats_bridge.cpp:
# a stream ORDERS on shop.>, as their header comments ask.
example() { # name compiler std source [extra flags...]
  local name=$1 cc=$2 std=$3 src=$4; shift 4
  "$cc" "-std=$std" "${CWARN[@]}" -g -O1 -I"$root/include" -I"$root/bindings/cpp" "$src" -o "$out/$name" \
    -L"$lib" -Wl,-rpath,"$lib" -lrill -pthread "$@"
}
example example_nats_bridge gcc c99 bindings/c/examples/nats_bridge.c
example example_nats_bridge_asan gcc c99 bindings/c/examples/nats_bridge.c "${SAN[@]}"
example example_nats_bridge_cpp g++ c++17 bindings/cpp/examples/nats_bridge.cpp
orders=(python3 bindings/python/tests/nats_helper.py --stream 'ORDERS:shop.>' --)
"${orders[@]}" "$out/example_nats_bridge"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "${orders[@]}" "$out/example_nats_bridge_asan"
"${orders[@]}" "$out/example_nats_bridge_cpp"

step "rill_nats.h compiles as C++17"
g++ -std=c++17 "${CWARN[@]}" -fsyntax-only -I"$root/include" -x c++ - <<<'#include "rill_nats.h"'

exports=$(nm -D --defined-only "$lib/librill.so" | awk '{print $3}')
others=$(grep -v '^rill_' <<<"$exports" || true)
[ -z "$others" ] || { echo "librill with nats exports non-rill symbols: $others" >&2; exit 1; }

if [ "${RILL_NATS_INSTALL_CHECK:-0}" = 1 ]; then
  step "install --with-nats (release): the header, and the bridge's symbols in librill"
  prefix=$out/nats-prefix
  rm -rf "$prefix"
  bash ffi/install.sh --with-nats --prefix "$prefix" >/dev/null
  [ -f "$prefix/include/rill_nats.h" ] || { echo "rill_nats.h was not installed" >&2; exit 1; }
  exports=$(nm -D --defined-only "$prefix/lib/librill.so" | awk '{print $3}')
  grep -qx rill_nats_bridge_new <<<"$exports" || { echo "librill --with-nats lacks rill_nats_bridge_new" >&2; exit 1; }
  # Leave target/release/librill.so the lean default build again.
  cargo build --release -p rill-ffi
fi
# target/debug/librill.so is left with the bridge (a superset of the default
# library); nothing after this in .ci/test loads it.

step "NATS bridge C tests passed"
