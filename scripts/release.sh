#!/bin/sh
#
# release.sh: turn a release tag into what the port needs: the source
# tarball, a filled-in port Makefile and a complete distinfo.
#
# Usage:
#   scripts/release.sh --account GH_ACCOUNT [--maintainer ADDRESS]
#                      [--offline] [--out DIR] TAG
#
#   TAG           an existing tag, v<version>; <version> must be Cargo.toml's
#                 version and the port's DISTVERSION.
#   --account     the GitHub account (or organisation) that hosts colibri;
#                 replaces the placeholder GH_ACCOUNT and WWW in the Makefile.
#   --maintainer  the port's MAINTAINER address (replaces the placeholder).
#   --offline     take the checksum of the local tarball instead of fetching
#                 GitHub's (see below); for a dry run before the tag is pushed.
#   --out DIR     where the tarball goes (default: target/release-dist).
#
# What it does, in order, stopping at the first problem:
#   1. checks the tag, the versions and that Makefile.crates matches
#      Cargo.lock (scripts/port-crates.sh --check);
#   2. makes the tag's tarball with `git archive`, named and laid out the way
#      the port's USE_GITHUB fetch names it (<account>-colibri-<tag>_GH0.tar.gz,
#      top directory colibri-<version>/);
#   3. takes the SHA256 and size of the tarball the port will really fetch:
#      GitHub's, from codeload.github.com, because GitHub builds its own
#      archive and its bytes need not equal a local `git archive` (--offline
#      uses the local one and says so);
#   4. takes the SHA256 and size of every crate in Cargo.lock from cargo's
#      download cache (`cargo fetch --locked` fills it), checking each SHA256
#      against Cargo.lock's checksum;
#   5. writes port/sysutils/colibri/distinfo in the format of the ports
#      framework's `make makesum` (TIMESTAMP, then SHA256/SIZE per distfile,
#      crates as rust/crates/<name>-<version>.crate) and the Makefile's
#      account and maintainer.
# It commits, tags and pushes nothing: review `git diff port/` and commit.
#
# POSIX sh; needs git, cargo, awk, and sha256sum (Linux) or sha256 (FreeBSD);
# curl or fetch(1) unless --offline.

set -eu

repo_root=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
port_dir="$repo_root/port/sysutils/colibri"
project=colibri

usage() {
	sed -n '6,17p' "$0" >&2
	exit 2
}

die() {
	echo "release.sh: $*" >&2
	exit 1
}

account=""
maintainer=""
offline=no
out_dir="$repo_root/target/release-dist"
tag=""
while [ $# -gt 0 ]; do
	case $1 in
	--account)
		[ $# -ge 2 ] || usage
		account=$2
		shift 2
		;;
	--maintainer)
		[ $# -ge 2 ] || usage
		maintainer=$2
		shift 2
		;;
	--offline)
		offline=yes
		shift
		;;
	--out)
		[ $# -ge 2 ] || usage
		out_dir=$2
		shift 2
		;;
	-h | --help) usage ;;
	-*) usage ;;
	*)
		[ -z "$tag" ] || usage
		tag=$1
		shift
		;;
	esac
done
if [ -z "$tag" ] || [ -z "$account" ]; then
	usage
fi
case $account in
*[!A-Za-z0-9-]* | -*) die "--account $account is not a GitHub account name" ;;
esac

sha256_of() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | awk '{ print $1 }'
	else
		sha256 -q "$1"
	fi
}

size_of() {
	wc -c <"$1" | tr -d ' '
}

download() { # url file
	if command -v curl >/dev/null 2>&1; then
		curl -fsSL -o "$2" "$1"
	else
		fetch -q -o "$2" "$1"
	fi
}

cd "$repo_root"

# --- 1. versions -----------------------------------------------------------

