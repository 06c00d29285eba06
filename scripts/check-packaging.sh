#!/bin/sh
#
# check-packaging.sh: lint everything colibri ships besides the Rust code.
#
# Checks, each reported as ok, FAIL or skip:
#   - rc.d/colibri and the port's files/colibri.in (with %%PREFIX%% set to
#     /usr/local) pass `sh -n` and `shellcheck -s sh`, and are the same file;
#   - scripts/freebsd-smoke.sh, scripts/release.sh and scripts/port-crates.sh
#     pass `sh -n` and `shellcheck -s sh`;
#   - run against a stub rc.subr, rc.d/colibri hands daemon(8) the expected
#     arguments and its reload sends SIGHUP to colibrid's pid, not daemon's;
#   - man/* pass `mandoc -Tlint -Wwarning`;
#   - port/sysutils/colibri/Makefile.crates matches Cargo.lock;
#   - pkg-plist lists exactly the files the port's Makefile installs, and
#     every file the Makefile installs from the source tree (and its
#     LICENSE_FILE) exists;
#   - every key of dist/colibri.toml.sample is documented in colibri.toml(5);
#   - with built binaries (target/debug or target/release, or $COLIBRID and
#     $COLIBRI): every colibrid flag is in colibrid(8), every colibri
#     subcommand is in colibri(1), and colibrid --check-config accepts the
#     sample config with every key uncommented.
#
# It installs nothing: CI provides shellcheck and mandoc, and a missing tool is
# a failure, not a skip.  Exit status: 0 if nothing failed, 1 otherwise.  The
# last line of output is a one-line summary.

set -u

repo_root=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
cd "$repo_root" || exit 1

port_dir=port/sysutils/colibri
tmp_dir=$(mktemp -d "${TMPDIR:-/tmp}/check-packaging.XXXXXX") || exit 1
trap 'rm -rf "$tmp_dir"' EXIT

passed=0
failed=0
skipped=0
failures=""

ok() {
	passed=$((passed + 1))
	echo "ok    $1"
}

fail() {
	failed=$((failed + 1))
	failures="$failures${failures:+, }$1"
	echo "FAIL  $1"
	if [ $# -gt 1 ]; then
		shift
		printf '%s\n' "$@" | sed 's/^/      /'
	fi
}

skip() {
	skipped=$((skipped + 1))
	echo "skip  $1: $2"
}

have() {
	command -v "$1" >/dev/null 2>&1
}

# --- rc scripts ------------------------------------------------------------

rc_template="$port_dir/files/colibri.in"
rc_expanded="$tmp_dir/colibri.in.sh"
sed 's|%%PREFIX%%|/usr/local|g' "$rc_template" >"$rc_expanded"

for script in rc.d/colibri "$rc_expanded" scripts/freebsd-smoke.sh scripts/release.sh scripts/port-crates.sh; do
	case $script in
	"$rc_expanded") label="$rc_template (PREFIX=/usr/local)" ;;
	*) label=$script ;;
	esac
	if out=$(sh -n "$script" 2>&1); then
		ok "sh -n $label"
	else
		fail "sh -n $label" "$out"
	fi
	if ! have shellcheck; then
		fail "shellcheck $label" "shellcheck not found (CI installs it; locally: pkg install hs-ShellCheck or apt-get install shellcheck)"
	elif out=$(shellcheck -s sh "$script" 2>&1); then
		ok "shellcheck -s sh $label"
	else
		fail "shellcheck -s sh $label" "$out"
	fi
done

if grep -q '%%' "$rc_expanded"; then
	fail "$rc_template substitutions" "placeholders other than %%PREFIX%% left: $(grep -o '%%[A-Z_]*%%' "$rc_expanded" | sort -u | tr '\n' ' ')"
elif out=$(diff -u rc.d/colibri "$rc_expanded" 2>&1); then
	ok "rc.d/colibri is $rc_template with PREFIX=/usr/local"
else
	fail "rc.d/colibri is $rc_template with PREFIX=/usr/local" "$out" \
	    "regenerate: sed 's|%%PREFIX%%|/usr/local|g' $rc_template > rc.d/colibri"
fi

