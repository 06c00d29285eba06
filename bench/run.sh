#!/usr/bin/env bash
# Prints the criterion and cargo-bench figures in docs/PERFORMANCE.md; the
# end-to-end figures, next to C floors, come from bench/e2e.sh.
# Usage: bench/run.sh [ingest-core|dispatch|daemon|all]   (default all; ~5 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
if [ "$what" = all ] || [ "$what" = ingest-core ]; then
  cargo bench -p colibri-benches --bench ingest 2>&1 | grep -E '^[a-z_0-9]+/|time:|thrpt:'
fi
if [ "$what" = all ] || [ "$what" = dispatch ]; then
  cargo bench -p colibri-benches --bench dispatch 2>&1 | grep -E '^[a-z_0-9]+/|time:|thrpt:'
fi
if [ "$what" = all ] || [ "$what" = daemon ]; then
  cargo build --release --bin colibrid
  cargo bench -p colibri-benches --bench daemon -- all
fi
