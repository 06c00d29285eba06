#!/bin/sh
# The Markdown formatting gate: every *.md file as Prettier 3 writes it
# (.prettierrc: prose lines kept as written, code blocks left alone).
# `scripts/check-format.sh --write` formats them instead of checking.
set -eu
cd "$(dirname "$0")/.."
# Pinned: a new Prettier may format differently, and the gate must not
# move under the docs.
PRETTIER_VERSION=3.6.2
mode=--check
if [ "${1:-}" = "--write" ]; then
	mode=--write
fi
exec npx --yes "prettier@${PRETTIER_VERSION}" "$mode" '**/*.md'