# Run the rc script against a stub rc.subr: the real one is FreeBSD's, but
# what the script hands to it (daemon(8)'s arguments) and its reload path can
# be checked anywhere.
stub="$tmp_dir/rc.subr"
cat >"$stub" <<'STUB'
load_rc_config() { :; }
install() { :; }
check_pidfile() { [ "$1" = /var/run/colibri/colibrid.child.pid ] && [ "$2" = true ] && echo 4242; }
kill() { echo "kill $*"; }
run_rc_command() {
	case $1 in
	args) echo "$command $command_args" ;;
	reload) rc_pid=1000; $reload_cmd ;;
	esac
}
STUB
sed -e "s|^\. /etc/rc.subr\$|. $stub|" -e "s|^colibrid=.*|colibrid=true # stands in for colibrid --check-config.|" rc.d/colibri >"$tmp_dir/rc-stubbed"
expected_args="/usr/sbin/daemon -f -S -s info -T colibri -r -P /var/run/colibri/colibrid.pid -p /var/run/colibri/colibrid.child.pid true --config /usr/local/etc/colibri.toml --socket /tmp/x.sock --log-level debug"
got_args=$(colibri_socket=/tmp/x.sock colibri_args="--log-level debug" sh "$tmp_dir/rc-stubbed" args 2>&1)
got_reload=$(sh "$tmp_dir/rc-stubbed" reload 2>&1 | tail -n 1)
if [ "$got_args" != "$expected_args" ]; then
	fail "rc.d/colibri builds the daemon(8) command line" "expected: $expected_args" "got:      $got_args"
elif [ "$got_reload" != "kill -HUP 4242" ]; then
	fail "rc.d/colibri reload signals colibrid, not daemon(8)" "expected: kill -HUP 4242" "got:      $got_reload"
else
	ok "rc.d/colibri builds the daemon(8) command line and reload signals the child (stub rc.subr)"
fi

# --- manual pages ----------------------------------------------------------

if ! have mandoc; then
	fail "mandoc -Tlint man/*" "mandoc not found (CI installs it; it is in FreeBSD base)"
else
	for page in man/*.[1-9]; do
		if out=$(mandoc -Tlint -Wwarning "$page" 2>&1); then
			ok "mandoc -Tlint -Wwarning $page"
		else
			fail "mandoc -Tlint -Wwarning $page" "$out"
		fi
	done
fi

# --- Makefile.crates -------------------------------------------------------

if out=$(scripts/port-crates.sh --check 2>&1); then
	ok "Makefile.crates matches Cargo.lock"
else
	fail "Makefile.crates matches Cargo.lock" "$out"
fi

# --- pkg-plist against what the Makefile installs --------------------------
#
# The install set is: every [[bin]] of Cargo.toml in bin/ (cargo install),
# then the post-install target's ${MV}, ${INSTALL_MAN} (gzipped by the
# framework) and ${INSTALL_DATA} lines.  The rc script comes from
# USE_RC_SUBR and is added to the plist by the framework, so it is left out.

awk '
	/^\[\[bin\]\]/ { in_bin = 1; next }
	/^\[/ { in_bin = 0 }
	in_bin && /^name *= *"/ { n = $0; sub(/^name *= *"/, "", n); sub(/".*/, "", n); print "bin/" n }
' Cargo.toml >"$tmp_dir/cargo-bins"

