#!/usr/bin/env bash
# Everything CI does, on a fresh clone: install what is missing, build the release kernel (cached
# in /var/lib/iwarp, so a warm run skips it), then the README's test command, which builds the
# debug kernel in the background while the release suite runs. Prints each step's time. Must
# finish within 90 minutes on 2 cores cold, and should within 60. The profile of the guests
# (cargo xtask bench profile) is left to whoever studies speed: it measures nothing CI could
# compare.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=true
step() {
    local name=$1 t=$SECONDS
    shift
    echo "==> ci: $name"
    "$@"
    echo "==> ci: $name took $((SECONDS - t)) s"
}
step setup cargo xtask setup
step "release kernel" cargo xtask kernel
step "cargo xtask test" cargo xtask test
step "core benchmark ratios" cargo xtask bench core --quick
step "verbs benchmark: iwarp.ko beside siw and TCP" cargo xtask bench verbs --quick
step "verbs benchmark under network faults, one wire packet per fault" cargo xtask bench verbs --quick --faults
step "sockets benchmark: iperf3 and sockperf over the library beside TCP" cargo xtask bench sockets --quick
echo "==> ci: total $SECONDS s"
