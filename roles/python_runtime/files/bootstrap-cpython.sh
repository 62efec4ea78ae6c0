#!/bin/sh
# ascendai.vllm python_runtime: unpack the offline bundle's relocatable CPython on a node whose own Python
# ansible-core refuses (Kylin V10: 3.7), or that has none. Runs through ansible.builtin.script before any module can,
# so it needs only what a minimal Kylin or openEuler host has: sh, tar, gzip, sha256sum, and curl or wget.
#
#   bootstrap-cpython.sh DEST SHA256 [URL]
#
# DEST: the directory to unpack into (install_only tarballs hold one top-level python/, stripped).
# SHA256: the tarball's sum from the bundle's MANIFEST.sha256, checked before anything is unpacked.
# URL: download the tarball from there; without it, the tarball follows this script (after the marker line),
#      the way the role ships it from a bundle directory on the controller.
# Exit codes: 0 unpacked, 2 usage, 3 no downloader, 4 download failed, 5 sha256 mismatch, 6 unpack failed.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 DEST SHA256 [URL]" >&2; exit 2; }
dest=$1 want=$2 url=${3:-}
case $dest in /*) ;; *) echo "DEST must be an absolute path: $dest" >&2; exit 2 ;; esac
work=$(mktemp -d /var/tmp/ascendai-cpython.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
archive=$work/cpython.tar.gz
if [ -n "$url" ]; then
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 --connect-timeout 30 -o "$archive" "$url" || { echo "curl could not download the CPython tarball" >&2; exit 4; }
  elif command -v wget >/dev/null 2>&1; then
    wget -q -T 30 -t 3 -O "$archive" "$url" || { echo "wget could not download the CPython tarball" >&2; exit 4; }
  else
    echo "neither curl nor wget is installed: install one (dnf install curl), or use ascendai_bundle_dir" >&2
    exit 3
  fi
else
  line=$(grep -an '^__ASCENDAI_CPYTHON_PAYLOAD__$' "$0" | head -n 1 | cut -d: -f1)
  [ -n "$line" ] || { echo "no payload after this script: run it from the role" >&2; exit 2; }
  tail -n +"$((line + 1))" "$0" > "$archive"
fi
got=$(sha256sum "$archive" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  echo "sha256 of the CPython tarball is $got, the bundle's MANIFEST.sha256 says $want: nothing was unpacked" >&2
  exit 5
fi
partial=$dest.partial
rm -rf "$partial"
mkdir -p "$partial"
tar -xzf "$archive" -C "$partial" --strip-components=1 || { rm -rf "$partial"; echo "tar could not unpack the tarball" >&2; exit 6; }
rm -rf "$dest"
mv "$partial" "$dest"
echo "unpacked into $dest"
exit 0
__ASCENDAI_CPYTHON_PAYLOAD__