# An option that adds a workspace crate to CARGO_INSTALL_PATH (FLEET adds
# bridge/) installs that crate's binaries too, listed as %%OPTION%%bin/NAME.
sed -n 's/^\([A-Z]*\)_VARS=[[:space:]]*CARGO_INSTALL_PATH+=\([a-z/]*\)$/\1 \2/p' "$port_dir/Makefile" |
	while read -r opt crate; do
		awk -v opt="$opt" '
			/^\[\[bin\]\]/ { in_bin = 1; next }
			/^\[/ { in_bin = 0 }
			in_bin && /^name *= *"/ { n = $0; sub(/^name *= *"/, "", n); sub(/".*/, "", n); print "%%" opt "%%bin/" n }
		' "$crate/Cargo.toml"
	done >>"$tmp_dir/cargo-bins"

# Join continuation lines of the Makefile, then keep post-install's commands.
awk '
	{ line = line $0 }
	/\\$/ { sub(/\\$/, "", line); next }
	{ print line; line = "" }
' "$port_dir/Makefile" | awk '
	/^[A-Za-z-]+:/ { target = $1; next }
	target == "post-install:" && /^\t/ { print }
' >"$tmp_dir/post-install"

awk -v bins="$tmp_dir/cargo-bins" -v srcs="$tmp_dir/sources" '
	BEGIN { while ((getline f < bins) > 0) installed[f] = 1 }
	function staged(p) { if (sub(/^\$\{STAGEDIR\}\$\{PREFIX\}\//, "", p)) return p; return "" }
	function source(p) { if (sub(/^\$\{WRKSRC\}\//, "", p)) print p > srcs }
	$1 == "${MV}" { from = staged($2); to = staged($3); if (from in installed) { delete installed[from]; installed[to] = 1 } else print "MV of a file not installed: " $2 > "/dev/stderr" }
	$1 == "${INSTALL_MAN}" { dir = staged($NF); for (i = 2; i < NF; i++) { source($i); n = split($i, parts, "/"); installed[dir "/" parts[n] ".gz"] = 1 } }
	$1 == "${INSTALL_DATA}" { source($2); installed[staged($3)] = 1 }
	END { for (f in installed) print f }
' "$tmp_dir/post-install" 2>"$tmp_dir/install-errors" | sort >"$tmp_dir/installed"

sed -e 's/^@sample //' -e '/^@/d' -e '/^$/d' "$port_dir/pkg-plist" | sort >"$tmp_dir/plist"

if [ -s "$tmp_dir/install-errors" ]; then
	fail "pkg-plist matches the Makefile's install steps" "$(cat "$tmp_dir/install-errors")"
elif out=$(diff -u "$tmp_dir/plist" "$tmp_dir/installed"); then
	ok "pkg-plist matches the Makefile's install steps ($(wc -l <"$tmp_dir/plist" | tr -d ' ') files)"
else
	fail "pkg-plist matches the Makefile's install steps" "$out" "(- listed in pkg-plist only, + installed by the Makefile only)"
fi

# LICENSE_FILE is checked by the framework before anything is built.
# shellcheck disable=SC2016 # ${WRKSRC} is make's, matched literally.
sed -n 's/^LICENSE_FILE=[[:space:]]*\${WRKSRC}\///p' "$port_dir/Makefile" >>"$tmp_dir/sources"

missing=""
while read -r src; do
	[ -f "$src" ] || missing="$missing $src"
done <"$tmp_dir/sources"
if [ -n "$missing" ]; then
	fail "files the port installs exist in the tree" "missing:$missing"
else
	ok "files the port installs exist in the tree"
fi

# --- sample config against colibri.toml(5) ---------------------------------

sample=dist/colibri.toml.sample
sed -n 's/^#\([a-z_]*\) = .*/\1/p' "$sample" | sort -u >"$tmp_dir/sample-keys"
undocumented=""
while read -r key; do
	grep -q "^\.It Ic $key " man/colibri.toml.5 || undocumented="$undocumented $key"
done <"$tmp_dir/sample-keys"
if [ -n "$undocumented" ]; then
	fail "every key of $sample is in colibri.toml(5)" "undocumented:$undocumented"
else
	ok "every key of $sample is in colibri.toml(5)"
fi

# --- against the built binaries --------------------------------------------

find_binary() {
	for dir in "${CARGO_TARGET_DIR:-target}/debug" "${CARGO_TARGET_DIR:-target}/release"; do
		if [ -x "$dir/$1" ]; then
			echo "$dir/$1"
			return 0
		fi
	done
	return 1
}

colibrid_bin=${COLIBRID:-$(find_binary colibrid)}
colibri_bin=${COLIBRI:-$(find_binary colibri)}

if [ -z "$colibrid_bin" ]; then
	skip "colibrid flags are in colibrid(8)" "colibrid is not built (cargo build, or set COLIBRID)"
	skip "colibrid --check-config accepts $sample" "colibrid is not built"
else
	flags=$("$colibrid_bin" --help 2>/dev/null | grep -o -- '--[a-z][a-z-]*' | grep -v -e '^--help$' -e '^--version$' | sort -u)
	if [ -z "$flags" ]; then
		skip "colibrid flags are in colibrid(8)" "$colibrid_bin --help lists no flags yet"
		skip "colibrid --check-config accepts $sample" "$colibrid_bin has no flags yet"
	else
		undocumented=""
		for flag in $flags; do
			grep -q -- "^\.Op Fl -${flag#--}\( \|$\)" man/colibrid.8 || undocumented="$undocumented $flag"
		done
		if [ -n "$undocumented" ]; then
			fail "colibrid flags are in colibrid(8)" "missing from the SYNOPSIS:$undocumented"
		else
			ok "colibrid flags are in colibrid(8)"
		fi
		sed 's/^#\([a-z_[]\)/\1/' "$sample" >"$tmp_dir/colibri.toml"
		if out=$("$colibrid_bin" --check-config --config "$tmp_dir/colibri.toml" 2>&1); then
			ok "colibrid --check-config accepts $sample"
		else
			fail "colibrid --check-config accepts $sample" "$out"
		fi
	fi
fi

if [ -z "$colibri_bin" ]; then
	skip "colibri subcommands are in colibri(1)" "colibri is not built (cargo build, or set COLIBRI)"
else
	commands=$("$colibri_bin" --help 2>/dev/null | awk '/^Commands:/ { on = 1; next } on && /^[^ ]/ { on = 0 } on && NF { print $1 }' | grep -v '^help$')
	if [ -z "$commands" ]; then
		skip "colibri subcommands are in colibri(1)" "$colibri_bin --help lists no subcommands yet"
	else
		undocumented=""
		for command in $commands; do
			grep -q "^\.It Cm $command\( \|$\)" man/colibri.1 || undocumented="$undocumented $command"
		done
		if [ -n "$undocumented" ]; then
			fail "colibri subcommands are in colibri(1)" "missing:$undocumented"
		else
			ok "colibri subcommands are in colibri(1)"
		fi
	fi
fi

echo "check-packaging: $passed ok, $failed failed, $skipped skipped${failures:+ (failed: $failures)}"
[ "$failed" -eq 0 ]
