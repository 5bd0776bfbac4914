#!/usr/bin/env bash
# Builds librill and runs the C and C++ test programs against it: plain,
# under AddressSanitizer + UBSan, and under valgrind memcheck; and the
# examples gallery's C and C++ programs (plain, the C ones under ASan+UBSan
# too; the bridge's are in run_nats.sh). Then checks
# the shipped build (SONAME, exports, stripping), runs a program built
# against rill 0.1's frozen header on it, installs it into a scratch prefix,
# builds the C and C++ examples with pkg-config and CMake, shared and static,
# links two copies of librill.a into one program, and checks the generated
# API reference.
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
# Issue 41's compacted topics: the background compactor, keyless publishes
# refused, seeks and commits across the gaps compaction leaves.
build test_robust_compact gcc c99 ffi/tests/c/test_robust_compact.c
"$out/test_robust_compact"
# Issue 40's regressions, a program per area (groups, the C face, holes
# left by killed publishers, deletes and ack timeouts, damage in sealed
# segments, wildcard churn), issue 45's consumer notify fd, issue 39's
# brokers in forked processes sharing a data directory and issue 42's
# subscription priorities: each is built and run here, under ASan+UBSan
# and under valgrind below.
robust=(test_robust_groups test_robust_ffi test_robust_holes test_robust_ops test_robust_sealed
  test_robust_wildcards test_robust_notify test_robust_procs test_robust_priority)
# Issue 39's topics across processes (created, joined by a wildcard, deleted).
robust+=(test_robust_procs_topics)
# Issue 41's dedupe window (ids, duplicates, racing threads, a restart).
robust+=(test_robust_dedupe)
# Issue 42's schemas (JSON Schema, validators, reject and dead-letter, a restart).
robust+=(test_robust_schema)
# Issue 41's compaction on a data directory (rebuilt segment files, a restart).
robust+=(test_durable_compact)
# Issue 39's named subscriptions across processes (Busy while held, a kill -9 loop).
robust+=(test_robust_named)
# Issue 39's consumer groups across processes (four worker processes split the partitions).
robust+=(test_robust_procs_groups)
# Issue 39's shared subscriptions across processes (three member processes split the partitions).
robust+=(test_robust_procs_shared)
# Issue 39's operator calls across processes (who holds a durable name, a group's members and their partitions).
robust+=(test_procs_holders)
# Issue 39's Block subscribers across processes (one holds the publisher back, one is killed).
robust+=(test_robust_procs_block)
# Issue 39's subscriptions of every process with their pids and counters.
robust+=(test_procs_subs)
for t in "${robust[@]}"; do
  build "$t" gcc c99 "ffi/tests/c/$t.c"
  "$out/$t"
done
# rill.h used from C89, and RILL_VERSION_NUMBER against the library's version.
build test_robust_c89 gcc c89 ffi/tests/c/test_robust_c89.c -pedantic-errors
"$out/test_robust_c89"

step "C++ tests (C++17, warnings as errors)"
build test_cpp g++ c++17 bindings/cpp/tests/test_rill.cpp
"$out/test_cpp"

step "the examples gallery in C and C++ (each checks its own result)"
# bindings/c/examples/ and bindings/cpp/examples/, as README.md's "Examples"
# lists them (the C ones run under ASan+UBSan below too); the NATS bridge's
# run in ffi/tests/run_nats.sh, beside a server.
gallery=(work_queue fan_out replay dead_letter)
for e in "${gallery[@]}"; do
  build "example_$e" gcc c99 "bindings/c/examples/$e.c"
  "$out/example_$e"
  build "example_${e}_cpp" g++ c++17 "bindings/cpp/examples/$e.cpp"
  "$out/example_${e}_cpp"
done

