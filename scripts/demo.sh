#!/usr/bin/env bash
# cargo xtask demo (after setup and builds): two guests on a bridge, iwarp.ko loaded in both,
# QUERY_DEVICE from both, TCP between them, the module sending RDMA to the other guest, and an
# honest account of what is not built yet.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/vm-lib.sh"
ko="$here/target/kmod/release/iwarp.ko"
info="$here/target/release/iwarp-info"
check="$here/target/release/iwarp-check"

vm_start 2 release || exit 1
status=0
for g in A B; do
    echo "---- guest $g ($(vm_ip $g)): insmod iwarp.ko, then QUERY_DEVICE through libiwarp"
    vm_run "$g" "insmod $ko tcp_probe=1 && dmesg | grep 'iwarp:' && $info" || status=1
done
echo "---- TCP from A to B over the bridge (iperf3, 3 s; TCG guests, so absolute speed means little)"
vm_pair B "timeout 60 iperf3 -s -1" \
    A "set -o pipefail; for i in \$(seq 30); do iperf3 -c $(vm_ip B) -t 3 2>/dev/null | tail -4 && exit 0; sleep 1; done; exit 1" || status=1
echo "---- A's module sends a 1 MiB RDMA Write and a Send over an adopted TCP connection (markers,"
echo "     kernel crc32c); B receives with a user-level engine built on the same protocol core"
vm_pair B "$check recv-user 7100 1048576" A "$check send-kernel $(vm_ip B) 7100 1048576" || status=1
for g in A B; do vm_run "$g" "rmmod iwarp" || status=1; done
vm_stop || status=1
cat <<'MSG'

---- What works today
  * the protocol core (MPA v1/v2, markers, CRC32c, DDP, RDMAP, early placement) on the host and,
    compiled in, in iwarp.ko (it checks itself at load with the kernel's crc32c)
  * /dev/iwarp: QUERY_DEVICE, memory registration (pinned, RLIMIT_MEMLOCK-charged), queue pairs
    adopted from connected TCP sockets with the MPA exchange in the kernel, and sending Sends and
    RDMA Writes over them (see `cargo xtask test` for the checks between the two guests)
---- Not built yet
  * receiving in the kernel, RDMA Read, completion queues and mmap'd queues, the verbs benchmark
    against siw and TCP (cargo xtask bench): see README "Not built yet"
MSG
exit $status
