#!/usr/bin/env bash
# Prints the path of a protoc to run. The first time, it fetches Debian's
# protobuf-compiler and the two libraries it needs with apt-get download,
# unpacks them into the user cache (no root needed) and writes a small
# wrapper there; later runs reuse it. A file lock keeps parallel runs from
# unpacking at once.
set -euo pipefail

version=3.21.12-3
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kfsm/protoc-$version"
wrapper="$cache/protoc"

usable() { [ -x "$wrapper" ] && "$wrapper" --version >/dev/null 2>&1; }

if usable; then
	echo "$wrapper"
	exit 0
fi

mkdir -p "$cache"
exec 9>"$cache.lock"
flock 9
if usable; then
	echo "$wrapper"
	exit 0
fi

echo "protoc: fetching protobuf-compiler $version from the Debian archive" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fetch() { (cd "$work" && apt-get download -q "protobuf-compiler=$version" "libprotoc32=$version" "libprotobuf32=$version") >&2; }
if ! fetch; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "protoc: apt-get download failed; the package lists may be missing (run: sudo apt-get update)" >&2
		exit 1
	fi
	apt-get update -q >&2
	fetch
fi
rm -rf "$cache/root"
for deb in "$work"/*.deb; do
	dpkg-deb -x "$deb" "$cache/root"
done
libdir=$(dirname "$(find "$cache/root" -name 'libprotoc.so.*' | head -n1)")
cat >"$wrapper.tmp" <<WRAPPER
#!/bin/sh
LD_LIBRARY_PATH="$libdir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$cache/root/usr/bin/protoc" "\$@"
WRAPPER
chmod +x "$wrapper.tmp"
mv "$wrapper.tmp" "$wrapper"
usable || { echo "protoc: the unpacked protoc does not run" >&2; exit 1; }
echo "$wrapper"
