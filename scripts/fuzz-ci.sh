#!/usr/bin/env bash
# Bounded fuzzing for CI: each cargo-fuzz target runs for FUZZ_SECONDS
# (default 30). Needs the nightly toolchain and cargo-fuzz; installs both.
# Any crash fails the run and leaves its input under fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${FUZZ_SECONDS:-30}
rustup toolchain install nightly --profile minimal >/dev/null
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz >/dev/null
run() {
  local target=$1; shift
  mkdir -p "corpus/$target"
  local seeds=()
  [ -d "seeds/$target" ] && seeds=("seeds/$target")
  echo "fuzz: $target for ${secs}s"
  cargo +nightly fuzz run -O "$target" "corpus/$target" "${seeds[@]}" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 "$@"
}
run session_log_roundtrip -max_len=4096
run request_parse
run framer_adapters -max_len=65536
echo "fuzz: every target ran ${secs}s without a crash"
