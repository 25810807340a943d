#!/usr/bin/env bash
# Prints the path of a promtool to run. The first time, it fetches Debian's
# prometheus package, in whatever version the archive serves, with apt-get
# download, and unpacks promtool from it into the user cache (no root needed
# when the package lists are there); later runs reuse it. A file lock keeps
# parallel runs from unpacking at once.
set -euo pipefail

cache="${XDG_CACHE_HOME:-$HOME/.cache}/kfsm/promtool"
bin="$cache/promtool"

usable() { [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; }

if usable; then
	echo "$bin"
	exit 0
fi

mkdir -p "$cache"
exec 9>"$cache.lock"
flock 9
if usable; then
	echo "$bin"
	exit 0
fi

echo "promtool: fetching Debian's prometheus package" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fetch() { (cd "$work" && apt-get download -q prometheus) >&2; }
if ! fetch; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "promtool: apt-get download prometheus failed; the package lists may be missing (run: sudo apt-get update)" >&2
		exit 1
	fi
	apt-get update -q >&2
	fetch
fi
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
install -m 0755 "$work/root/usr/bin/promtool" "$bin.tmp"
mv "$bin.tmp" "$bin"
usable || { echo "promtool: the unpacked promtool does not run" >&2; exit 1; }
"$bin" --version >&2
echo "$bin"