step "C and C++ tests under AddressSanitizer + UBSan"
SAN=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
build test_c_asan gcc c99 ffi/tests/c/test_rill.c "${SAN[@]}"
build test_cpp_asan g++ c++17 bindings/cpp/tests/test_rill.cpp "${SAN[@]}"
build test_persist_asan gcc c99 ffi/tests/c/test_persist.c "${SAN[@]}"
build test_robust_compact_asan gcc c99 ffi/tests/c/test_robust_compact.c "${SAN[@]}"
for t in "${robust[@]}"; do build "${t}_asan" gcc c99 "ffi/tests/c/$t.c" "${SAN[@]}"; done
build test_robust_c89_asan gcc c89 ffi/tests/c/test_robust_c89.c -pedantic-errors "${SAN[@]}"
for e in "${gallery[@]}"; do build "example_${e}_asan" gcc c99 "bindings/c/examples/$e.c" "${SAN[@]}"; done
gallery_asan=("${gallery[@]/#/example_}")
for t in test_c_asan test_cpp_asan test_persist_asan test_robust_compact_asan "${robust[@]/%/_asan}" test_robust_c89_asan \
  "${gallery_asan[@]/%/_asan}"; do
  # Prove the sanitizer is really linked in before trusting a clean run.
  # (ldd's output is captured first: `ldd | grep -q` under pipefail fails at
  # random when grep exits early and ldd dies of SIGPIPE.)
  libs=$(ldd "$out/$t")
  grep -q libasan <<<"$libs" || { echo "$t is not linked against libasan" >&2; exit 1; }
  grep -q libubsan <<<"$libs" || { echo "$t is not linked against libubsan" >&2; exit 1; }
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$out/$t"
done

step "C and C++ tests under valgrind memcheck"
for t in test_c test_cpp test_persist test_robust_compact "${robust[@]}" test_robust_c89; do
  # --trace-children: test_persist's writer and reader, and the children
  # some robust programs fork (and test_robust_ffi's forked child ends by
  # running itself again). test_robust_named's kill loop runs its 50 kills
  # plain and under ASan above; here, each child traced, 5.
  RILL_NAMED_KILLS=5 valgrind --quiet --error-exitcode=1 --fair-sched=yes --suppressions="$root/ffi/tests/valgrind.supp" --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    --trace-children=yes "$out/$t"
done

step "rill.h and rill_nats.h alone under C89 to C17 and C++11 to C++20, pedantic, warnings as errors"
for std in c89 c99 c11 c17 c++11 c++14 c++17 c++20; do
  case $std in c++*) cc=g++ lang=c++ ;; *) cc=gcc lang=c ;; esac
  for h in rill.h rill_nats.h; do
    "$cc" "-std=$std" -pedantic-errors -Wall -Wextra -Werror -fsyntax-only -I"$root/include" -x "$lang" "include/$h" ||
      { echo "include/$h does not compile as $std" >&2; exit 1; }
  done
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
valgrind --quiet --error-exitcode=1 --fair-sched=yes --suppressions="$root/ffi/tests/valgrind.supp" --leak-check=full --show-leak-kinds=definite \
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

step "librill.a: only rill_* global, so two Rust static libraries link into one program"
# Every defined global of the archive is a rill_* symbol, the same set the
# shared library exports: the Rust standard library and the dependencies
# inside are local to it.
globals=$(nm -g --defined-only "$prefix/lib/librill.a" | awk 'NF == 3 {print $3}' | sort -u)
others=$(grep -v '^rill_' <<<"$globals" || true)
[ -z "$others" ] || { echo "librill.a defines non-rill globals, e.g. $(head -5 <<<"$others" | tr '\n' ' ')" >&2; exit 1; }
[ "$globals" = "$(sort -u <<<"$exports")" ] || {
  echo "librill.a's globals differ from librill.so's exports:" >&2
  diff <(echo "$globals") <(sort -u <<<"$exports") >&2 || true
  exit 1
}
# A second Rust static library: a copy of librill.a with its rill_* renamed
# twin_*. The test program links both and runs a broker in each.
awk '{print $1 " twin_" substr($1, 6)}' <<<"$globals" >"$out/twin.syms"
objcopy --redefine-syms="$out/twin.syms" "$prefix/lib/librill.a" "$out/libtwin.a"
build_twin() { # name [extra flags...]
  local name=$1; shift
  # shellcheck disable=SC2046
  gcc -std=c99 "${CWARN[@]}" -g -O1 -I"$root/ffi/tests/c" ffi/tests/c/test_robust_static.c "$out/libtwin.a" \
    $(pkg-config --cflags --static --libs rill-static) -o "$out/$name" "$@"
}
build_twin test_robust_static
"$out/test_robust_static"
valgrind --quiet --error-exitcode=1 --fair-sched=yes --suppressions="$root/ffi/tests/valgrind.supp" --leak-check=full --show-leak-kinds=definite \
  --errors-for-leak-kinds=definite "$out/test_robust_static"
