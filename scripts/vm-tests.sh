#!/usr/bin/env bash
# VM tests: two guests on a bridge, iwarp.ko loaded in both. One "PASS name", "FAIL name" or
# "SKIP name" line per test (cargo xtask test counts them). Usage: vm-tests.sh [release|debug]
# Without QEMU or the test kernel every test is reported SKIP, loudly; under CI=true that is
# a failure, since CI must run them.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/vm-lib.sh"
flavour=${1:-release}
ko="$here/target/kmod/$flavour/iwarp.ko"
check="$here/target/release/iwarp-check"
examples="$here/target/release/examples"
TESTS=(boot-A boot-B insmod-A-with-tcp-probe insmod-B query-device-A query-device-B tcp-A-to-B
       siw-link-A mr-register-A mr-memlock-A mr-killed-process-unpins-B qp-mpa-v2-markers-one-way
       qp-mpa-v1-fallback qp-garbage-peer-refused qp-silent-peer-times-out qp-adopt-errors-A
       qp-kernel-send-to-user-level-peer verbs-errors-A verbs-markers-crc-1B-to-4MiB verbs-plain-mpa-v1
       verbs-kernel-connect verbs-64-qps-at-once fault-bad-stag fault-write-bounds fault-read-rights fault-no-recv
       fault-crc-error-from-the-wire fault-write-after-invalidate fault-other-pd
       cm-listen-reject-accept-disconnect verbs-post-to-a-stalled-peer
       verbs-killed-mid-transfer example-send-recv example-rdma-write example-rdma-read
       nothing-left-A nothing-left-B init-failure-refused
       rmmod-A rmmod-B dmesg-clean)
# What networks do (vm-lib.sh), each a test net-NAME; the debug kernel's KASAN guests are slow,
# so they run the duplication cases only.
NET_FAULTS=("${VM_NET_FAULTS[@]}")
[ "$flavour" = debug ] && NET_FAULTS=("${VM_NET_FAULTS[@]:0:2}")
for f in "${NET_FAULTS[@]}"; do TESTS+=("net-${f%%|*}"); done

pass() { echo "PASS $flavour/$1${2:+ ($2)}"; }
fail() { echo "FAIL $flavour/$1${2:+ ($2)}"; }
# check NAME CMD…: PASS if CMD succeeds.
check() {
    local name=$1
    shift
    if "$@"; then pass "$name"; else fail "$name"; fi
}

vm_start 2 "$flavour"
rc=$?
if [ $rc != 0 ]; then
    for t in "${TESTS[@]}"; do
        if [ $rc = 77 ]; then echo "SKIP $flavour/$t (no VM could run: see above)"; else fail "$t" "guests did not boot"; fi
    done
    [ $rc = 77 ] && [ "${CI:-}" != true ] && exit 0
    exit 1
fi
pass boot-A "$(cat "$VM_DIR/A/cpuinfo")"
pass boot-B "$(cat "$VM_DIR/B/cpuinfo")"

insmod_probe() {
    vm_run A "insmod $ko tcp_probe=1 && dmesg | grep -E 'iwarp: (loaded|tcp_probe)'" &&
        vm_run A "dmesg | grep -q 'tcp_probe: kernel TCP socket bound to 127.0.0.1:'"
}
check insmod-A-with-tcp-probe insmod_probe
check insmod-B vm_run B "insmod $ko && test -c /dev/iwarp"
check query-device-A vm_run A "$check query"
check query-device-B vm_run B "$check query"

tcp() {
    # The client retries until the server listens.
    vm_pair B "timeout 60 iperf3 -s -1 -p 5201" \
        A "for i in \$(seq 30); do iperf3 -c $(vm_ip B) -p 5201 -t 2 && exit 0; sleep 1; done; exit 1"
}
check tcp-A-to-B tcp
check siw-link-A vm_run A 'modprobe siw && rdma link add siw0 type siw netdev $IWARP_IF && ibv_devices | grep -w siw0'

