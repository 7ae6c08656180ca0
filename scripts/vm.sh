#!/usr/bin/env bash
# cargo xtask vm: boot guests, run one command in one of them, print its output, tear down.
# Usage: vm.sh [--guests N] [--debug] [--guest NAME] [--insmod] -- COMMAND...
# Exit status: the command's, or 1 if a guest's dmesg was not clean, 77 if no VM could run.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/vm-lib.sh"
n=2 flavour=release guest=A insmod=0
while [ $# -gt 0 ]; do
    case $1 in
        --guests) n=$2; shift 2 ;;
        --debug) flavour=debug; shift ;;
        --guest) guest=$2; shift 2 ;;
        --insmod) insmod=1; shift ;;
        --) shift; break ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: vm.sh [--guests N] [--debug] [--guest NAME] [--insmod] -- COMMAND..." >&2; exit 2; }
vm_start "$n" "$flavour" || exit $?
if [ $insmod = 1 ]; then
    for ((i = 0; i < n; i++)); do
        vm_run "${VM_NAMES[$i]}" "insmod $here/target/kmod/$flavour/iwarp.ko" || { vm_stop; exit 1; }
    done
fi
vm_run "$guest" "$*"
rc=$?
vm_stop || rc=1
exit $rc
