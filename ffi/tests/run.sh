#!/usr/bin/env bash
# Builds librill and runs the C and C++ test programs against it: plain,
# under AddressSanitizer + UBSan, and under valgrind memcheck. Also installs
# the library into a scratch prefix and builds the C example with pkg-config.
# Called by .ci/test; run it alone with `bash ffi/tests/run.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=$root/target/ctest
mkdir -p "$out"

step() { printf '\n==> %s\n' "$*"; }

step "building librill (release)"
cargo build --release -p rill-ffi
lib=$root/target/release

CWARN=(-Wall -Wextra -Wpedantic -Werror)
build() { # name compiler std source [extra flags...]
  local name=$1 cc=$2 std=$3 src=$4; shift 4
  "$cc" "-std=$std" "${CWARN[@]}" -g -O1 -I"$root/include" -I"$root/bindings/cpp" "$src" -o "$out/$name" \
    -L"$lib" -Wl,-rpath,"$lib" -lrill -pthread "$@"
}

step "C tests (C99, warnings as errors)"
build test_c gcc c99 ffi/tests/c/test_rill.c
"$out/test_c"

step "C++ tests (C++17, warnings as errors)"
build test_cpp g++ c++17 bindings/cpp/tests/test_rill.cpp
"$out/test_cpp"

step "C and C++ tests under AddressSanitizer + UBSan"
SAN=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
build test_c_asan gcc c99 ffi/tests/c/test_rill.c "${SAN[@]}"
build test_cpp_asan g++ c++17 bindings/cpp/tests/test_rill.cpp "${SAN[@]}"
for t in test_c_asan test_cpp_asan; do
  # Prove the sanitizer is really linked in before trusting a clean run.
  # (ldd's output is captured first: `ldd | grep -q` under pipefail fails at
  # random when grep exits early and ldd dies of SIGPIPE.)
  libs=$(ldd "$out/$t")
  grep -q libasan <<<"$libs" || { echo "$t is not linked against libasan" >&2; exit 1; }
  grep -q libubsan <<<"$libs" || { echo "$t is not linked against libubsan" >&2; exit 1; }
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$out/$t"
done

step "C and C++ tests under valgrind memcheck"
for t in test_c test_cpp; do
  valgrind --quiet --error-exitcode=1 --fair-sched=yes --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    "$out/$t"
done

step "install into a scratch prefix and build the example with pkg-config"
prefix=$out/prefix
rm -rf "$prefix"
bash ffi/install.sh --prefix "$prefix" --no-build
PKG_CONFIG_PATH=$prefix/lib/pkgconfig
export PKG_CONFIG_PATH
# shellcheck disable=SC2046
cc bindings/c/examples/app.c $(pkg-config --cflags --libs rill) -Wl,-rpath,"$prefix/lib" -o "$out/app"
"$out/app"
# The static library links too.
# shellcheck disable=SC2046
cc bindings/c/examples/app.c $(pkg-config --cflags rill) "$prefix/lib/librill.a" \
  $(pkg-config --variable=static_libs rill) -o "$out/app_static"
"$out/app_static"

step "C ABI tests passed"