check mr-register-A vm_run A "$check mr && $check stats-zero"
# Without CAP_IPC_LOCK (as nobody), RLIMIT_MEMLOCK applies.
check mr-memlock-A vm_run A "chmod 666 /dev/iwarp && setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all $check memlock 1024; rc=\$?; chmod 600 /dev/iwarp; exit \$rc"
killed() {
    vm_run B "$check hold 16 & pid=\$!
        for i in \$(seq 100); do $check stats-zero >/dev/null 2>&1 || break; sleep 0.1; done
        $check stats-zero >/dev/null 2>&1 && { echo 'hold never registered'; exit 1; }
        kill -9 \$pid; wait \$pid
        $check stats-zero"
}
check mr-killed-process-unpins-B killed

# qp_pair PORT B-OPTS B-EXPECT A-OPTS A-EXPECT: B accepts, A connects, both adopt their socket
# and must settle what EXPECT says.
qp_pair() {
    vm_pair B "$check accept $1 '$2' '$3'" A "$check connect $(vm_ip B) $1 '$4' '$5'"
}
check qp-mpa-v2-markers-one-way qp_pair 7001 "markers=0,crc=0,rev=2,pd=from-B" "rev=2,crc=1,rx_markers=0,tx_markers=1,peer=from-A" \
    "markers=1,crc=1,rev=2,pd=from-A" "rev=2,crc=1,rx_markers=1,tx_markers=0,peer=from-B"
check qp-mpa-v1-fallback qp_pair 7002 "markers=1,crc=0,rev=1,pd=B1" "rev=1,crc=0,rx_markers=1,tx_markers=0,peer=A1" \
    "markers=0,crc=0,rev=2,pd=A1" "rev=1,crc=0,rx_markers=0,tx_markers=1,peer=B1"
# bad_peer PORT B-OPTS ERRNO A-ROLE: B's adoption must fail with ERRNO against A's behaviour.
bad_peer() {
    vm_pair B "$check accept-fail $1 '$2' $3" A "$check $4 $(vm_ip B) $1"
}
check qp-garbage-peer-refused bad_peer 7003 "" 71 garbage    # EPROTO
check qp-silent-peer-times-out bad_peer 7004 "timeout=1000" 110 silent    # ETIMEDOUT
check qp-adopt-errors-A vm_run A "$check adopt-errors"
# The module frames an RDMA Write and a Send (markers, kernel crc32c) from a registered region;
# a user-level receiver built on the protocol core checks every FPDU and byte in the other guest.
kernel_send() {
    local port=7010 size
    for size in 1 4103 1048589; do
        vm_pair B "$check recv-user $port $size" A "$check send-kernel $(vm_ip B) $port $size" || return 1
        port=$((port + 1))
    done
}
check qp-kernel-send-to-user-level-peer kernel_send

# The data path between the two modules: every verb, random data checked byte for byte and by
# checksum in both directions, 1 B to 4 MiB, then 1024 receives posted at once.
check verbs-errors-A vm_run A "$check verbs-errors && $check stats-zero"
# verbs PORT OPTS SIZES [DEEP]: the rounds of verbs-drive, then DEEP (1024) receives at once.
verbs() {
    vm_pair B "$check verbs-serve $1 $((4 << 20)) '$2'" A "$check verbs-drive $(vm_ip B) $1 $3 ${4:-1024} '$2'"
}
check verbs-markers-crc-1B-to-4MiB verbs 7100 "markers=1,crc=1,rev=2" 1,7,4096,65549,1048576,4194304
check verbs-plain-mpa-v1 verbs 7101 "markers=0,crc=0,rev=1" 1,1500,65536,1048583
# The same rounds over a TCP connection the module makes itself (CONNECT_QP), A copying every
# payload it sends (COPY_SEND) instead of sending from its registered pages.
check verbs-kernel-connect vm_pair B "$check verbs-serve 7110 $((4 << 20)) 'markers=1,crc=1'" \
    A "$check verbs-drive $(vm_ip B) 7110 1,4096,65536,1048576 64 'markers=1,crc=1,kernel-connect=1,copy=1'"
