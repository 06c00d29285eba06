#!/bin/sh
#
# port-crates.sh: generate the port's Makefile.crates from Cargo.lock.
#
# The FreeBSD ports framework fetches every crate named in CARGO_CRATES and
# vendors them for an offline build, so the list must match Cargo.lock
# exactly.  This script produces the same bytes as the framework's own
# `make cargo-crates` (Mk/Scripts/cargo-crates.awk): one `name-version` per
# crates.io package, in Cargo.lock order (cargo already sorts packages by
# name, then version), continuation lines indented with two tabs and ended
# with ` \`.  The colibri crate itself has no `source` and is skipped.  Any
# other source (git, an alternative registry) cannot be fetched through
# CARGO_CRATES, so it is reported as an error rather than silently dropped.
#
# Usage:
#   scripts/port-crates.sh            rewrite port/sysutils/colibri/Makefile.crates
#   scripts/port-crates.sh --stdout   print the list instead
#   scripts/port-crates.sh --check    exit 1 if Makefile.crates is out of date
#   CARGO_LOCK=path scripts/port-crates.sh ...   read another lock file
#
# POSIX sh and awk only, so it runs unchanged on FreeBSD and Linux.

set -eu

repo_root=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
lock_file=${CARGO_LOCK:-"$repo_root/Cargo.lock"}
crates_file="$repo_root/port/sysutils/colibri/Makefile.crates"

usage() {
	echo "usage: $0 [--stdout | --check]" >&2
	exit 2
}

mode="write"
case $# in
0) ;;
1)
	case $1 in
	--stdout) mode=stdout ;;
	--check) mode=check ;;
	-h | --help)
		sed -n '3,22p' "$0"
		exit 0
		;;
	*) usage ;;
	esac
	;;
*) usage ;;
esac

if [ ! -r "$lock_file" ]; then
	echo "port-crates.sh: $lock_file not found; run 'cargo generate-lockfile' in $repo_root first" >&2
	exit 2
fi

# Emit the CARGO_CRATES block for the lock file named by $1.
generate() {
	awk '
	function flush() {
		if (crate_source == "registry+https://github.com/rust-lang/crates.io-index")
			crates[n++] = crate_name "-" crate_version
		else if (crate_source != "") {
			printf "port-crates.sh: %s-%s comes from %s, which CARGO_CRATES cannot fetch\n", crate_name, crate_version, crate_source > "/dev/stderr"
			bad = 1
		}
		crate_name = crate_version = crate_source = ""
	}
	/^\[\[package\]\]$/ { flush(); next }
	/^name = "/ { crate_name = $3; gsub(/"/, "", crate_name); next }
	/^version = "/ { crate_version = $3; gsub(/"/, "", crate_version); next }
	/^source = "/ { crate_source = $3; gsub(/"/, "", crate_source); next }
	END {
		flush()
		for (i = 0; i < n; i++) {
			printf "%s\t%s%s\n", (i == 0 ? "CARGO_CRATES=" : "\t"), crates[i], (i < n - 1 ? " \\" : "")
		}
		exit bad
	}
	' "$1"
}

case $mode in
stdout)
	generate "$lock_file"
	;;
write)
	tmp=$(mktemp "${TMPDIR:-/tmp}/port-crates.XXXXXX")
	trap 'rm -f "$tmp"' EXIT
	generate "$lock_file" >"$tmp"
	chmod 0644 "$tmp" # mktemp made it 0600; the port file is world-readable.
	mv "$tmp" "$crates_file"
	trap - EXIT
	echo "port-crates.sh: wrote $(grep -c . "$crates_file") crates to ${crates_file#"$repo_root"/}"
	;;
check)
	tmp=$(mktemp "${TMPDIR:-/tmp}/port-crates.XXXXXX")
	trap 'rm -f "$tmp"' EXIT
	generate "$lock_file" >"$tmp"
	if [ ! -f "$crates_file" ]; then
		echo "port-crates.sh: ${crates_file#"$repo_root"/} is missing; run scripts/port-crates.sh" >&2
		exit 1
	fi
	if ! diff -u "$crates_file" "$tmp" >&2; then
		echo "port-crates.sh: ${crates_file#"$repo_root"/} does not match Cargo.lock (diff above: - committed, + expected); run scripts/port-crates.sh and commit the result" >&2
		exit 1
	fi
	echo "port-crates.sh: Makefile.crates matches Cargo.lock ($(grep -c . "$tmp") crates)"
	;;
esac