git rev-parse -q --verify "refs/tags/$tag" >/dev/null || die "no tag $tag (git tag -a $tag first)"
version=${tag#v}
[ "v$version" = "$tag" ] || die "tag $tag is not v<version>"
cargo_version=$(git show "$tag:Cargo.toml" | awk -F'"' '/^version = "/ { print $2; exit }')
[ "$cargo_version" = "$version" ] || die "Cargo.toml at $tag says version $cargo_version, the tag says $version"
port_version=$(awk '$1 == "DISTVERSION=" { print $2 }' "$port_dir/Makefile")
[ "$port_version" = "$version" ] || die "the port's DISTVERSION is $port_version, the tag says $version"
git diff --quiet "$tag" -- Cargo.lock || die "Cargo.lock differs from $tag's; the crate list must be the tag's"
sh scripts/port-crates.sh --check >/dev/null || die "Makefile.crates does not match Cargo.lock (run scripts/port-crates.sh)"

# --- 2. the tarball --------------------------------------------------------

distfile="$account-$project-${tag}_GH0.tar.gz"
mkdir -p "$out_dir"
tarball="$out_dir/$distfile"
# GitHub's archive of tag vX.Y.Z unpacks into <project>-X.Y.Z/ (the leading
# v dropped), which is the port's default WRKSRC for USE_GITHUB.
git archive --format=tar.gz --prefix="$project-$version/" -o "$tarball" "$tag"
echo "tarball: $tarball"

if [ "$offline" = yes ]; then
	checked=$tarball
	echo "distinfo: using the local tarball (--offline); rerun without --offline once $tag is on GitHub"
else
	checked="$out_dir/github-$distfile"
	url="https://codeload.github.com/$account/$project/tar.gz/$tag"
	download "$url" "$checked" || die "cannot fetch $url (is the tag pushed?)"
	if [ "$(sha256_of "$checked")" != "$(sha256_of "$tarball")" ]; then
		echo "note: GitHub's tarball differs in bytes from the local git archive; distinfo uses GitHub's"
	fi
fi

# --- 3./4. distinfo --------------------------------------------------------

cargo fetch --locked --quiet || die "cargo fetch --locked failed"
cargo_home=${CARGO_HOME:-"$HOME/.cargo"}
tmp=$(mktemp "${TMPDIR:-/tmp}/distinfo.XXXXXX")
trap 'rm -f "$tmp"' EXIT
{
	echo "TIMESTAMP = $(date +%s)"
	echo "SHA256 ($distfile) = $(sha256_of "$checked")"
	echo "SIZE ($distfile) = $(size_of "$checked")"
} >"$tmp"

# name version checksum, for every crates.io package of Cargo.lock.
awk '
function flush() {
	if (source == "registry+https://github.com/rust-lang/crates.io-index")
		print name, version, checksum
	name = version = source = checksum = ""
}
/^\[\[package\]\]$/ { flush(); next }
/^name = "/ { name = $3; gsub(/"/, "", name); next }
/^version = "/ { version = $3; gsub(/"/, "", version); next }
/^source = "/ { source = $3; gsub(/"/, "", source); next }
/^checksum = "/ { checksum = $3; gsub(/"/, "", checksum); next }
END { flush() }
' Cargo.lock | while read -r name crate_version checksum; do
	crate="$name-$crate_version.crate"
	found=""
	for dir in "$cargo_home"/registry/cache/*/; do
		if [ -f "$dir$crate" ]; then
			found="$dir$crate"
			break
		fi
	done
	[ -n "$found" ] || die "$crate is not in $cargo_home/registry/cache after cargo fetch"
	sum=$(sha256_of "$found")
	[ "$sum" = "$checksum" ] || die "$crate: SHA256 $sum is not Cargo.lock's $checksum"
	echo "SHA256 (rust/crates/$crate) = $sum"
	echo "SIZE (rust/crates/$crate) = $(size_of "$found")"
done >>"$tmp"
# The loop runs in a subshell: a die there only ends the subshell, so check
# that every crate made it.
crates=$(awk '/^source = "registry\+/ { n++ } END { print n + 0 }' Cargo.lock)
listed=$(grep -c '^SIZE (rust/crates/' "$tmp" || true)
[ "$crates" = "$listed" ] || die "distinfo lists $listed crates, Cargo.lock has $crates"
cp "$tmp" "$port_dir/distinfo"
chmod 0644 "$port_dir/distinfo"
echo "distinfo: $port_dir/distinfo ($listed crates)"

# --- 5. the Makefile's placeholders ----------------------------------------

sed -e "s|^GH_ACCOUNT=.*|GH_ACCOUNT=	$account|" \
	-e "s|^WWW=.*|WWW=		https://github.com/$account/$project|" \
	"$port_dir/Makefile" >"$tmp"
if [ -n "$maintainer" ]; then
	sed "s|^MAINTAINER=.*|MAINTAINER=	$maintainer|" "$tmp" >"$tmp.m" && mv "$tmp.m" "$tmp"
fi
cp "$tmp" "$port_dir/Makefile"
if grep -q 'example\.invalid' "$port_dir/Makefile"; then
	echo "note: MAINTAINER is still a placeholder; pass --maintainer"
fi
echo "done: review 'git diff port/' and commit it with the release."
