#!/usr/bin/env bash
# cargo xtask fuzz-vm: the hostile peer (iwarp-check mutate, tools/iwarp-check/src/mutate.rs)
# against iwarp.ko between two guests: N mutated streams from SEED, each checked against the
# model by the module's side, outcomes tallied per kind of change; then nothing may be left
# pinned and dmesg must be clean. The VM suite runs a short seeded run of the same.
# Usage: fuzz-vm.sh [--streams N] [--seed S] [--debug]
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/vm-lib.sh"
n=1000 seed=$(date +%s) flavour=release
while [ $# -gt 0 ]; do
    case $1 in
        --streams) n=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --debug) flavour=debug; shift ;;
        *) echo "usage: fuzz-vm.sh [--streams N] [--seed S] [--debug]" >&2; exit 2 ;;
    esac
done
ko="$here/target/kmod/$flavour/iwarp.ko" check="$here/target/release/iwarp-check"
echo "fuzz-vm: $n streams, seed $seed, $flavour kernel"
vm_start 2 "$flavour" || exit $?
rc=0
vm_run A "insmod $ko" && vm_run B "insmod $ko" || rc=1
[ $rc = 0 ] && { vm_pair B "$check mutate-serve 7500 $n $seed" A "$check mutate $(vm_ip B) 7500 $n $seed" $((60 + n * 5)) || rc=1; }
[ $rc = 0 ] && { vm_run A "$check stats-zero" && vm_run B "$check stats-zero" || rc=1; }
vm_stop || rc=1
[ $rc = 0 ] && echo "fuzz-vm: passed (seed $seed)" || echo "fuzz-vm: FAILED (seed $seed: run again with --seed $seed)"
exit $rc
