#!/usr/bin/env bash
# A short run of the receive-engine fuzz target over the committed corpus; new inputs go to a
# scratch directory, not into the repository. One KTAP result (cargo xtask test parses it).
# Usage: fuzz-smoke.sh [SECONDS]   (the long runs are done by hand)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/kenv.sh"
source "$here/scripts/ktap.sh"
ktap_plan 1
secs=${1:-60}
cargo_fuzz="$CACHE/cargo-fuzz/bin/cargo-fuzz"
if [ ! -x "$cargo_fuzz" ]; then
    ktap_skip fuzz-receive "cargo-fuzz missing: run 'cargo xtask setup'"
    [ "${CI:-}" = true ] && exit 1
    exit 0
fi
scratch=$(mktemp -d /tmp/iwarp-fuzz.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
cd "$here/proto/fuzz"
# cargo-fuzz needs nightly flags; the stable toolchain accepts them with RUSTC_BOOTSTRAP.
if RUSTC_BOOTSTRAP=1 "$cargo_fuzz" fuzz run --sanitizer none -a receive "$scratch" corpus/receive \
    -- -max_total_time="$secs" -print_final_stats=1 >&2; then
    ktap_pass fuzz-receive "$secs s over the committed corpus"
else
    ktap_fail fuzz-receive "crash above; artifacts in proto/fuzz/artifacts"
    exit 1
fi