check verbs-64-qps-at-once vm_pair B "$check many-serve 7102 64" A "$check many-drive $(vm_ip B) 7102 64"
fault() {
    vm_pair B "$check fault-serve $1 $2" A "$check fault-drive $(vm_ip B) $1 $2"
}
check fault-bad-stag fault 7103 bad-stag
check fault-write-bounds fault 7104 write-bounds
check fault-read-rights fault 7105 read-rights
check fault-no-recv fault 7106 no-recv
check fault-write-after-invalidate fault 7109 invalidated-stag
check fault-other-pd fault 7112 other-pd
check cm-listen-reject-accept-disconnect vm_pair B "$check cm-serve 7111" A "$check cm-drive $(vm_ip B) 7111"
check verbs-post-to-a-stalled-peer vm_pair B "$check stalled-peer 7113" A "$check post-to-stalled $(vm_ip B) 7113"
check fault-crc-error-from-the-wire vm_pair B "$check fault-serve 7108 crc-error" A "$check bad-frame $(vm_ip B) 7108 crc-error"
# Killing the initiator mid-transfer: its module releases everything; the responder's QP ends
# with its work flushed (so its program fails), and nothing stays pinned on either side.
killed_mid() {
    vm_submit B "$check verbs-serve 7107 $((4 << 20)) ''" || return 1
    local b=$VM_ID
    vm_run A "$check verbs-drive $(vm_ip B) 7107 $(printf '4194304,%.0s' $(seq 200))4194304 0 '' & pid=\$!
        sleep 8; kill -0 \$pid || { echo 'transfer ended before the kill'; exit 1; }
        kill -9 \$pid; wait \$pid; $check stats-zero" || return 1
    vm_wait B "$b" && { echo "B's program should have failed"; return 1; }
    vm_run B "$check stats-zero"
}
check verbs-killed-mid-transfer killed_mid
# The examples of libiwarp/examples, as a user would run them, and what they must print.
example() {
    local out
    out=$(vm_pair B "$examples/$1 server $2" A "$examples/$1 client $(vm_ip B) $2") || { echo "$out"; return 1; }
    echo "$out"
    grep -q "$3" <<<"$out"
}
check example-send-recv example send_recv 7200 "client got 36 bytes: HELLO OVER IWARP, MARKERS AND CRC ON"
check example-rdma-write example rdma_write 7201 "server's buffer now says: written straight into the server's memory"
check example-rdma-read example rdma_read 7202 "client read 43 bytes: read from the server's memory by the client"
# Each network fault under 17 rounds of about 4 MiB (an RDMA Write, a Read back, a Send and a
# Read back each: 270 MiB; each round a different size, hence different data) with markers and
# CRC, then plain, and 64 small Sends; every transfer checked by hash and byte for byte at both
# ends, and the QPs still connected at the end.
rounds=$(seq -s, 4194304 -4093 4128816)
net_fault() {
    local port=$1 spec=$2 rc=0 t=$SECONDS
    vm_netem A "$spec" && vm_netem B "$spec" || return 1
    verbs "$port" "markers=1,crc=1,rev=2" "$rounds" 64 && verbs $((port + 1)) "markers=0,crc=0,rev=2" "$rounds" 64 || rc=1
    vm_netem A && vm_netem B || rc=1
    echo "netem '$spec': $((SECONDS - t)) s"
    return $rc
}
port=7300
for f in "${NET_FAULTS[@]}"; do
    check "net-${f%%|*}" net_fault $port "${f#*|}"
    port=$((port + 2))
done
check nothing-left-A vm_run A "$check stats-zero"
check nothing-left-B vm_run B "$check stats-zero"

refused() {
    vm_run B "rmmod iwarp && ! insmod $ko inject_init_failure=1 && test ! -e /dev/iwarp && ! grep -qw iwarp /proc/modules"
}
check init-failure-refused refused
check rmmod-A vm_run A "rmmod iwarp && ! grep -qw iwarp /proc/modules && test ! -e /dev/iwarp"
check rmmod-B vm_run B "insmod $ko && rmmod iwarp && ! grep -qw iwarp /proc/modules"

if vm_stop; then pass dmesg-clean "both guests"; else fail dmesg-clean "see above"; fi
