#!/bin/sh
# Fetches Debian's darknet source package with apt and unpacks it, Debian's own
# patches applied, into DEST. Usage: fetch-darknet-source.sh DEST VERSION
#
# apt-get source needs deb-src entries, which most systems do not enable. Rather
# than edit the system's apt setup, this derives deb-src entries from the
# configured deb entries into a private apt state directory (lists, cache and
# sources of its own), so the system's package state is never touched. apt
# verifies the downloaded files against the signed Sources index.
set -eu

dest=$1
version=$2
work=$(dirname "$dest")/apt-source
rm -rf "$work" "$dest"
mkdir -p "$work/sources.list.d" "$work/lists/partial" "$work/cache/archives/partial" "$work/download"

# One-line format: every "deb ..." line becomes "deb-src ...".
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -n 's/^[[:space:]]*deb\([[:space:]]\)/deb-src\1/p' "$f"
done > "$work/sources.list.d/derived.list"

# deb822 format: a stanza with Types: deb becomes Types: deb-src (Enabled: no kept).
n=0
for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    n=$((n + 1))
    sed 's/^Types:.*\<deb\>\([^-]\|$\).*/Types: deb-src/' "$f" > "$work/sources.list.d/derived-$n.sources"
done

user=$(id -un)
apt_opts="-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=$work/sources.list.d
 -o Dir::State::Lists=$work/lists -o Dir::Cache=$work/cache -o APT::Sandbox::User=$user
 -o Debug::NoLocking=1 -q"

# Third-party repositories often publish no sources: their failures are not
# ours, so update may fail partly; the source download below is what counts.
# shellcheck disable=SC2086
apt-get $apt_opts update > "$work/update.log" 2>&1 || \
    echo "fetch-darknet-source: apt-get update reported errors (see $work/update.log); trying anyway" >&2

cd "$work/download"
# shellcheck disable=SC2086
if ! apt-get $apt_opts source --download-only "darknet=$version" > "$work/source.log" 2>&1; then
    cat "$work/source.log" >&2
    echo "fetch-darknet-source: could not fetch Debian source package darknet=$version" >&2
    echo "  (give a darknet tree with -DDARKNET_SOURCE_DIR=... instead, see docs/build.md)" >&2
    exit 1
fi
dsc=$(ls ./*.dsc)
# The .dsc's signature cannot be checked without Debian's keyring; apt has
# already checked every file's checksum against the signed index.
dpkg-source --no-check -x "$dsc" "$dest" > "$work/extract.log" 2>&1 || {
    cat "$work/extract.log" >&2; exit 1; }

got=$(sed -n '1s/^darknet (\([^)]*\)).*/\1/p' "$dest/debian/changelog")
if [ "$got" != "$version" ]; then
    echo "fetch-darknet-source: expected darknet $version, unpacked '$got'" >&2
    exit 1
fi
echo "fetch-darknet-source: darknet $got unpacked into $dest"
