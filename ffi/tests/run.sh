#!/usr/bin/env bash
# Builds librill and runs the C and C++ test programs against it: plain,
# under AddressSanitizer + UBSan, and under valgrind memcheck. Then checks
# the shipped build (SONAME, exports, stripping), runs a program built
# against rill 0.1's frozen header on it, installs it into a scratch prefix
# and builds the C and C++ examples with pkg-config, shared and static.
# Called by .ci/test; run it alone with `bash ffi/tests/run.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=$root/target/ctest
mkdir -p "$out"

step() { printf '\n==> %s\n' "$*"; }

step "building librill (release, with the test-panic feature the C tests use)"
cargo build --release -p rill-ffi --features test-panic
# The tests link this build, under its SONAME, from a directory of its own:
# the shipped build below (without rill_test_panic) replaces target/release's.
lib=$out/testlib
rm -rf "$lib" && mkdir -p "$lib"
cp "$root/target/release/librill.so" "$lib/librill.so.0"
ln -s librill.so.0 "$lib/librill.so"

CWARN=(-Wall -Wextra -Wpedantic -Werror)
build() { # name compiler std source [extra flags...]
  local name=$1 cc=$2 std=$3 src=$4; shift 4
  "$cc" "-std=$std" "${CWARN[@]}" -g -O1 -I"$root/include" -I"$root/bindings/cpp" "$src" -o "$out/$name" \
    -L"$lib" -Wl,-rpath,"$lib" -lrill -pthread "$@"
}

step "C tests (C99, warnings as errors)"
build test_c gcc c99 ffi/tests/c/test_rill.c
"$out/test_c"
# A broker on a data directory, restarted: the program runs itself as the
# writer and then as the reader, two processes.
build test_persist gcc c99 ffi/tests/c/test_persist.c
"$out/test_persist"
# Wildcard subscriptions churned from several threads (issue 40, items 7, 10).
build test_robust_wildcards gcc c99 ffi/tests/c/test_robust_wildcards.c
"$out/test_robust_wildcards"

step "C++ tests (C++17, warnings as errors)"
build test_cpp g++ c++17 bindings/cpp/tests/test_rill.cpp
"$out/test_cpp"

step "C and C++ tests under AddressSanitizer + UBSan"
SAN=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
build test_c_asan gcc c99 ffi/tests/c/test_rill.c "${SAN[@]}"
build test_cpp_asan g++ c++17 bindings/cpp/tests/test_rill.cpp "${SAN[@]}"
build test_persist_asan gcc c99 ffi/tests/c/test_persist.c "${SAN[@]}"
build test_robust_wildcards_asan gcc c99 ffi/tests/c/test_robust_wildcards.c "${SAN[@]}"
for t in test_c_asan test_cpp_asan test_persist_asan test_robust_wildcards_asan; do
  # Prove the sanitizer is really linked in before trusting a clean run.
  # (ldd's output is captured first: `ldd | grep -q` under pipefail fails at
  # random when grep exits early and ldd dies of SIGPIPE.)
  libs=$(ldd "$out/$t")
  grep -q libasan <<<"$libs" || { echo "$t is not linked against libasan" >&2; exit 1; }
  grep -q libubsan <<<"$libs" || { echo "$t is not linked against libubsan" >&2; exit 1; }
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$out/$t"
done

step "C and C++ tests under valgrind memcheck"
for t in test_c test_cpp test_persist test_robust_wildcards; do
  # --trace-children: test_persist's writer and reader are its children.
  valgrind --quiet --error-exitcode=1 --fair-sched=yes --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    --trace-children=yes "$out/$t"
done

step "rill.hpp refuses C++ older than 17, by name"
if g++ -std=c++14 -fsyntax-only -I"$root/include" -x c++ - <<<'#include "bindings/cpp/rill.hpp"' \
  -I"$root" 2>"$out/cxx14.err"; then
  echo "rill.hpp compiled as C++14" >&2; exit 1
fi
grep -q 'rill.hpp needs C++17' "$out/cxx14.err" || { cat "$out/cxx14.err" >&2; exit 1; }