build_twin test_robust_static_asan "${SAN[@]}"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$out/test_robust_static_asan"

step "the CMake package: find_package(rill CONFIG) and the examples, shared and static"
cmake_build=$out/cmake-examples
rm -rf "$cmake_build"
{ cmake -S bindings/c/examples -B "$cmake_build" -DCMAKE_PREFIX_PATH="$prefix" &&
  cmake --build "$cmake_build"; } >"$out/cmake.log" 2>&1 || { cat "$out/cmake.log" >&2; exit 1; }
needed=$(readelf -d "$cmake_build/app")
grep -q 'Shared library: \[librill.so.0\]' <<<"$needed" || { echo "the CMake app does not load librill.so.0" >&2; exit 1; }
needed=$(readelf -d "$cmake_build/app_static")
! grep -q librill <<<"$needed" || { echo "the CMake app_static needs librill.so" >&2; exit 1; }
"$cmake_build/app"
"$cmake_build/app_static"
# The version file: the installed version and older of the same major match,
# a newer or another major does not.
rm -rf "$out/cmake-version" && mkdir -p "$out/cmake-version/src"
cat >"$out/cmake-version/src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.13)
project(rill_version_check C)
file(WRITE "${CMAKE_BINARY_DIR}/found.txt" "")
foreach(want IN ITEMS 0.0 ${installed} 0.999 1.0)
  find_package(rill ${want} CONFIG QUIET PATHS "${prefix}" NO_DEFAULT_PATH)
  file(APPEND "${CMAKE_BINARY_DIR}/found.txt" "${want} ${rill_FOUND}\n")
  unset(rill_FOUND)
  unset(rill_DIR CACHE)
endforeach()
CMAKE
cmake -S "$out/cmake-version/src" -B "$out/cmake-version/build" -Dprefix="$prefix" -Dinstalled="$version" \
  >"$out/cmake.log" 2>&1 || { cat "$out/cmake.log" >&2; exit 1; }
found=$(cat "$out/cmake-version/build/found.txt")
[ "$found" = "$(printf '0.0 1\n%s 1\n0.999 0\n1.0 0' "$version")" ] ||
  { echo "find_package(rill VERSION) answered:" >&2; echo "$found" >&2; exit 1; }

step "the API reference generated from rill.h: every export documented, the man page clean"
for page in "$prefix/share/man/man3/rill.3" "$prefix/share/doc/rill/rill.html"; do
  [ -s "$page" ] || { echo "ffi/install.sh installed no $page" >&2; exit 1; }
done
undocumented=$(for s in $exports; do grep -q "id=\"$s\"" "$prefix/share/doc/rill/rill.html" || echo "$s"; done)
[ -z "$undocumented" ] || { echo "rill.html has no entry for: $undocumented" >&2; exit 1; }
undocumented=$(for s in $exports; do grep -q "^\.SS .*\b$s\b" "$prefix/share/man/man3/rill.3" || echo "$s"; done)
[ -z "$undocumented" ] || { echo "rill.3 has no entry for: $undocumented" >&2; exit 1; }
warnings=$(groff -man -Tutf8 -ww -z "$prefix/share/man/man3/rill.3" 2>&1)
[ -z "$warnings" ] || { echo "groff warns about rill.3: $warnings" >&2; exit 1; }

step "C ABI tests passed"
