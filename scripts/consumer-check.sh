#!/usr/bin/env bash
# consumer-check.sh: install maize into a temporary prefix and build a tiny
# consumer three ways: pkg-config (shared, and static from libmaize.a), a
# meson subproject, CMake find_package.
# Each consumer prints mz_version() and creates a CPU runtime.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
meson setup "$tmp/build" "$src" --prefix "$prefix" -Dextras=disabled >/dev/null
ninja -C "$tmp/build" >/dev/null
meson install -C "$tmp/build" >/dev/null
libdir=$(dirname "$(find "$prefix" -name maize.pc -path '*pkgconfig*' | head -1)")/..
cat > "$tmp/consumer.c" <<'C'
#include <maize.h>
#include <stdio.h>
int main(void) {
  mz_runtime *rt;
  if (mz_runtime_create(NULL, &rt)) return 1;
  printf("maize %s (headers %s), %u device(s)\n", mz_version(), MZ_VERSION_STRING, mz_runtime_device_count(rt));
  mz_runtime_destroy(rt);
  return 0;
}
C
export MZ_DEVICES=cpu MZ_QUIET=1 MZ_PERFMODEL_DIR=off

echo "--- pkg-config"
export PKG_CONFIG_PATH=$libdir/pkgconfig
cc -o "$tmp/pc" "$tmp/consumer.c" $(pkg-config --cflags --libs maize) -Wl,-rpath,"$(pkg-config --variable=libdir maize)"
"$tmp/pc"

echo "--- pkg-config --static (libmaize.a and the libraries maize.pc lists as private)"
cc -o "$tmp/pcs" "$tmp/consumer.c" $(pkg-config --cflags maize) "$(pkg-config --variable=libdir maize)/libmaize.a" \
  $(pkg-config --static --libs maize | sed -e 's/-lmaize\b//')
"$tmp/pcs"

echo "--- CMake"
mkdir -p "$tmp/cm"
cat > "$tmp/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(consumer C)
find_package(maize 0.1 REQUIRED)
add_executable(consumer ../consumer.c)
target_link_libraries(consumer PRIVATE maize::maize)
CM
cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/cm/build" >/dev/null
"$tmp/cm/build/consumer"

echo "--- meson subproject"
mkdir -p "$tmp/ms/subprojects"
ln -s "$src" "$tmp/ms/subprojects/maize"
cp "$tmp/consumer.c" "$tmp/ms/"
cat > "$tmp/ms/meson.build" <<'MS'
project('consumer', 'c')
executable('consumer', 'consumer.c', dependencies : dependency('maize', fallback : 'maize'))
MS
meson setup "$tmp/ms/build" "$tmp/ms" --wrap-mode=forcefallback >/dev/null
ninja -C "$tmp/ms/build" >/dev/null
"$tmp/ms/build/consumer"
echo "consumer-check: ok (pkg-config, CMake, meson subproject)"
