#!/usr/bin/env bash
# Installs rill for C and C++ programs under a prefix (default /usr/local):
# lib/librill.so.0.X.Y (stripped, SONAME librill.so.0) with the links
# librill.so.0 and librill.so, lib/librill.a (debug info stripped, only
# rill_* global), include/rill.h, include/rill.hpp, two pkg-config files, a
# CMake package (lib/cmake/rill: find_package(rill CONFIG) gives the imported
# targets rill::rill, shared, and rill::rill_static), and the API reference
# generated from the header by ffi/reference.py (python3): the man page
# share/man/man3/rill.3 and share/doc/rill/rill.html.
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
# (with PKG_CONFIG_PATH=DIR/lib/pkgconfig for a prefix pkg-config does not search)
# or, in CMake:  find_package(rill CONFIG REQUIRED)
#                target_link_libraries(app PRIVATE rill::rill)       (or rill::rill_static)
# (with -DCMAKE_PREFIX_PATH=DIR for a prefix CMake does not search).
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
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
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
# The CMake package, written here so installing needs no CMake. Paths are
# relative to the file's own place (lib/cmake/rill), so the prefix can move.
cmake_libs=
for l in $private_libs; do
  case $l in -l*) cmake_libs+="${cmake_libs:+;}${l#-l}" ;; *) cmake_libs+="${cmake_libs:+;}$l" ;; esac
done
install -d "$prefix/lib/cmake/rill"
cat > "$prefix/lib/cmake/rill/rillConfig.cmake" <<CMAKE
# rill $version for CMake, written by ffi/install.sh:
#   find_package(rill CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE rill::rill)         # librill.so
#   target_link_libraries(app PRIVATE rill::rill_static)  # librill.a
get_filename_component(_rill_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET rill::rill)
  add_library(rill::rill SHARED IMPORTED)
  set_target_properties(rill::rill PROPERTIES
    IMPORTED_LOCATION "\${_rill_prefix}/lib/librill.so.$version"
    IMPORTED_SONAME "librill.so.$major"
    INTERFACE_INCLUDE_DIRECTORIES "\${_rill_prefix}/include")
endif()
if(NOT TARGET rill::rill_static)
  add_library(rill::rill_static STATIC IMPORTED)
  set_target_properties(rill::rill_static PROPERTIES
    IMPORTED_LOCATION "\${_rill_prefix}/lib/librill.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "C"
    INTERFACE_INCLUDE_DIRECTORIES "\${_rill_prefix}/include"
    INTERFACE_LINK_LIBRARIES "$cmake_libs")
endif()
unset(_rill_prefix)
CMAKE
# Compatible as the SONAME is: any $major.x at least the version asked for,
# built for this pointer size.
cat > "$prefix/lib/cmake/rill/rillConfigVersion.cmake" <<CMAKE
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION)
  if(PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION OR NOT PACKAGE_FIND_VERSION_MAJOR STREQUAL "$major")
    set(PACKAGE_VERSION_COMPATIBLE FALSE)
  else()
    set(PACKAGE_VERSION_COMPATIBLE TRUE)
    if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
      set(PACKAGE_VERSION_EXACT TRUE)
    endif()
  endif()
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
if(CMAKE_SIZEOF_VOID_P AND NOT CMAKE_SIZEOF_VOID_P STREQUAL "$(($(getconf LONG_BIT) / 8))")
  math(EXPR _rill_bits "\${CMAKE_SIZEOF_VOID_P} * 8")
  set(PACKAGE_VERSION "\${PACKAGE_VERSION} (\${_rill_bits}-bit)")
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
  unset(_rill_bits)
endif()
CMAKE
# The API reference, from the headers just installed.
headers=(include/rill.h)
((nats)) && headers+=(include/rill_nats.h)
python3 ffi/reference.py "$work/reference" "${headers[@]}" >/dev/null
install -d "$prefix/share/man/man3" "$prefix/share/doc/rill"
for h in "${headers[@]}"; do
  name=$(basename "$h" .h)
  install -m 644 "$work/reference/$name.3" "$prefix/share/man/man3/$name.3"
  install -m 644 "$work/reference/$name.html" "$prefix/share/doc/rill/$name.html"
done
echo "installed rill $version under $prefix"
