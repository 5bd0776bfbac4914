#!/usr/bin/env bash
# Installs rill for C and C++ programs under a prefix (default /usr/local):
# lib/librill.so.0.X.Y (stripped, SONAME librill.so.0) with the links
# librill.so.0 and librill.so, lib/librill.a (debug info stripped, only
# rill_* global), include/rill.h, include/rill.hpp, and two pkg-config files.
#
#   bash ffi/install.sh [--prefix DIR] [--no-build] [--with-nats]
#
# --with-nats builds the library with the NATS JetStream bridge (the `nats`
# feature: rill_nats_bridge_*, which brings async-nats and Tokio) and
# installs include/rill_nats.h too; without it the library stays lean.
#
# Then:  cc app.c $(pkg-config --cflags --libs rill)                   (shared)
#        cc app.c $(pkg-config --cflags --libs rill-static)            (librill.a)
#        cc -static app.c $(pkg-config --cflags --static --libs rill)  (all static)
# (with PKG_CONFIG_PATH=DIR/lib/pkgconfig for a prefix pkg-config does not search).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=/usr/local
build=1
features=()
nats=0
while (($#)); do
  case $1 in
    --prefix) prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --no-build) build=0; shift ;;
    --with-nats) nats=1; features=(--features nats); shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
prefix=$(mkdir -p "$prefix" && cd "$prefix" && pwd)

if ((build)); then
  cargo build --release -p rill-ffi "${features[@]}"
fi
version=$(sed -n '/^version = "/{s/^version = "\(.*\)"/\1/p;q}' Cargo.toml)

major=${version%%.*}

# The system libraries a Rust static library needs, as rustc reports them,
# less the two a C compiler driver adds itself: -lc, and -lgcc_s, which has
# no static archive (a `cc -static` link takes the unwinder from libgcc_eh).
static_libs=$(cargo rustc --release -p rill-ffi "${features[@]}" --crate-type staticlib -- --print native-static-libs 2>&1 |
  sed -n 's/.*native-static-libs: //p' | tail -1)
[ -n "$static_libs" ] || static_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
private_libs=
for l in $static_libs; do
  case $l in -lgcc_s|-lc) ;; *) private_libs+="${private_libs:+ }$l" ;; esac
done

install -d "$prefix/include" "$prefix/lib/pkgconfig"
install -m 644 include/rill.h "$prefix/include/rill.h"
install -m 644 bindings/cpp/rill.hpp "$prefix/include/rill.hpp"
if ((nats)); then
  install -m 644 include/rill_nats.h "$prefix/include/rill_nats.h"
fi
# The shared library under its full version, with the SONAME link programs
# load and the development link the linker finds; symbols and debug info
# stripped (the dynamic symbol table stays).
install -m 755 target/release/librill.so "$prefix/lib/librill.so.$version"
strip --strip-unneeded "$prefix/lib/librill.so.$version"
ln -sfn "librill.so.$version" "$prefix/lib/librill.so.$major"
ln -sfn "librill.so.$major" "$prefix/lib/librill.so"
# The archive rustc writes holds the Rust standard library and every
# dependency as objects with their symbols global: two Rust static libraries
# in one program would collide on them. Linking its objects into one
# relocatable object resolves rill's references to them inside it; then every
# defined global but rill_* is made local, and the archive holds that object.
# The LLVM bitcode rustc embeds in each object goes too: merged by ld -r it
# is no longer valid bitcode, and binutils' LLVM plugin aborts reading it.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ld -r --whole-archive target/release/librill.a -o "$work/rill.o"
objcopy --strip-debug --remove-section=.llvmbc --remove-section=.llvmcmd --remove-section=.llvm_addrsig \
  --wildcard --keep-global-symbol='rill_*' "$work/rill.o"
rm -f "$prefix/lib/librill.a"
ar rcs "$prefix/lib/librill.a" "$work/rill.o"
chmod 644 "$prefix/lib/librill.a"

cat > "$prefix/lib/pkgconfig/rill.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: rill
Description: Lock-free in-process publish/subscribe engine
Version: $version
Libs: -L\${libdir} -lrill
Libs.private: $private_libs
Cflags: -I\${includedir}
PC
# The linker prefers librill.so to librill.a for -lrill, so a program that
# wants the archive without linking everything statically names it.
cat > "$prefix/lib/pkgconfig/rill-static.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: rill-static
Description: Lock-free in-process publish/subscribe engine (static library)
Version: $version
Libs: \${libdir}/librill.a $private_libs
Cflags: -I\${includedir}
PC
echo "installed rill $version under $prefix"
