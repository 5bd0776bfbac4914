#!/usr/bin/env bash
# Installs rill for C and C++ programs: librill.so, librill.a, rill.h,
# rill.hpp and a pkg-config file, under a prefix (default /usr/local).
#
#   bash ffi/install.sh [--prefix DIR] [--no-build]
#
# Then:  cc app.c $(pkg-config --cflags --libs rill)
# (with PKG_CONFIG_PATH=DIR/lib/pkgconfig for a prefix pkg-config does not search).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=/usr/local
build=1
while (($#)); do
  case $1 in
    --prefix) prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
prefix=$(mkdir -p "$prefix" && cd "$prefix" && pwd)

if ((build)); then
  cargo build --release -p rill-ffi
fi
version=$(sed -n '/^version = "/{s/^version = "\(.*\)"/\1/p;q}' Cargo.toml)

# The system libraries a Rust static library needs, as rustc reports them.
static_libs=$(cargo rustc --release -p rill-ffi --crate-type staticlib -- --print native-static-libs 2>&1 |
  sed -n 's/.*native-static-libs: //p' | tail -1)
[ -n "$static_libs" ] || static_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"

install -d "$prefix/include" "$prefix/lib/pkgconfig"
install -m 644 include/rill.h "$prefix/include/rill.h"
install -m 644 bindings/cpp/rill.hpp "$prefix/include/rill.hpp"
install -m 755 target/release/librill.so "$prefix/lib/librill.so"
install -m 644 target/release/librill.a "$prefix/lib/librill.a"
cat > "$prefix/lib/pkgconfig/rill.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include
static_libs=$static_libs

Name: rill
Description: Lock-free in-process publish/subscribe engine
Version: $version
Libs: -L\${libdir} -lrill
Libs.private: $static_libs
Cflags: -I\${includedir}
PC
echo "installed rill $version under $prefix"