step "the shipped library: SONAME, only rill_* exported, no test hooks"
cargo build --release -p rill-ffi
prefix=$out/prefix
rm -rf "$prefix"
bash ffi/install.sh --prefix "$prefix" --no-build
version=$(sed -n '/^version = "/{s/^version = "\(.*\)"/\1/p;q}' Cargo.toml)
so=$prefix/lib/librill.so.$version
[ "$(readlink "$prefix/lib/librill.so")" = librill.so.0 ] || { echo "librill.so does not link to librill.so.0" >&2; exit 1; }
[ "$(readlink "$prefix/lib/librill.so.0")" = "librill.so.$version" ] || { echo "librill.so.0 does not link to librill.so.$version" >&2; exit 1; }
dynamic=$(readelf -d "$so")
grep -q 'Library soname: \[librill.so.0\]' <<<"$dynamic" || { echo "no SONAME librill.so.0" >&2; exit 1; }
exports=$(nm -D --defined-only "$so" | awk '{print $3}')
others=$(grep -v '^rill_' <<<"$exports" || true)
[ -z "$others" ] || { echo "librill.so exports non-rill symbols: $others" >&2; exit 1; }
! grep -qx rill_test_panic <<<"$exports" || { echo "the shipped library exports rill_test_panic" >&2; exit 1; }
! grep -q '^rill_nats_' <<<"$exports" || { echo "the default library exports the NATS bridge" >&2; exit 1; }
sections=$(readelf -S "$so")
! grep -q '\.debug_info' <<<"$sections" || { echo "the installed librill.so has debug info" >&2; exit 1; }
! grep -q ' \.symtab' <<<"$sections" || { echo "the installed librill.so is not stripped" >&2; exit 1; }
# .cargo/config.toml asks for TLS descriptors on x86-64 (an epoch pin per
# publish finds its thread's handle through one); a build that lost the flag
# reaches thread-locals through __tls_get_addr and has none.
tlsdesc=$(readelf -rW "$so" | grep -c R_X86_64_TLSDESC || true)
[ "$(uname -m)" != x86_64 ] || ((tlsdesc > 0)) || { echo "librill.so uses no TLS descriptors" >&2; exit 1; }
echo "SONAME librill.so.0, $(wc -l <<<"$exports") rill_* exports, stripped ($(stat -c %s "$so") bytes), $tlsdesc TLS descriptors"

step "a program built against rill 0.1's frozen header runs on this library"
build_old() { # name [extra flags...]
  local name=$1; shift
  gcc -std=c99 "${CWARN[@]}" -g -O1 -I"$root/ffi/tests/abi" ffi/tests/abi/v0_1_program.c -o "$out/$name" \
    -L"$prefix/lib" -Wl,-rpath,"$prefix/lib" -lrill -pthread "$@"
}
build_old v0_1_program
"$out/v0_1_program"
valgrind --quiet --error-exitcode=1 --fair-sched=yes --leak-check=full --show-leak-kinds=definite \
  --errors-for-leak-kinds=definite "$out/v0_1_program"
build_old v0_1_program_asan "${SAN[@]}"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$out/v0_1_program_asan"

step "install into a scratch prefix and build the examples with pkg-config"
PKG_CONFIG_PATH=$prefix/lib/pkgconfig
export PKG_CONFIG_PATH
# shellcheck disable=SC2046
cc bindings/c/examples/app.c $(pkg-config --cflags --libs rill) -Wl,-rpath,"$prefix/lib" -o "$out/app"
"$out/app"
# shellcheck disable=SC2046
c++ -std=c++17 "${CWARN[@]}" bindings/cpp/examples/app.cpp $(pkg-config --cflags --libs rill) \
  -Wl,-rpath,"$prefix/lib" -o "$out/app_cpp"
"$out/app_cpp"

# Statically: rill-static.pc names librill.a, and `--static` on rill.pc
# gives what `cc -static` needs. Neither program may need librill.so.
# shellcheck disable=SC2046
cc bindings/c/examples/app.c $(pkg-config --cflags --static --libs rill-static) -o "$out/app_static"
# shellcheck disable=SC2046
cc -static bindings/c/examples/app.c $(pkg-config --cflags --static --libs rill) -o "$out/app_all_static" \
  2>"$out/static.log" || { cat "$out/static.log" >&2; exit 1; }
for t in app_static app_all_static; do
  needed=$(readelf -d "$out/$t" 2>/dev/null || true)
  ! grep -q 'librill' <<<"$needed" || { echo "$t needs librill.so" >&2; exit 1; }
  "$out/$t"
done

step "C ABI tests passed"
