#!/usr/bin/env bash
# VM tests: two guests on a bridge, iwarp.ko loaded in both; results in KTAP (scripts/ktap.sh),
# which cargo xtask test parses. Usage: vm-tests.sh [release|debug]
# IWARP_VM_FULL=1 adds the long runs (cargo xtask test --full).
# IWARP_WIRE_KEEP=DIR keeps there the captures that tools/wire-check failed.
# IWARP_VM_TESTS=REGEX runs only the tests whose names match (while working on them; the
# boot, insmod and dmesg tests are what the others stand on); the others are reported skipped.
# CI refuses it: CI runs every test.
# Without QEMU or the test kernel every test is reported skipped, loudly; under CI=true that is
# a failure, since CI must run them.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/vm-lib.sh"
source "$here/scripts/vm-nvme.sh"
source "$here/scripts/ktap.sh"
flavour=${1:-release}
if [ "${CI:-}" = true ] && [ -n "${IWARP_VM_TESTS:-}" ]; then
    echo "vm-tests: IWARP_VM_TESTS is set under CI, which must run every test" >&2
    exit 1
fi
ko="$here/target/kmod/$flavour/iwarp.ko"
check="$here/target/release/iwarp-check"
wirecheck="$here/target/release/wire-check"
examples="$here/target/release/examples"
B=$(vm_ip B)
# Streams of the hostile peer's smoke run, connect/disconnect cycles, fuzzed ioctls and STag
# guesses of the local attacker, MiB through the sockets library (KASAN guests are slower).
MUTATED=300 CYCLES=5000 CALLS=60000 GUESSES=1000000 SOCK_MIB=64 RACES=20000
[ "${IWARP_VM_FULL:-0}" = 1 ] && CYCLES=10000 CALLS=1000000
NVME_MIB=16
[ "$flavour" = debug ] && MUTATED=70 CYCLES=200 CALLS=20000 GUESSES=100000 SOCK_MIB=4 RACES=1000 NVME_MIB=2
# The debug kernel (KASAN, lockdep, kmemleak, KFENCE, fault injection) is there for what its checkers catch on
# every path of the module that allocates, frees, pins or locks, not for volume. These tests
# add no such path to what runs there (the same verbs in other sizes or options, user space's
# own: the examples, the sockets library beyond one stream, the wire's format, timing) and run
# on the release kernel only; interop with siw too (see interop_tests). So do the sockets
# library's tests but socat's stream (the module sees an adopted connection, as in
# qp-adopt-errors) and what a common program does that once failed through the library (a
# forked reader and writer on one connection, stdio, a duplicated listener, prefork workers:
# their connections are adopted, handed over and closed from several processes, each a path
# of its own in the module; SO_REUSEPORT listeners stay plain TCP, nothing of the module's),
# the waits of qp-responder-*, and NVMe through its target's outage (its teardown with the peer
# silent is the host's nvme-rdma's; ours is the rmmod and fault-peer tests'). Volume is the
# release kernel's too: the size sweeps (verbs-markers-crc-1B-to-4MiB, verbs-plain-mpa-v1; the
# debug kernel sees markers, CRCs and revision 1 in the qp-* and fault-* tests), 64 QPs at
# once (local-qps-destroyed-while-in-use-A races QPs there), and user space's benchmarks
# (perftest, qperf) and rping: the debug kernel runs the user rings in a kill mid-transfer
# (which unpins as the killed idle process of ib-uverbs-killed-process-unpins-A does) and an
# overrun, and NVMe in the host removed mid-I/O, so fio's verified run is the release kernel's.
# So are the timing of cm-slow-requests-block-nobody and reads at the IRD (the debug kernel
# queues reads beyond it).
RELEASE_ONLY='^(tcp-A-to-B|siw-link-A|verbs-markers-every-64B|wire-fpdus-start-segments|verbs-p2p-rtr-[wr]|verbs-post-to-a-stalled-peer|example-.*|net-reorder-25pct-ipv6|fault-peer-guest-killed)$'
RELEASE_ONLY+='|^(qp-responder-waits-for-the-first-fpdu|qp-p2p-responder-waits-for-the-rtr|verbs-read-while-the-owner-writes)$'
RELEASE_ONLY+='|^(verbs-markers-crc-1B-to-4MiB|verbs-plain-mpa-v1|verbs-64-qps-at-once|ib-uverbs-rping-64KiB|ib-uverbs-perftest-.*|ib-uverbs-qperf.*)$'
RELEASE_ONLY+='|^ib-nvme-(host|target)-on-siw$|^ib-uverbs-rping-(server-to|client-of)-siw-|^ib-rdma-cm-to-siw$|^ib-nvme-target-(silent-then-back|guest-killed)$|^ib-nvme-under-net-|^ib-rdma-cm-mpa-'
RELEASE_ONLY+='|^sockets-(iperf3|sockperf|http|plain|fork|socat-forking|rules|memlock|timeouts|sendfile|zero|small|fortified|peer|close|calls|reuseport|exit)'
RELEASE_ONLY+='|^(ib-uverbs-killed-process-unpins-A|ib-nvme-over-fabrics|ib-uverbs-rping-64B|cm-slow-requests-block-nobody|verbs-reads-at-the-ird)$'
# Fault injection (failslab, fail_page_alloc) is configured in the debug kernel only.
DEBUG_ONLY='^fault-allocations-fail-in-the-module$'

# --- what the tests do; each may use the ports PORT to PORT+9, its own -------------------------

insmod_probe() {
    vm_run A "insmod $ko tcp_probe=1 && dmesg | grep -E 'iwarp: (loaded|tcp_probe)'" &&
        vm_run A "dmesg | grep -q 'tcp_probe: kernel TCP socket bound to 127.0.0.1:'"
}
tcp() {
    vm_serve B iperf3 "$PORT" "timeout 60 iperf3 -s -1 -p $PORT" && vm_run A "iperf3 -c $B -p $PORT -t 2" && vm_served B iperf3
}
# holding CMD: while a process in B holds 16 MiB of registered memory, CMD runs; then the process
# is killed, and nothing may stay pinned.
holding() {
    vm_run B "$check hold 16 & pid=\$!
        for i in \$(seq 100); do $check stats-zero >/dev/null 2>&1 || break; sleep 0.1; done
        $check stats-zero >/dev/null 2>&1 && { echo 'hold never registered'; exit 1; }
        $1
        kill -9 \$pid; wait \$pid
        $check stats-zero"
}
killed() {
    holding true
}
# rmmod while a process holds regions is refused (the open device holds the module), and the
# module stays usable.
in_use() {
    holding "rmmod iwarp && { echo 'rmmod went through while regions were registered'; exit 1; }
        grep -qw iwarp /proc/modules && $check query >/dev/null || exit 1"
}
# qp_pair B-OPTS B-EXPECT A-OPTS A-EXPECT: B accepts, A connects, both adopt their socket and
# must settle what EXPECT says.
qp_pair() {
    vm_pair B "$check accept $PORT '$1' '$2'" A "$check connect $B $PORT '$3' '$4'"
}
# bad_peer B-OPTS ERRNO A-ROLE: B's adoption must fail with ERRNO against A's behaviour.
bad_peer() {
    vm_pair B "$check accept-fail $PORT '$1' $2" A "$check $3 $B $PORT"
}
# The module frames an RDMA Write and a Send (markers, kernel crc32c) from a registered region;
# a user-level receiver built on the protocol core checks every FPDU and byte in the other guest.
kernel_send() {
    local port=$PORT size
    for size in 1 4103 1048589; do
        vm_pair B "$check recv-user $port $size" A "$check send-kernel $B $port $size" || return 1
        port=$((port + 1))
    done
}
# verbs OPTS SIZES [DEEP [PORT]]: the rounds of verbs-drive (every verb, random data checked byte
# for byte and by checksum in both directions), then DEEP (1024) receives posted at once.
# VERBS_SECS: how long the driving side may take (600 s).
verbs() {
    local port=${4:-$PORT}
    vm_pair B "$check verbs-serve $port $((4 << 20)) '$1'" A "$check verbs-drive $B $port $2 ${3:-1024} '$1'" "${VERBS_SECS:-600}"
}
fault() {
    vm_pair B "$check fault-serve $PORT $1" A "$check fault-drive $B $PORT $1"
}
# Killing the initiator mid-transfer: its module releases everything; the responder's QP ends
# with its work flushed (so its program fails), and nothing stays pinned on either side.
killed_mid() {
    vm_submit B "$check verbs-serve $PORT $((4 << 20)) ''" || return 1
    local b=$VM_ID
    vm_run A "$check verbs-drive $B $PORT $(printf '4194304,%.0s' $(seq 200))4194304 0 '' & pid=\$!
        sleep 8; kill -0 \$pid || { echo 'transfer ended before the kill'; exit 1; }
        kill -9 \$pid; wait \$pid; $check stats-zero" || return 1
    vm_wait B "$b" && { echo "B's program should have failed"; return 1; }
    vm_run B "$check stats-zero"
}
# example NAME TEXT: an example of libiwarp/examples, as a user runs it, must print TEXT.
example() {
    local out
    out=$(vm_pair B "$examples/$1 server $PORT" A "$examples/$1 client $B $PORT") || { echo "$out"; return 1; }
    echo "$out"
    grep -q "$2" <<<"$out"
}
# Each network fault (netem on both guests) under 8 rounds of about 2 MiB (an RDMA Write, a Read
# back, a Send and a Read back each: 64 MiB; each round a different size, hence different data)
# and 8 Reads of 2 MiB each way at once, then 64 small Sends; twice (192 MiB in all): with markers
# and CRC (FPDUs not aligned to segments, the default); then with CRC only, FPDUs aligned. Every transfer is
# checked by hash and byte for byte at both ends, the QPs still connected at the end, and where
# segments arrive out of order, octets placed out of order on both sides: found through markers
# after the doorbell rang in the first run, at segment starts in the second (whose segments,
# under reordering alone, are captured and checked on the wire).
net_fault() {
    local rounds rc=0 t=$SECONDS marker= aligned=
    rounds=$(seq -s, 2097152 -8191 2031664)
    # Every fault at once (SHORT=1) repeats what each fault alone checked: 2 rounds. The debug
    # kernel (KASAN, lockdep) is there for what it catches on each path, not for volume: one
    # round of 1 MiB (its 8 Reads each way at once included), and no wire check, which the
    # release kernel's run makes of the same code (one round leaves it too few segments).
    [ "${SHORT:-0}" = 1 ] && rounds=$(seq -s, 2097152 -16381 2080771)
    [ "$flavour" = debug ] && rounds=1048583
    # IWARP_VM_FULL=1 (cargo xtask test --full), release: 512 rounds of 2 to 2.5 MiB, 1.1 GiB of
    # Writes, of Sends and of Reads (each read back) per pass.
    local VERBS_SECS=600
    [ "${IWARP_VM_FULL:-0}" = 1 ] && [ "$flavour" = release ] && rounds=$(seq -s, 2097152 1021 2618883) VERBS_SECS=3600
    # Where packets are lost, the doorbell does not ring while the receive work holds the
    # socket (the work looks again when it lets go), and a busy receiver holds it through most
    # of a short run: whether it rang, or a marker was the find, is chance (all at once, B's
    # markers pass once counted 0 doorbells in 6 walks): placed at all. Reordering alone, over
    # more rounds, proves the doorbell, here and over IPv6.
    [[ $1 == *reorder* ]] && marker=,ooo=doorbell aligned=,ooo=aligned
    [[ $1 == *loss* ]] && marker=,ooo=1 aligned=,ooo=aligned
    # One round on the debug kernel is too few segments for each side of each run to be sure to
    # place some out of order (the release kernel's runs prove that): there, at least one of the
    # four must, so that the checkers saw the out-of-order path run.
    local runs=/dev/null
    [ "$flavour" = debug ] && [ -n "$marker" ] && marker= aligned= runs=$VM_DIR/net-fault.out
    : >"$runs"
    vm_netem A "$1" && vm_netem B "$1" || return 1
    verbs "markers=1,crc=1,rev=2$marker" "$rounds" 64 | tee -a "$runs" || rc=1
    # The aligned pass under reordering is captured (its first 20,000 packets) and checked on
    # the wire like wire-fpdus-start-segments: reordered segments still start with FPDUs.
    local wire=0
    [[ $1 == *reorder* && $1 != *loss* && $flavour = release ]] && wire=1 && capture "$VM_DIR/net-fault.pcap" "tcp port $((PORT + 1))" 20000
    verbs "markers=0,crc=1,rev=2,aligned=1$aligned" "$rounds" 64 $((PORT + 1)) | tee -a "$runs" || rc=1
    [ $wire = 1 ] && { captured "$VM_DIR/net-fault.pcap" $((PORT + 1)) "$WIRE_MIN" || rc=1; }
    if [ "$runs" != /dev/null ] && ! grep -qE 'placed [0-9]+ octets in order, [1-9][0-9]* out of order \([1-9]' "$runs"; then
        echo "no side of either run placed anything out of order"
        rc=1
    fi
    vm_netem A && vm_netem B || rc=1
    echo "netem '$1': $((SECONDS - t)) s"
    return $rc
}
# Out-of-order placement over IPv6 (the doorbell's IPv6 hook): B listens on [::], A connects to
# B's IPv6 address; under reordering both must place octets found through markers after the
# doorbell rang. 8 rounds of about 2 MiB, under the fault VM_NET_FAULTS names $1.
net_ipv6() {
    local rc=0 rounds opts="markers=1,crc=1,rev=2,ooo=doorbell" f spec=
    rounds=$(seq -s, 2097152 -8191 2039815)
    for f in "${VM_NET_FAULTS[@]}"; do [ "${f%%|*}" = "$1" ] && spec=${f#*|}; done
    [ -n "$spec" ] || { echo "no fault named $1"; return 1; }
    vm_netem A "$spec" && vm_netem B "$spec" || return 1
    vm_pair B "$check verbs-serve [::]:$PORT $((4 << 20)) '$opts'" A "$check verbs-drive [$(vm_ip6 B)] $PORT $rounds 64 '$opts'" || rc=1
    vm_netem A && vm_netem B || rc=1
    return $rc
}
# hostile SEED: the hostile peer's MUTATED streams from SEED against B; every Terminate B's
# module sent must have reached the peer (it closes in order, never by a reset).
hostile() {
    local out sent got
    out=$(vm_pair B "$check mutate-serve $PORT $MUTATED $1" A "$check mutate $B $PORT $MUTATED $1" 900) || { echo "$out"; return 1; }
    echo "$out"
    sent=$(sed -n 's/.*our Terminate ended \([0-9]*\) of them.*/\1/p' <<<"$out")
    got=$(sed -n 's/.*a Terminate reached us on \([0-9]*\) of them.*/\1/p' <<<"$out")
    [ -n "$sent" ] && [ "$sent" = "$got" ] || { echo "the module sent $sent Terminates, $got reached the peer"; return 1; }
}
# capture FILE FILTER [COUNT]: captures the bridge in the run's namespace into FILE (at most
# COUNT packets), in the background, once tcpdump listens; CAPTURE_PID is tcpdump's.
capture() {
    local pcap=$1 count=()
    [ -n "${3:-}" ] && count=(-c "$3")
    # A log left by an earlier capture into FILE would pass for this one's "listening on".
    rm -f "$pcap.log"
    ip netns exec "$VM_NS" tcpdump -i br0 -U -B 8192 "${count[@]}" -w "$pcap" "$2" 2>"$pcap.log" &
    CAPTURE_PID=$!
    # Under load (CI's two cores busy) tcpdump can take seconds to listen; a test that starts
    # before it does leaves an empty capture (a CI run failed so), hence the generous bound.
    for _ in $(seq 300); do grep -q "listening on" "$pcap.log" && break; sleep 0.1; done
}
# capture_stop PID: stops tcpdump PID 1.2 s after the test (libpcap hands packets over in ring
# blocks that retire after a second, and a short test stopped sooner left an empty capture twice
# in CI; immediate mode, which hands each packet over as it comes, lost packets of 1 MiB
# transfers under CI's load); CUT is --cut if it had stopped by itself at its packet bound.
capture_stop() {
    CUT=
    sleep 1.2
    kill "$1" 2>/dev/null || CUT=--cut
    wait "$1"
}
# wire_check FILE PORTS [OPTION...]: tools/wire-check on the stopped capture FILE (every FPDU
# of every connection on PORTS, markers and CRCs, and Wireshark's dissectors on every segment
# that holds whole FPDUs), passing OPTIONs on. The capture goes once checked;
# IWARP_WIRE_KEEP=DIR keeps there the captures that fail.
wire_check() {
    local pcap=$1 ports=$2 rc=0
    shift 2
    if ! "$wirecheck" "$pcap" "$ports" --tshark "$@"; then
        rc=1
        [ -n "${IWARP_WIRE_KEEP:-}" ] && mkdir -p "$IWARP_WIRE_KEEP" && mv "$pcap" "$IWARP_WIRE_KEEP/"
    fi
    rm -f "$pcap" "$pcap.log"
    return $rc
}
# captured FILE PORT NEED [SENDER SENDER-NEED]: stops and checks the capture capture() began
# (above); at least NEED % of the data segments must hold whole FPDUs from their first octet, and
# SENDER-NEED % of those address SENDER sent.
captured() {
    capture_stop "$CAPTURE_PID"
    wire_check "$1" "$2" $CUT --aligned "$3" ${4:+--aligned-from "$4" "$5"}
}
# On the wire, FPDUs start TCP segments: the bridge is captured while verbs rounds run with CRC
# only. Aligned (aligned=1), at least WIRE_MIN % of the segments must hold whole FPDUs; the same
# traffic unaligned (the default) is shown for contrast, not checked (TCP cuts that stream
# anywhere).
WIRE_MIN=99
wire_fpdus() {
    local mode rc=0 opts need
    for mode in aligned unaligned; do
        capture "$VM_DIR/wire-$mode.pcap" "tcp port $PORT"
        opts="markers=0,crc=1,rev=2" need=0
        [ $mode = aligned ] && opts+=",aligned=1" need=$WIRE_MIN
        verbs "$opts" 1,4096,65549,1048576 16 || rc=1
        captured "$VM_DIR/wire-$mode.pcap" "$PORT" "$need" || rc=1
    done
    return $rc
}
# Interop with the kernel's siw (issue 13): guest B runs siw through rdma_cm and
# tools/siw-peer, guest A iwarp.ko through iwarp-check interop-*; both follow siw-peer.c's
# script, each step checked where it lands. interop DIR SIZE A-OPTS END: DIR connect (A
# connects to siw) or accept (siw connects to A); END how the connection ends (siw-peer.c).
# siw takes IRD/ORD only from MPA revision 2, so at revision 1 its ORD is 0 and its Read is
# skipped. When siw gets our Terminate, its kernel log must name it (DDP, tagged buffer, base or
# bounds: 1, 1, 1).
# siw now and then sends an FPDU whose CRC does not match its octets, or (without CRCs) leaves
# an FPDU's payload out of a message, so that the next one's MO skips ahead (docs/testing.md; siw's
# defects), and our module rightly ends the connection. When the cell's capture shows siw's
# stream broken so, and so the failure is that, the cell says so and runs once more, its
# captures begun again; any other failure stands.
interop() {
    local log rc
    log=$(mktemp)
    interop_cell "$@" >"$log" 2>&1
    rc=$?
    cat "$log"
    if [ $rc != 0 ] && grep -qE " $(vm_ip B):[0-9]+ → [^ ]+: FPDU [0-9]+ at stream octet [0-9]+: (CRC 0x[0-9a-f]{8}, 0x[0-9a-f]{8} computed|queue [0-9]: MSN [0-9]+, MO [0-9]+; MSN [0-9]+, MO [0-9]+ expected)" "$log"; then
        echo "# siw broke its stream (a bad CRC, or an FPDU left out: its defects, see docs/testing.md): the cell runs once more"
        recapture
        interop_cell "$@"
        rc=$?
    fi
    rm -f "$log"
    return $rc
}
interop_cell() {
    local reads=1 peer="$here/target/siw-peer" rc=0 mark="iwarp-test: interop cell on port $PORT" opts=$3
    [[ $3 == *rev=1* ]] && reads=0
    vm_run B "echo '$mark' >/dev/kmsg" || return 1
    wire_both_stacks_begin "$3" || return 1
    opts+=${WIRE_ALIGNED:+,aligned=1}
    if [ "$1" = connect ]; then
        vm_serve B siw-peer "$PORT" "$peer serve $PORT $2 $reads $4" || return 1
        vm_run A "$check interop-connect $B $PORT $2 '$opts' $4" || rc=1
        vm_served B siw-peer || rc=1
    else
        vm_serve A interop "$PORT" "$check interop-serve $PORT $2 '$opts' $4" || return 1
        vm_run B "$peer connect $(vm_ip A) $PORT $2 $reads $4" || rc=1
        vm_served A interop || rc=1
    fi
    wire_both_stacks_end || rc=1
    if [ "$4" = b-terminates ]; then
        vm_run B "dmesg | sed -n '/$mark\$/,\$p' | grep 'siw: got TERMINATE. layer 1, type 1, code 1'" || rc=1
    fi
    return $rc
}
# The cell's traffic is captured (wire_both_stacks_begin OPTS) and read by wire-check in the
# cell itself (wire_both_stacks_end), so that interop() sees what siw sent. With CRCs (WIRE_ALIGNED
# is then set, and A's side must be asked for aligned=1), at least 80 % of the data segments,
# both ways, must hold whole FPDUs; of the segments iwarp.ko sent (guest A), 98 %. Measured: ours
# 100 % in every cell; siw's 86-100 %: in the 1 MiB cells siw's FPDUs of one MSS sometimes leave
# in pieces, header (16 octets), payload and CRC (4) or payload and CRC, each piece a segment.
wire_both_stacks_begin() {
    WIRE_PCAP="$VM_DIR/interop-$PORT.pcap" WIRE_ALIGNED=
    [[ $1 == *crc=1* ]] && WIRE_ALIGNED=1
    capture "$WIRE_PCAP" "tcp port $PORT" 20000
}
wire_both_stacks_end() {
    if [ -n "$WIRE_ALIGNED" ]; then captured "$WIRE_PCAP" "$PORT" 80 "$(vm_ip A)" 98; else captured "$WIRE_PCAP" "$PORT" 0; fi
}
# Rejects with private data: siw's listener rejects A's request; A's module listener rejects
# siw's. Each side must get the other's private data.
interop_rejects() {
    local rc=0
    vm_serve B siw-peer "$PORT" "$here/target/siw-peer serve-reject $PORT" || return 1
    vm_run A "$check interop-refused $B $PORT" || rc=1
    vm_served B siw-peer || rc=1
    vm_serve A interop "$((PORT + 1))" "$check interop-refuse $((PORT + 1))" || return 1
    vm_run B "$here/target/siw-peer connect-rejected $(vm_ip A) $((PORT + 1))" || rc=1
    vm_served A interop || rc=1
    return $rc
}
# Markers asked of siw (it has none): its listener refuses the MPA request, and A's adoption
# fails cleanly with ECONNREFUSED.
interop_markers() {
    vm_serve B siw-peer "$PORT" "$here/target/siw-peer serve $PORT 64 1 a-disconnects" || return 1
    vm_run A "out=\$($check interop-connect $B $PORT 64 'markers=1,crc=1,rev=2' a-disconnects 2>&1); echo \"\$out\"
        echo \"\$out\" | grep -q 'A: adopt: Connection refused'"
    local rc=$?
    vm_unserve B siw-peer >/dev/null
    return $rc
}
# Linux's own rping (librdmacm's example) on siw in guest B, unmodified, against rping's
# protocol over libiwarp in guest A (iwarp-check rping-*): rping_cell DIR SIZE CRC, DIR serve
# (rping -c connects to us; its -V compares every echo) or connect (we connect to rping -s and
# compare every echo). 100 pings; our server also checks each ping's text.
rping_cell() {
    local rc=0 opts="markers=0,crc=$3,rev=2" n=100
    wire_both_stacks_begin "$opts" || return 1
    opts+=${WIRE_ALIGNED:+,aligned=1}
    if [ "$1" = serve ]; then
        vm_serve A rping "$PORT" "$check rping-serve $PORT $2 $n '$opts'" || return 1
        vm_run B "rping -c -a $(vm_ip A) -p $PORT -S $2 -C $n -V" || rc=1
        vm_served A rping || rc=1
    else
        vm_serve B rping "$PORT" "rping -s -a 0.0.0.0 -p $PORT -S $2 -V" || return 1
        vm_run A "$check rping-connect $B $PORT $2 $n '$opts'" || rc=1
        vm_served B rping || rc=1
    fi
    wire_both_stacks_end || rc=1
    return $rc
}
# started G ID: waits (60 s) until command ID in guest G says its QP is connected.
started() {
    local _
    for _ in $(seq 600); do grep -q 'connected' "$VM_DIR/$1/out.$2" 2>/dev/null && return 0; sleep 0.1; done
    echo "guest $1 never connected"
    return 1
}
# injected SERVE DRIVE SCRIPT SECS: B runs iwarp-check SERVE, A iwarp-check DRIVE (argument
# lists); once A is connected, scripts/SCRIPT acts on their connection (port PORT) from the
# bridge, for at most SECS; both sides must then succeed (within 300 s) and leave nothing behind.
injected() {
    local a b rc=0
    vm_submit B "$check $1"
    b=$VM_ID
    vm_submit A "$check $2"
    a=$VM_ID
    started A "$a" || rc=1
    ip netns exec "$VM_NS" python3 "$VM_HERE/scripts/$3" br0 "$PORT" "$4" || rc=1
    vm_wait A "$a" 300 || rc=1
    vm_wait B "$b" 300 || rc=1
    [ $rc = 0 ] && vm_run A "$check stats-zero" && vm_run B "$check stats-zero"
}
# A TCP reset injected into a busy connection from the bridge (scripts/inject-reset.py), both
# ways: each side's QP ends, its posted work flushed, with a connection-lost event.
reset_injected() {
    injected "lost-serve $PORT" "lost-drive $B $PORT" inject-reset.py 120
}
# A segment forged on the bridge (scripts/inject-segment.py): in window, valid TCP checksum, the
# sender's next sequence number, so TCP takes its octets in place of the start of A's next FPDU.
# forged OPTS: with CRCs B's QP must end with its Terminate, nothing forged placed; without,
# the forgery shows (iwarp-check forged-*: docs/security.md says what this proves).
forged() {
    injected "forged-serve $PORT '$1'" "forged-drive $B $PORT '$1'" inject-segment.py 60
}
# The peer's whole machine dies mid-transfer: guest C is booted, serves, and is killed (its
# QEMU quit) while A writes to it. A's TCP gives up (tcp_retries2 lowered to 5 for the test,
# about 13 s), and A's QP must end with its Writes flushed and a connection-lost event.
peer_killed() {
    local a t rc=0
    vm_add C && vm_run C "insmod $ko" || return 1
    vm_submit C "$check lost-serve $PORT"
    vm_submit A "sysctl -qw net.ipv4.tcp_retries2=5 && $check lost-drive $(vm_ip C) $PORT; rc=\$?; sysctl -qw net.ipv4.tcp_retries2=15; exit \$rc"
    a=$VM_ID
    started A "$a" || rc=1
    sleep 5
    t=$SECONDS
    vm_kill C
    echo "guest C killed"
    vm_wait A "$a" 300 || rc=1
    echo "A's QP ended $((SECONDS - t)) s after guest C was killed"
    [ $rc = 0 ] && vm_run A "$check stats-zero"
}
# Memory pressure on the pinning process: in a memory cgroup of 96 MiB, a process registers
# 32 MiB and then takes memory until the limit's OOM killer ends it; another tries to register
# 256 MiB, which cannot be pinned within the limit (refused, or killed). Nothing may stay pinned.
pressure() {
    vm_run B "echo '$VM_DUMPS_BEGIN' >/dev/kmsg
        trap \"echo '$VM_DUMPS_END' >/dev/kmsg\" EXIT
        mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup
        echo +memory >/sys/fs/cgroup/cgroup.subtree_control || exit 1
        g=/sys/fs/cgroup/iwarp-pressure
        mkdir -p \$g && echo 96M >\$g/memory.max || exit 1
        bash -c \"echo \\\$\\\$ >\$g/cgroup.procs && exec $check pressure 32\"; rc=\$?
        grep oom_kill \$g/memory.events
        [ \$rc = 137 ] || { echo \"registered within the limit: exit \$rc, not killed\"; exit 1; }
        $check stats-zero || exit 1
        out=\$(bash -c \"echo \\\$\\\$ >\$g/cgroup.procs && exec $check pressure 256\" 2>&1); rc=\$?
        echo \"\$out\"
        [ \$rc = 137 ] || { [ \$rc = 1 ] && grep -q 'register 256 MiB:' <<<\"\$out\"; } || { echo \"past the limit: exit \$rc\"; exit 1; }
        echo \"past the limit: exit \$rc (1: refused, 137: killed)\"
        $check stats-zero && rmdir \$g"
}
# Allocations that fail inside the module (debug kernel: failslab and fail_page_alloc, their
# stack filter set to iwarp.ko's code near the top of the stack, so that what fails is the
# module's own calls, sleeping or not, and TCP's straight under the module's send). A clean run of A's verbs program against B's counts the octets the module allocates
# (each injector's `space`); then runs fail one allocation each, of slab objects or of pages,
# after 2, 20 and 60 % of that count, and show where (the stack dump's first frames in the
# module). A run may fail (an errno, or a flushed completion when the QP ends), but neither side
# may hang or lose a completion, and each injector must really have failed an allocation in 2 of
# its 3 runs (perhaps one with a fallback), one at least in the module's code, shown; afterwards nothing is left on either side, the tests after this one find the module
# working, and dmesg-clean finds no warning, KASAN report or leak. The stack filter looks at the
# first 7 frames (slab) or 8 (pages): the module's own calls, not TCP's deep inside a send.
alloc_faults() {
    local text size end rc=0 out p=$PORT used pct kind
    text=$(vm_run A "cat /sys/module/iwarp/sections/.text") || return 1
    size=$(readelf -SW "$ko" | sed -n 's/.*\] \.text  *PROGBITS  *[0-9a-f]*  *[0-9a-f]*  *\([0-9a-f]*\) .*/\1/p')
    [ -n "$size" ] || { echo "no .text in $ko"; return 1; }
    end=$(printf '0x%x' $((text + 0x$size)))
    echo "iwarp.ko's code: $text to $end"
    vm_run A "set -e; d=/sys/kernel/debug; mountpoint -q \$d || mount -t debugfs none \$d
        for f in \$d/failslab \$d/fail_page_alloc; do
            [ -d \$f ] || { echo \"no \$f in this kernel\"; exit 1; }
            echo 0 >\$f/probability; echo $text >\$f/require-start; echo $end >\$f/require-end
            echo N >\$f/ignore-gfp-wait; echo 2 >\$f/verbose; echo 1 >\$f/interval
            # Read back: a filter left at its default would fail allocations anywhere.
            [ \$((\$(cat \$f/require-start))) = \$(($text)) ] && [ \$((\$(cat \$f/require-end))) = \$(($end)) ] ||
                { echo \"\$f: the stack filter did not take\"; exit 1; }
        done
        echo N >\$d/fail_page_alloc/ignore-gfp-highmem; echo 0 >\$d/fail_page_alloc/min-order
        echo 7 >\$d/failslab/stacktrace-depth; echo 8 >\$d/fail_page_alloc/stacktrace-depth" || return 1
    # fault_run KIND SPACE: one run, KIND (failslab, fail_page_alloc or none) failing the first
    # allocation past SPACE octets; prints "rc RC; failslab USED FAILED; fail_page_alloc ..."
    fault_run() {
        p=$((p + 1))
        vm_serve B "faults$p" "$p" "$check verbs-serve $p 262144 ''" || return 1
        out=$(vm_run A "d=/sys/kernel/debug
            echo '$VM_DUMPS_BEGIN' >/dev/kmsg
            for f in failslab fail_page_alloc; do
                echo 2147483647 >\$d/\$f/space; echo 1 >\$d/\$f/times; echo 100 >\$d/\$f/probability
            done
            [ $1 = none ] || echo $2 >\$d/$1/space
            timeout -s KILL 200 $check verbs-drive $B $p 65536,4097,1 64 ''; rc=\$?
            echo -n \"rc \$rc\"
            for f in failslab fail_page_alloc; do
                echo 0 >\$d/\$f/probability
                echo -n \"; \$f \$((2147483647 - \$(cat \$d/\$f/space))) \$((1 - \$(cat \$d/\$f/times)))\"
            done
            echo
            echo '$VM_DUMPS_END' >/dev/kmsg
            dmesg | tac | sed '/$VM_DUMPS_BEGIN/q' | tac | grep -m2 -E '\[iwarp\]\$' | sed 's/^/failed in: /'" 300)
        echo "--- $1 past $2 (octets; pages for fail_page_alloc), A:"
        echo "$out"
        local b b_rc=0
        if grep -q 'ok: connected' <<<"$out"; then
            echo "--- B:"
            b=$(vm_served B "faults$p" 150) || b_rc=1
        else
            echo "--- B (A never connected):"
            b=$(vm_unserve B "faults$p")
        fi
        echo "$b"
        grep -q '^rc [0-9]*; failslab' <<<"$out" || { echo "A's run did not finish"; return 1; }
        grep -q '^rc 137;' <<<"$out" && { echo "A's program hung: killed after 200 s"; return 1; }
        grep -q 'still running after' <<<"$b" && { echo "B's program never ended"; return 1; }
        [ "$1" = none ] && ((b_rc)) && { echo "B's clean run failed"; return 1; }
        ! grep -hE 'completions? within' <<<"$out"$'\n'"$b" || { echo "a completion was lost"; return 1; }
    }
    fault_run none 0 && grep -q '^rc 0; failslab [0-9]* 0; fail_page_alloc [0-9]* 0$' <<<"$out" || { echo "the clean run failed"; return 1; }
    local counted=$out failed dumped=0
    for kind in failslab fail_page_alloc; do
        used=$(grep -oP "; $kind \K[0-9]+" <<<"$counted")
        echo "the clean run: $used through $kind (octets; pages for fail_page_alloc)"
        [ "$used" -gt 0 ] || { echo "nothing counted: the stack filter missed the module"; return 1; }
        failed=0
        # Runs allocate more or less (the sends' timing varies): a position may lie past a
        # run's end.
        for pct in 2 20 60; do
            fault_run $kind $((used * pct / 100)) || return 1
            grep -q "; $kind [0-9]* 1" <<<"$out" && failed=$((failed + 1))
            grep -q '^failed in: ' <<<"$out" && dumped=$((dumped + 1))
        done
        echo "$kind failed an allocation in $failed of 3 runs"
        [ $failed -ge 2 ] || rc=1
    done
    # Allocations made with __GFP_NOWARN (those with a fallback, as kvmalloc's) fail silently.
    echo "$dumped runs failed an allocation that shows where"
    [ $dumped -ge 1 ] || { echo "no failure showed the module's code"; rc=1; }
    vm_run A "$check stats-zero" && vm_run B "$check stats-zero" && return $rc
}
# Kernel memory a process makes the module allocate is charged to its memory cgroup: in a
# cgroup of 48 MiB, CQs and QPs of the largest sizes are refused with ENOMEM (iwarp-check
# charged), the cgroup's OOM killer never runs, and nothing stays behind.
charged_memcg() {
    vm_run B "mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup
        echo +memory >/sys/fs/cgroup/cgroup.subtree_control || exit 1
        g=/sys/fs/cgroup/iwarp-charged
        mkdir -p \$g && echo 48M >\$g/memory.max || exit 1
        bash -c \"echo \\\$\\\$ >\$g/cgroup.procs && exec $check charged 48\"; rc=\$?
        grep -E '^(oom|oom_kill|max) ' \$g/memory.events
        [ \$rc = 0 ] || { echo \"iwarp-check charged: exit \$rc\"; exit 1; }
        grep -q '^oom_kill 0\$' \$g/memory.events || { echo 'the cgroup OOM killer ran'; exit 1; }
        $check stats-zero && rmdir \$g"
}
refused() {
    vm_run B "rmmod iwarp && ! insmod $ko inject_init_failure=1 && test ! -e /dev/iwarp && ! grep -qw iwarp /proc/modules"
}

# The rdma link type: a device of the kernel's RDMA core per netdev, an RNIC whose one iWARP
# port follows its netdev (GID from its MAC), one device per netdev, Ethernet only; a netdev's
# removal and `rdma link delete` unregister it. The last one stays for rmmod-A to take.
ib_link() {
    vm_run A 'set -e
        want() { echo "$ $*"; out=$("$@" 2>&1); echo "$out"; }
        want rdma link add iw0 type iwarp netdev $IWARP_IF
        want rdma dev show iw0; echo "$out" | grep -q "node_type rnic"
        want rdma link show iw0/1; echo "$out" | grep -q "state ACTIVE physical_state LINK_UP netdev $IWARP_IF"
        grep -qx "4: RNIC" /sys/class/infiniband/iw0/node_type
        gid=$(cat /sys/class/infiniband/iw0/ports/1/gids/0)
        mac=$(tr -d : </sys/class/net/$IWARP_IF/address)
        echo "gid $gid, mac $mac"
        [ "$(echo "$gid" | tr -d : | cut -c1-12)" = "$mac" ]
        mpa=/sys/class/infiniband/iw0/mpa
        echo "MPA markers $(cat ${mpa}_markers), CRC $(cat ${mpa}_crc) (the module'"'"'s defaults)"
        [ "$(cat ${mpa}_markers)$(cat ${mpa}_crc)" = 11 ]
        ! echo maybe 2>&1 >${mpa}_markers || { echo "mpa_markers took maybe"; exit 1; }
        echo 0 >${mpa}_markers; [ "$(cat ${mpa}_markers)$(cat ${mpa}_crc)" = 01 ]
        echo n >${mpa}_crc; [ "$(cat ${mpa}_markers)$(cat ${mpa}_crc)" = 00 ]
        echo 1 >${mpa}_markers; echo y >${mpa}_crc; [ "$(cat ${mpa}_markers)$(cat ${mpa}_crc)" = 11 ]
        echo "MPA revision $(cat ${mpa}_rev), peer-to-peer $(cat ${mpa}_p2p)"
        [ "$(cat ${mpa}_rev)$(cat ${mpa}_p2p)" = 21 ]
        ! echo 3 2>&1 >${mpa}_rev || { echo "mpa_rev took 3"; exit 1; }
        echo 1 >${mpa}_rev; echo 0 >${mpa}_p2p; [ "$(cat ${mpa}_rev)$(cat ${mpa}_p2p)$(cat ${mpa}_markers)" = 101 ]
        echo 2 >${mpa}_rev; echo 1 >${mpa}_p2p; [ "$(cat ${mpa}_rev)$(cat ${mpa}_p2p)" = 21 ]
        ! rdma link add iw1 type iwarp netdev $IWARP_IF 2>&1 || { echo "a second device on one netdev"; exit 1; }
        ! rdma link add iw1 type iwarp netdev lo 2>&1 || { echo "a device on loopback"; exit 1; }
        ip link add iwbr0 type bridge
        want rdma link add iw1 type iwarp netdev iwbr0
        want rdma link show iw1/1; echo "$out" | grep -q "state DOWN"
        ip link del iwbr0
        for i in $(seq 50); do rdma dev show iw1 >/dev/null 2>&1 || break; sleep 0.1; done
        ! rdma dev show iw1 2>/dev/null || { echo "iw1 outlived its netdev"; exit 1; }
        want rdma link delete iw0
        ! rdma dev show iw0 2>/dev/null || { echo "iw0 outlived rdma link delete"; exit 1; }
        want rdma link add iw0 type iwarp netdev $IWARP_IF'
}

# siw and iwarp.ko never both (kmod/shim/siw_guard_shim.c): our devices carry siw's driver id,
# so that rdma-core's siw provider drives them, and siw would take them for its own. In A
# (iwarp.ko loaded first): no device of ours while siw is loaded, and siw refused while one is
# registered. In B (siw first, then iwarp.ko): no device until siw goes. Neither guest keeps
# siw (on the release kernel the interop tests loaded it).
siw_excluded() {
    local refused="grep -q 'Device or resource busy' <<<\"\$out\""
    vm_run A "set -e
        modprobe siw
        out=\$(rdma link add iw0 type iwarp netdev \$IWARP_IF 2>&1) && { echo 'a device of ours beside siw'; exit 1; }
        echo \"siw loaded, rdma link add: \$out\"; $refused
        rmmod siw
        rdma link add iw0 type iwarp netdev \$IWARP_IF
        out=\$(modprobe siw 2>&1) && { echo 'siw loaded beside a device of ours'; exit 1; }
        echo \"iw0 registered, modprobe siw: \$out\"; $refused
        ibv_devinfo -d iw0 | grep -q PORT_ACTIVE
        dmesg | grep -E 'iwarp: (siw refused|no device while siw)' | sed 's/^\[[ 0-9.]*\] //' | sort -u
        [ \$(dmesg | grep -cE 'iwarp: (siw refused|no device while siw)') -ge 2 ]
        rdma link delete iw0" || return 1
    vm_run B "set -e
        modprobe siw
        insmod $ko
        out=\$(rdma link add iw0 type iwarp netdev \$IWARP_IF 2>&1) && { echo 'a device of ours beside siw'; exit 1; }
        echo \"siw loaded before iwarp.ko, rdma link add: \$out\"; $refused
        rmmod siw
        rdma link add iw0 type iwarp netdev \$IWARP_IF
        out=\$(modprobe siw 2>&1) && { echo 'siw loaded beside a device of ours'; exit 1; }
        $refused
        rdma link delete iw0 && rmmod iwarp"
}

# Debian's libibverbs on ib-link-A's device, through rdma-core's own siw provider
# (tools/uverbs-check): the device as ibv_devinfo shows it; domains and regions.
ib_uverbs_regions() {
    vm_run A "set -e
        ibv_devices | grep -w iw0
        out=\$(ibv_devinfo -v -d iw0); grep -E 'hca_id|transport|node_guid|max_mr_size|max_qp:|max_cqe|state|link_layer' <<<\"\$out\"
        grep -q 'transport:.*iWARP' <<<\"\$out\"; grep -q 'state:.*PORT_ACTIVE' <<<\"\$out\"
        $here/target/uverbs-check regions iw0"
}
# A process holding 64 MiB registered through uverbs is killed: its region and pins go.
ib_uverbs_killed() {
    vm_run A "$here/target/uverbs-check hold iw0 64 >/tmp/hold.out & pid=\$!
        for i in \$(seq 300); do grep -q holding /tmp/hold.out && break; sleep 0.1; done
        cat /tmp/hold.out; rc=0
        rdma resource show mr | grep -w uverbs-check || rc=1
        $check stats-zero >/dev/null 2>&1 && { echo 'nothing pinned while held'; rc=1; }
        kill -9 \$pid; wait \$pid
        ! rdma resource show mr | grep -w uverbs-check || { echo 'its region outlived it'; rc=1; }
        $check stats-zero && exit \$rc"
}

# peer_begin PEER: B gets the one RDMA device its programs meet A's iw0 (ib-link-A's) with:
# an iw0 of its own (PEER iwarp) or siw0 (PEER siw, which has no markers: A's link goes
# without until peer_end PEER takes B's device away). siw's FPDUs may carry non-zero pad octets,
# which RFC 5044 has senders zero and receivers ignore: the wire check counts B's.
peer_begin() {
    case $1 in
        iwarp) vm_run B "insmod $ko && $(rdma_link iw0 iwarp)" ;;
        siw)
            WIRE_EXPECT=(--pad-ignored-from "$(vm_ip B)")
            vm_run A "echo 0 >/sys/class/infiniband/iw0/mpa_markers" && vm_run B "modprobe siw && $(rdma_link siw0 siw)"
            ;;
    esac
}
peer_end() {
    case $1 in
        iwarp) vm_run B "rdma link delete iw0 && rmmod iwarp" ;;
        siw) vm_run B "rmmod siw" && vm_run A "echo 1 >/sys/class/infiniband/iw0/mpa_markers" ;;
    esac
}
# Linux's own rping (librdmacm's example), unmodified, on iw0 in A, driven by rdma-core's siw
# provider, against rping in B on PEER's device: rping_uverbs PEER A-ROLE SIZE, A-ROLE server
# or client; 100 pings, every echo compared (-V).
rping_uverbs() {
    local rc=0 a=A b=B
    [ "$2" = client ] && a=B b=A
    peer_begin "$1" || return 1
    vm_serve $a rping "$PORT" "rping -s -a $(vm_ip $a) -p $PORT -S $3 -C 100 -V" || rc=1
    [ $rc = 0 ] && { vm_run $b "rping -c -a $(vm_ip $a) -p $PORT -S $3 -C 100 -V" || rc=1; }
    vm_served $a rping || rc=1
    peer_end "$1" || rc=1
    return $rc
}

# perftest, unmodified, with rdma_cm (-R), between iw0 in A and PEER's device in B:
# perftest_uverbs PEER A-ROLE SIZE TOOL..., A-ROLE server or client; each TOOL with 100
# iterations of SIZE octets; its result line.
perftest_uverbs() {
    local rc=0 peer=$1 a=A b=B size=$3 tool
    [ "$2" = client ] && a=B b=A
    shift 3
    peer_begin "$peer" || return 1
    for tool in "$@"; do
        local args="-R -s $size -n 100 -F -p $PORT"
        if vm_serve $a perftest "$PORT" "timeout 120 $tool $args"; then
            vm_run $b "out=\$(timeout 120 $tool $args $(vm_ip $a) 2>&1); rc=\$?; echo \"$tool: \$(awk '\$1 == $size && NF > 4' <<<\"\$out\" | tail -1)\"; [ \$rc = 0 ] || echo \"\$out\"; exit \$rc" || rc=1
            vm_served $a perftest >/dev/null || rc=1
        else
            rc=1
        fi
    done
    peer_end "$peer" || rc=1
    return $rc
}

# qperf, unmodified: it meets its peer over TCP, then connects through rdma_cm (-cm1), between
# iw0 in A (its server) and PEER's device in B: qperf_uverbs PEER TEST-ARGS. (Its
# rc_rdma_write_bw writes with immediate data, which siw's ABI cannot carry: libsiw refuses it,
# on siw as on us. Toward siw only rc_lat runs: siw refuses a QP without a send queue, which
# the passive side of qperf's bandwidth and Read tests asks for, in either role.)
#
# Debian's qperf 0.4.11 has a race of its own: its server tells the client its rdma_cm port
# before it listens there (upstream fixed it after 0.4.11, "Fix rdmacm race"), so about one
# connection in 40 under TCG meets a TCP reset, which rdma_cm reports as REJECTED. A run that
# fails so runs once more, saying why; any other failure, or a second one, fails the test.
qperf_uverbs() {
    local rc=0 out run
    peer_begin "$1" || return 1
    if vm_serve A qperf "$PORT" "timeout 200 qperf -lp $PORT"; then
        for run in 1 2; do
            out=$(vm_run B "timeout 90 qperf $(vm_ip A) -lp $PORT -cm1 -t 2 $2" 2>&1) && rc=0 || rc=1
            echo "$out"
            [ $rc = 1 ] && [ $run = 1 ] && grep -q 'unexpected event from RDMA CM: Event rejected' <<<"$out" || break
            echo "qperf's server told its port before it listened (qperf 0.4.11's race): once more"
        done
        out=$(vm_unserve A qperf)
        [ $rc = 0 ] || { echo "--- server in A:"; echo "$out"; }
    else
        rc=1
    fi
    peer_end "$1" || rc=1
    return $rc
}
# A libibverbs program killed mid-transfer (perftest's ib_write_bw in B, writing to A more than
# it could in minutes, killed a second after its QP and pinned regions appear): its QP, regions
# and pins go at once; the server in A ends; nothing is left.
ib_uverbs_killed_mid_transfer() {
    local rc=0 args="-R -d iw0 -s 65536 -n 200000 -F -p $PORT"
    peer_begin iwarp || return 1
    vm_serve A perftest "$PORT" "timeout 60 ib_write_bw $args" || rc=1
    [ $rc = 0 ] && { vm_run B "ib_write_bw $args $(vm_ip A) >/tmp/bw.out 2>&1 & pid=\$!
        live() { $check stats-zero 2>&1 | grep -q 'pinned_pages: [1-9].*queue_pairs: [1-9]'; }
        # Seconds on the debug kernel.
        for i in \$(seq 300); do live && break; kill -0 \$pid || break; sleep 0.1; done
        sleep 1
        rdma resource show qp | grep -w ib_write_bw
        kill -0 \$pid || { echo 'ib_write_bw ended before the kill:'; cat /tmp/bw.out; exit 1; }
        live || { echo 'no QP with pinned regions:'; $check stats-zero; cat /tmp/bw.out; kill -9 \$pid; exit 1; }
        kill -9 \$pid; wait \$pid; echo \"ib_write_bw killed (status \$?)\"
        ! rdma resource show qp | grep -w ib_write_bw || { echo 'its QP outlived it'; exit 1; }
        ! rdma resource show mr | grep -w ib_write_bw || { echo 'its regions outlived it'; exit 1; }
        $check stats-zero" || rc=1; }
    # The server's peer is gone: it ends, however it reports it.
    vm_served A perftest 60 | tail -3
    vm_run A "$check stats-zero" || rc=1
    peer_end iwarp || rc=1
    return $rc
}

# A libibverbs program that never polls its CQ (tools/uverbs-check overrun, in B, sending to a
# sink in A): its CQ overflows and reports CQ_ERR once, its QP ends in error, the sink's receives
# all end (received, or flushed once the QP that overran terminated the connection), and nothing
# is left pinned on either side.
ib_uverbs_overrun() {
    local rc=0
    peer_begin iwarp || return 1
    vm_serve A sink "$PORT" "$here/target/uverbs-check sink $PORT" || rc=1
    [ $rc = 0 ] && { vm_run B "$here/target/uverbs-check overrun $(vm_ip A) $PORT && $check stats-zero" || rc=1; }
    vm_served A sink || rc=1
    vm_run A "$check stats-zero" || rc=1
    peer_end iwarp || rc=1
    return $rc
}

# The kernel verbs and connections through iw_cm, through the RDMA core, on ib-link-A's device
# (kmod/check/verbs_check.c): its QPs connect to its own address.
ib_verbs() {
    vm_run A "a=\$(ip -4 -o addr show \$IWARP_IF | awk '{print \$4}' | cut -d/ -f1)
        a6=\$(ip -6 -o addr show \$IWARP_IF scope global | awk '{print \$4}' | cut -d/ -f1)
        insmod ${ko%/*}/iwarp_verbs_check.ko device=iw0 addr=\$a addr6=\$a6 port=$PORT; rc=\$?
        dmesg | grep -E 'iwarp_verbs_check: ' | sed 's/^\[[ 0-9.]*\] //'
        [ \$rc = 0 ] && rmmod iwarp_verbs_check"
}

# nvme_host G DEV T: guest G connects over its RDMA device DEV (the only RDMA link it keeps) to
# nvme_target's namespace in guest T, fio writes and verifies (CRC32C) 4 KiB random and 1 MiB
# sequential I/O, T runs $NVME_TARGET_CHECK (if set) while still connected, and G disconnects.
# On failure, both guests' kernel logs say why, and G disconnects all the same.
nvme_host() {
    local fio="fio --filename=\$dev --direct=1 --ioengine=psync --verify=crc32c --do_verify=1 --verify_state_save=0 --output-format=terse --terse-version=3"
    vm_run "$1" "set -e
        $(nvme_connect "$2" "$3" "$1")
        echo namespace \$dev over $2: \$(cat /sys/block/\${dev#/dev/}/size) sectors
        echo 'fio: job;error;read KiB/s (the verify);write KiB/s'
        out=\$($fio --name=random-4k --rw=randwrite --bs=4k --size=$((NVME_MIB / 2))M); echo \"\$out\" | cut -d';' -f3,5,7,48
        out=\$($fio --name=sequential-1m --rw=write --bs=1M --size=${NVME_MIB}M); echo \"\$out\" | cut -d';' -f3,5,7,48" &&
        vm_run "$3" "${NVME_TARGET_CHECK:-true}" && vm_run "$1" "$(nvme_disconnect "$2")" && return
    vm_run "$1" "dmesg | grep -iE 'nvme|rdma|iwarp|siw' | tail"
    vm_run "$3" "dmesg | grep -iE 'nvme|rdma|iwarp|siw' | tail"
    # Connected still, the host would try the target again long after this test.
    vm_run "$1" "$(nvme_disconnect "$2")" >/dev/null 2>&1
    return 1
}
# nvme_between A-SETUP A-DEV B-SETUP B-DEV B-TEARDOWN: after A-SETUP in A and B-SETUP in B,
# nvmet in A over its device A-DEV and nvme-rdma in B over B-DEV; then B-TEARDOWN in B.
nvme_between() {
    local NQN=nqn.2026-11.org.iwarp:nvme-$PORT rc=0
    vm_run A "$1" && vm_run B "$3" || return 1
    nvme_target A "$2" && nvme_host B "$4" A || rc=1
    nvme_target_down A "$2" || rc=1
    vm_run B "$5" || rc=1
    return $rc
}
# NVMe over Fabrics on our devices: nvmet in A over ib-link-A's iw0, nvme-rdma in B over an iw0
# of its own (then $NVME_B_SETUP in B, if set); then B unloads iwarp.ko again (as
# init-failure-refused left it).
ib_nvme() {
    nvme_between true iw0 "insmod $ko && $(rdma_link iw0 iwarp)${NVME_B_SETUP:+ && $NVME_B_SETUP}" iw0 "rdma link delete iw0 && rmmod iwarp"
}
# nvme_host_clean G: after a failed test, takes down what an NVMe host in G may have left (fio,
# a controller, nvme-rdma, iw0, iwarp.ko), so the tests after it start as they expect.
nvme_host_clean() {
    vm_run "$1" "pkill fio; nvme disconnect-all; rmmod nvme-rdma nvme-fabrics nvme-core; rdma link delete iw0; rmmod iwarp; true" >/dev/null 2>&1
}
# NVMe through an outage of its target: B's host connects to A's target over iw0 (trying again
# every second when the connection is lost); while fio writes and verifies at a steady rate, all
# of A's packets are lost for 15 s, so the target falls silent as a dead machine would: the
# host's keep-alive fails, it tears its queues down with the peer silent, and its reconnects go
# unanswered. Then the network comes back: the host must reconnect by itself (its log says so,
# so an outage that went unnoticed fails), fio's verification pass, and the host disconnect and
# unload iwarp.ko cleanly.
ib_nvme_outage() {
    local NQN=nqn.2026-11.org.iwarp:nvme-$PORT rc=0 host i
    local fio="fio --filename=\$dev --direct=1 --ioengine=psync --rate_iops=200 --verify=crc32c --do_verify=1 --verify_backlog=32 --verify_state_save=0 --output-format=terse --terse-version=3"
    vm_run B "insmod $ko && $(rdma_link iw0 iwarp)" && nvme_target A iw0 || return 1
    vm_submit B "set -e
        $(nvme_connect iw0 A B "--reconnect-delay=1 --ctrl-loss-tmo=120")
        echo 'fio: job;error;read KiB/s (the verify);write KiB/s'
        out=\$($fio --name=outage --rw=randwrite --bs=4k --size=$((NVME_MIB / 4))M); echo \"\$out\" | cut -d';' -f3,5,7,48
        dmesg | grep -E 'nvme nvme[0-9]+: (Reconnecting|Successfully reconnected)' || true
        dmesg | grep -q 'Successfully reconnected' || { echo 'no reconnect: the outage went unnoticed'; exit 1; }
        $(nvme_disconnect iw0)
        rdma link delete iw0 && rmmod iwarp"
    host=$VM_ID
    # Silence falls 3 s after fio starts (it says so first).
    for ((i = 0; i < 600; i++)); do grep -q '^fio: job' "$VM_DIR/B/out.$host" 2>/dev/null && break; sleep 0.2; done
    sleep 3
    vm_netem A "loss 100%"
    echo "A silent"
    sleep 15
    vm_netem A
    echo "A heard again"
    vm_wait B "$host" 300 || rc=1
    nvme_target_down A iw0 || rc=1
    [ $rc = 0 ] || { vm_run B "dmesg | grep -iE 'nvme|rdma|iwarp' | tail -20"; nvme_host_clean B; }
    return $rc
}
# Run in the target (NVME_TARGET_CHECK) while the host is connected: its QPs, as `rdma resource
# show qp -dd` counts them, sent more octets by reference (read data, from nvmet's own pages)
# than copied (command responses). Only without markers and CRCs: with either, each FPDU (that
# fits a page) is copied whole.
SENT_BY_REFERENCE="rdma -dd resource show qp link iw0/1 | grep -oE 'sent_(zero_copy|copied) [0-9]+' |
    awk '{ n[\$1] += \$2 } END { printf \"target QPs sent %d octets by reference, %d copied\\n\", n[\"sent_zero_copy\"], n[\"sent_copied\"];
        exit !(n[\"sent_zero_copy\"] > n[\"sent_copied\"]) }'"
# NVMe over Fabrics on our devices under a network fault on both guests (VM_NET_FAULTS names
# it), with a quarter of ib-nvme-over-fabrics' volume and neither markers nor CRCs: fio's
# verification must pass through what TCP recovers and retransmits from nvmet's own pages
# (SENT_BY_REFERENCE), and what iwarp.ko places out of order (reordering; FPDUs aligned to
# segments), under a real ULP's fast-registered regions.
ib_nvme_net() {
    local spec= f rc=0
    for f in "${VM_NET_FAULTS[@]}"; do [ "${f%%|*}" = "$1" ] && spec=${f#*|}; done
    [ -n "$spec" ] || { echo "no fault named $1"; return 1; }
    vm_netem A "$spec" && vm_netem B "$spec" || { vm_netem A; vm_netem B; return 1; }
    echo "netem on both guests: $spec"
    local iw=/sys/class/infiniband/iw0 was m c
    was=$(vm_run A "cat $iw/mpa_markers $iw/mpa_crc" | tr '\n' ' ') || rc=1
    local plain="echo 0 >$iw/mpa_markers && echo 0 >$iw/mpa_crc"
    vm_run A "$plain" || rc=1
    NVME_MIB=$((NVME_MIB / 4)) NVME_B_SETUP=$plain NVME_TARGET_CHECK=$SENT_BY_REFERENCE ib_nvme || rc=1
    read -r m c <<<"$was"
    vm_run A "echo $m >$iw/mpa_markers && echo $c >$iw/mpa_crc" || rc=1
    vm_netem A && vm_netem B || rc=1
    return $rc
}
# NVMe with its target's machine gone for good: a guest of its own (the next one free) exports
# the namespace over its iw0, B's host writes to it over B's, and the guest is killed mid-I/O
# (power lost: no FIN, no reset). The host must notice by itself (keep-alive), give up after its
# controller-loss timeout (each reconnect fails at the MPA exchange's 10 s deadline), fail fio's
# I/O, remove the controller and unload iwarp.ko: nothing waits on the dead peer or stays behind.
ib_nvme_target_killed() {
    local NQN=nqn.2026-11.org.iwarp:nvme-$PORT rc=0 g=${VM_NAMES[$VM_COUNT]} host i t
    vm_add "$g" || return 1
    # Failing before the kill, the guest goes anyway, and B is left as the next test expects.
    if ! { vm_run "$g" "insmod $ko && $(rdma_link iw0 iwarp)" && nvme_target "$g" iw0 && vm_run B "insmod $ko && $(rdma_link iw0 iwarp)"; }; then
        vm_kill "$g"
        nvme_host_clean B
        return 1
    fi
    vm_submit B "set -e
        $(nvme_connect iw0 "$g" B "--keep-alive-tmo=2 --reconnect-delay=1 --ctrl-loss-tmo=2")
        fio --filename=\$dev --allow_file_create=0 --direct=1 --ioengine=libaio --iodepth=16 --rw=randwrite --bs=4k --size=64M --time_based --runtime=300 --name=killed >/tmp/killed.out 2>&1 & f=\$!
        ios() { awk '{ print \$1 + \$5 }' /sys/block/\${dev#/dev/}/stat; }
        for i in \$(seq 300); do [ \$(ios) -gt 200 ] && break; sleep 0.1; done
        echo \"busy: \$(ios) I/Os done on \$dev\"; [ \$(ios) -gt 200 ]
        while [ ! -e $VM_DIR/B/killed.$PORT ]; do sleep 0.1; done; t=\$SECONDS
        if wait \$f; then echo 'fio ran on without its target'; exit 1; fi
        echo \"fio failed \$((SECONDS - t)) s after, as it must: \$(grep -m1 -oE 'err=[ 0-9]+[^,]*' /tmp/killed.out)\"
        for i in \$(seq 600); do ls /dev/nvme[0-9]* >/dev/null 2>&1 || break; sleep 0.1; done
        ! ls /dev/nvme[0-9]* 2>/dev/null || { echo 'the controller outlived its loss timeout'; exit 1; }
        echo \"the controller gone \$((SECONDS - t)) s after\"
        dmesg | grep -E 'nvme nvme[0-9]+: ' | tail -12
        rmmod nvme-rdma nvme-fabrics nvme-core
        rdma link delete iw0 && rmmod iwarp"
    host=$VM_ID
    for ((i = 0; i < 600; i++)); do grep -q '^busy' "$VM_DIR/B/out.$host" 2>/dev/null && break; sleep 0.2; done
    vm_kill "$g"
    echo "guest $g killed"
    # B's directory is the guest's too; B runs one command at a time.
    touch "$VM_DIR/B/killed.$PORT"
    vm_wait B "$host" 300 || { rc=1; vm_run B "dmesg | grep -iE 'nvme|rdma|iwarp' | tail -20"; nvme_host_clean B; }
    return $rc
}
# The host unloads iwarp.ko while connected and busy: the RDMA core removes the device under
# nvme-rdma, which deletes its controller; fio's I/O fails, the module goes, no namespace or
# controller stays behind, and the target in A sees its host leave.
ib_nvme_rmmod_host() {
    local NQN=nqn.2026-11.org.iwarp:nvme-$PORT rc=0
    vm_run B "insmod $ko && $(rdma_link iw0 iwarp)" && nvme_target A iw0 || return 1
    vm_run B "set -e
        $(nvme_connect iw0 A B)
        fio --filename=\$dev --allow_file_create=0 --direct=1 --ioengine=libaio --iodepth=16 --rw=randrw --bs=4k --size=64M --time_based --runtime=120 --name=busy >/tmp/busy.out 2>&1 & f=\$!
        # Busy means I/O done on the namespace (its completed reads and writes), not fio started.
        ios() { awk '{ print \$1 + \$5 }' /sys/block/\${dev#/dev/}/stat; }
        for i in \$(seq 300); do [ \$(ios) -gt 200 ] && break; sleep 0.1; done
        kill -0 \$f || { echo 'fio ended before rmmod'; cat /tmp/busy.out; exit 1; }
        echo \"\$(ios) I/Os done on \$dev\"; [ \$(ios) -gt 200 ]
        t=\$SECONDS
        rmmod iwarp
        echo \"rmmod iwarp returned after \$((SECONDS - t)) s, the host connected and busy\"
        grep -qw iwarp /proc/modules && { echo 'iwarp.ko still loaded'; exit 1; }
        if wait \$f; then echo 'fio ran on without its device'; exit 1; fi
        echo \"fio failed, as it must: \$(grep -m1 -oE 'err=[ 0-9]+[^,]*' /tmp/busy.out)\"
        ! ls /dev/nvme[0-9]* 2>/dev/null || { echo 'a controller outlived its device'; exit 1; }
        rmmod nvme-rdma nvme-fabrics nvme-core" || { rc=1; nvme_host_clean B; }
    nvme_target_down A iw0 || rc=1
    return $rc
}
# rdma_cm_between A-DEV B-DEV B-SETUP B-TEARDOWN: rdma_cm from the kernel between the guests
# (kmod/check/cm_check.c), as kernel services connect: after B-SETUP in B, a server in A on its
# device A-DEV, a client in B on B-DEV, each found by address; then B-TEARDOWN in B. B's
# first request is rejected with private data, its second accepted with private data, a Send is
# answered, and B's disconnect reaches both. Each side's checks print as KTAP lines.
rdma_cm_between() {
    local cm=${ko%/*}/iwarp_cm_check.ko mark="iwarp-test: rdma_cm $PORT" rc=0
    local log="dmesg | sed -n '/$mark/,\$p' | grep 'iwarp_cm_check: ' | sed 's/^\[[ 0-9.]*\] //'"
    # cm_check_in ROLE DEV: the check as ROLE on DEV, its KTAP lines; unloaded if it passed.
    cm_check_in() {
        echo "echo '$mark' >/dev/kmsg; insmod $cm role=$1 device=$2 addr=$(vm_ip A) port=$PORT; rc=\$?
            $log; [ \$rc = 0 ] && rmmod iwarp_cm_check"
    }
    vm_run B "$3" || return 1
    if vm_serve A cm-check $PORT "$(cm_check_in server "$1")"; then
        vm_run B "$(cm_check_in client "$2")" || rc=1
        echo "--- server in A:"
        vm_served A cm-check 300 || rc=1
    else
        rc=1
    fi
    vm_run B "$4" || rc=1
    return $rc
}
# The links' defaults: revision 2, peer-to-peer mode (an RTR message first), as the capture shows.
ib_rdma_cm() {
    WIRE_EXPECT=(--mpa-rev 2 --p2p 1)
    rdma_cm_between iw0 iw0 "insmod $ko && $(rdma_link iw0 iwarp)" "rdma link delete iw0 && rmmod iwarp"
}
# The same with other MPA options, which the capture shows (WIRE_EXPECT): A's link asks for
# revision 1, B's for peer-to-peer mode, which needs revision 2 (A's answer wins: revision 1);
# then neither link asks for peer-to-peer mode. A's link is reset after.
ib_rdma_cm_mpa() {
    local rc=0 a=$1 b=$2 undo=$3
    WIRE_EXPECT=("${@:4}")
    vm_run A "$a" || return 1
    rdma_cm_between iw0 iw0 "insmod $ko && $(rdma_link iw0 iwarp) && $b" "rdma link delete iw0 && rmmod iwarp" || rc=1
    vm_run A "$undo" || rc=1
    return $rc
}
# The same toward siw, markers off on A's iw0 (siw refuses them; set here, not left to
# ib-nvme-host-on-siw, so that the test runs alone too). A guest has siw only while it has no
# device of ours (siw_excluded).
ib_rdma_cm_to_siw() {
    vm_run A "echo 0 >/sys/class/infiniband/iw0/mpa_markers" || return 1
    rdma_cm_between iw0 siw0 "modprobe siw && $(rdma_link siw0 siw)" "rmmod siw"
}
# The same between siw and us (markers off on our side, the link's mpa_markers: siw has none),
# each in either role. At the end A has iw0 back for rmmod-A.
ib_nvme_host_on_siw() {
    nvme_between "echo 0 >/sys/class/infiniband/iw0/mpa_markers" iw0 \
        "modprobe siw && $(rdma_link siw0 siw)" siw0 "rmmod siw"
}
ib_nvme_target_on_siw() {
    local rc=0
    nvme_between "rdma link delete iw0 && modprobe siw && $(rdma_link siw0 siw)" siw0 \
        "insmod $ko && $(rdma_link iw0 iwarp) && echo 0 >/sys/class/infiniband/iw0/mpa_markers" iw0 "rdma link delete iw0 && rmmod iwarp" || rc=1
    vm_run A "rmmod siw && $(rdma_link iw0 iwarp)" || rc=1
    return $rc
}

# --- sockets over iWARP: unmodified Debian programs under the preload library ---------------
preload="$here/target/release/libiwarp_preload.so"
# The library's environment for this test's ports; it says on stderr what it upgraded.
# socks: the library's environment for a test's ends (SOCKS_EXTRA: more of it).
socks() { echo "LD_PRELOAD=$preload IWARP_SOCKETS=$PORT-$((PORT + 9)) IWARP_SOCKETS_LOG=1 ${SOCKS_EXTRA:-}"; }
# same_hashes OUTPUT: OUTPUT holds two SHA-256 lines (what was sent, what arrived), equal.
same_hashes() {
    local h
    h=$(grep -oE '^[0-9a-f]{64}' <<<"$1")
    [ "$(wc -l <<<"$h")" = 2 ] && [ "$(sort -u <<<"$h" | wc -l)" = 1 ] || { echo "the hashes differ"; return 1; }
}
# socat_through MIB SERVER-ENV: MIB MiB of random octets from A (with the library) to B (in
# SERVER-ENV) through socat, each side printing its SHA-256; all output in SOCAT_OUT.
socat_through() {
    local rc=0
    # Served, so that A connects only once B's socat listens (a slow guest's comes up late).
    vm_serve B socat "$PORT" "$2 timeout 600 socat -u TCP-LISTEN:$PORT,reuseaddr - | sha256sum" || return 1
    SOCAT_OUT=$(vm_run A "head -c $(($1 << 20)) /dev/urandom >/tmp/sock.bin && sha256sum </tmp/sock.bin && $(socks) timeout 600 socat -u /tmp/sock.bin TCP:$B:$PORT; rc=\$?; rm -f /tmp/sock.bin; exit \$rc" 900) || rc=1
    if ((rc)); then
        # The server's side of the story, ended (it may have failed first).
        SOCAT_OUT+=$'\n--- server in B:\n'$(vm_unserve B socat)
    else
        SOCAT_OUT+=$'\n'$(vm_served B socat 300) || rc=1
    fi
    echo "$SOCAT_OUT"
    return $rc
}
# sock_hash MIB: MIB MiB through socat, both sides upgraded, compared by SHA-256.
sock_hash() {
    socat_through "$1" "$(socks)" && same_hashes "$SOCAT_OUT" && upgraded 2 "$SOCAT_OUT"
}
# sock_iperf3: iperf3 both ways with four streams (a control connection and four data
# connections each time), every connection upgraded.
sock_iperf3() {
    local out dir
    for dir in "" -R; do
        out=$(vm_pair_on B $PORT "$(socks) timeout 120 iperf3 -s -1 -p $PORT" A "$(socks) timeout 120 iperf3 -c $B -p $PORT -t 2 -P 4 $dir" 300) ||
            { echo "$out"; return 1; }
        grep -E 'SUM.*(sender|receiver)|upgraded' <<<"$out"
        grep -qE 'SUM.* [1-9][0-9.]* [MG]bits/sec.*receiver' <<<"$out" || { echo "iperf3 ${dir:-forward}: no throughput"; return 1; }
        upgraded 10 "$out" || return 1
    done
}
# sock_sockperf: sockperf's ping-pong and throughput runs against one server.
sock_sockperf() {
    local out rc=0
    vm_serve B sockperf "$PORT" "$(socks) sockperf sr --tcp -i $B -p $PORT" || return 1
    out=$(vm_run A "$(socks) timeout 60 sockperf pp --tcp -i $B -p $PORT -m 14 -t 2 && $(socks) timeout 60 sockperf tp --tcp -i $B -p $PORT -m 1400 -t 2") || rc=1
    grep -E 'Summary|percentile 50.000|upgraded|rror' <<<"$out"
    grep -q 'Summary: Latency is' <<<"$out" && grep -q 'Summary: Message Rate is' <<<"$out" || rc=1
    upgraded 2 "$out" || rc=1
    out=$(vm_unserve B sockperf)
    upgraded 2 "$out" || rc=1
    return $rc
}
# sock_http: python3's http.server, with curl fetching a 4 MiB file by hash.
sock_http() {
    local out
    vm_run B "mkdir -p /tmp/www && head -c 4M /dev/urandom >/tmp/www/f && sha256sum </tmp/www/f" || return 1
    vm_serve B http "$PORT" "cd /tmp/www && $(socks) exec python3 -m http.server $PORT --bind $B" || return 1
    out=$(vm_run A "$(socks) timeout 60 curl -sS http://$B:$PORT/f | sha256sum")
    echo "$out"
    local want got
    want=$(vm_run B "sha256sum </tmp/www/f") got=$(grep -E '^[0-9a-f]{64}' <<<"$out")
    out=$(vm_unserve B http)
    [ -n "$want" ] && [ "$want" = "$got" ] || { echo "curl's copy differs; the server said:"; echo "$out"; vm_run A "ss -tni"; return 1; }
    upgraded 1 "$out"
}
# sock_plain_peer: a server without the library; the client (with it) must get plain TCP.
sock_plain_peer() {
    socat_through 16 "" && same_hashes "$SOCAT_OUT" && upgraded 0 "$SOCAT_OUT"
}
# sock_fork_split: at both ends a forked child writes while the parent reads (sockets-fork.py
# split); what each end sent is what the other read.
sock_fork_split() {
    local out
    out=$(vm_pair B "$(socks) timeout 120 python3 $here/scripts/sockets-fork.py split $PORT" \
        A "$(socks) timeout 120 python3 $here/scripts/sockets-fork.py send $B $PORT $1 split" 300) || { echo "$out"; return 1; }
    echo "$out"
    local h
    for h in "client server" "server client"; do
        set -- $h
        [ -n "$(sent_by "$1" "$out")" ] && [ "$(sent_by "$1" "$out")" = "$(read_by "$2" "$out")" ] || { echo "what the $1 sent is not what the $2 read"; return 1; }
    done
    upgraded 2 "$out"
}
sent_by() { grep -oP "^$1 sent \K[0-9a-f]{64}" <<<"$2"; }
read_by() { grep -oP "^$1 read \K[0-9a-f]{64}" <<<"$2"; }
# py_ends NAME SERVE MIB [MODE]: scripts/sockets-NAME.py's two ends, both with the library:
# `SERVE PORT` in B, `send B PORT MIB [MODE]` in A; both print the hash of the stream, which
# must agree, and both connections must be upgraded (PY_ENDS_UPGRADED: how many ends, if the
# ends make more than one connection). The client starts once the server listens: one that
# asked before the server's answerer was there, and connected just after it listened, would
# stay plain TCP (rightly: the server's library had not agreed).
py_ends() {
    local out script="$here/scripts/sockets-$1.py"
    out=$(vm_pair_on B "$PORT" "$(socks) timeout 120 python3 $script $2 $PORT" \
        A "$(socks) timeout 120 python3 $script send $B $PORT $3 ${4:-}" 300) || { echo "$out"; return 1; }
    echo "$out"
    same_hashes "$out" && upgraded "${PY_ENDS_UPGRADED:-2}" "$out"
}
# hash_server NAME PORT: in B, with the library, socat forking per connection (each child forks
# again, for sha256sum) answers every connection with the hash of what it received.
hash_server() {
    vm_serve B "$1" "$2" "$(socks) exec socat TCP-LISTEN:$2,reuseaddr,fork SYSTEM:sha256sum"
}
# hash_clients MIB ENV PORT...: in A, at once, MIB MiB of random octets to B's hash server at
# each PORT, socat run in ENV; prints "sent HASH got HASH" per port, and ENV's own output.
hash_clients() {
    local mib=$1 env=$2
    shift 2
    vm_run A "n=0; for p in $*; do n=\$((n + 1)); head -c ${mib}M /dev/urandom >/tmp/hash\$n.bin; done
        n=0; for p in $*; do n=\$((n + 1)); ( $env timeout 120 socat -t 60 - TCP:$B:\$p </tmp/hash\$n.bin >/tmp/hash\$n.got ) & done; wait
        n=0; for p in $*; do n=\$((n + 1)); echo \"sent \$(sha256sum </tmp/hash\$n.bin | cut -c1-64) got \$(cut -c1-64 </tmp/hash\$n.got)\"; done
        rm -f /tmp/hash*.bin /tmp/hash*.got" 300
}
# hashes_back N OUTPUT: OUTPUT has N clients whose hash came back right.
hashes_back() {
    local good
    good=$(grep -cE '^sent ([0-9a-f]{64}) got \1$' <<<"$2")
    echo "$good of $1 hashes came back right"
    [ "$good" = "$1" ]
}
# sock_fork_server: a server forking per connection serves three clients at once.
sock_fork_server() {
    local out
    hash_server forks "$PORT" || return 1
    out=$(hash_clients 2 "$(socks)" $PORT $PORT $PORT)
    echo "$out"
    out+=$'\n'$(vm_unserve B forks)
    hashes_back 3 "$out" && upgraded 6 "$out"
}
# sock_rules_file: the client's rules from a file: its first rule leaves B's first port to
# TCP, its second names the second port by subnet; both servers offer the upgrade.
sock_rules_file() {
    local out p2=$((PORT + 1))
    hash_server rules1 "$PORT" && hash_server rules2 "$p2" || return 1
    vm_run A "printf '# test rules\\ntcp connect $B:$PORT\\niwarp connect 10.77.0.0/24:$PORT-$p2\\n' >/tmp/rules.$PORT" || return 1
    out=$(hash_clients 1 "LD_PRELOAD=$preload IWARP_SOCKETS_CONF=/tmp/rules.$PORT IWARP_SOCKETS_LOG=1" $PORT $p2)
    echo "$out"
    hashes_back 2 "$out" && upgraded 1 "$out" || return 1
    out=$(vm_unserve B rules1)
    upgraded 0 "$out" || { echo "$out"; return 1; }
    out=$(vm_unserve B rules2)
    upgraded 1 "$out" || { echo "$out"; return 1; }
}
# sock_memlock: an unprivileged client whose RLIMIT_MEMLOCK (6 MiB) holds one connection's
# buffers opens two at once to a hash server (sockets-memlock.py): the first is upgraded, the
# second stays plain TCP (the library does not ask), both intact.
sock_memlock() {
    local out rc=0
    hash_server memlock "$PORT" || return 1
    out=$(vm_run A "chmod 666 /dev/iwarp; $(socks) prlimit --memlock=6291456:6291456 setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all timeout 120 python3 $here/scripts/sockets-memlock.py $B $PORT; rc=\$?; chmod 600 /dev/iwarp; exit \$rc" 300) || rc=1
    echo "$out"
    hashes_back 2 "$out" && upgraded 1 "$out" || rc=1
    out=$(vm_unserve B memlock)
    upgraded 1 "$out" || { echo "$out"; rc=1; }
    return $rc
}
# sock_pollout: SO_RCVTIMEO and SO_SNDTIMEO are kept; a non-blocking writer waits with poll,
# select and epoll, level- and edge-triggered (each set mixing the upgraded socket with a pipe),
# against a slow reader: a socket reported writable always takes a write (edge-triggered, the
# writer is woken again after each EAGAIN), and the pipe's ticks are seen.
sock_pollout() {
    local mode
    for mode in poll select epoll epoll-et ppoll pselect epoll_pwait2; do
        py_ends pollout serve 4 $mode || return 1
    done
}
# sock_gather: sendfile (at offsets, and from the file's own offset) and sendmsg with many
# small vectors, compared by hash.
sock_gather() {
    py_ends gather serve 16
}
# sock_stdio: a client on stdio (fdopen, fputs, fgets) over an upgraded socket, its raw read(2)
# and dprintf refused with EINVAL; the server echoes, both compare by hash.
sock_stdio() {
    py_ends stdio serve 0.4
}
# sock_semantics: socket calls whose meaning must be TCP's or a clear errno (sockets-semantics.py),
# both ends checking, the stream compared by hash.
sock_semantics() {
    PY_ENDS_UPGRADED=4 py_ends semantics serve 0
}
# sock_liar: a peer of the library's that lies in its Immediate Data (iwarp-check sockets-liar,
# one connection per case, each an honest message, the lie, an honest message) toward a server
# through the library (sockets-liar.py): every stream delivers the first message and nothing
# after the lie, then ends.
sock_liar() {
    local out rc=0 case
    vm_serve B liar "$PORT" "$(socks) timeout 200 python3 $here/scripts/sockets-liar.py $PORT 5" || return 1
    for case in past-the-ring unknown-kind after-the-end credits data-with-credits; do
        vm_run A "timeout 60 $check sockets-liar $B $PORT $case" 90 || rc=1
    done
    out=$(vm_served B liar 120) || rc=1
    echo "$out"
    upgraded 5 "$out" || rc=1
    return $rc
}
# sock_dup_listener: a server accepts twice on the last of three duplicates of its listener,
# with the original open, then closed; both connections are upgraded on both sides.
sock_dup_listener() {
    PY_ENDS_UPGRADED=4 py_ends dup-listener serve 4
}
# sock_prefork: a master listens, two forked workers accept (sockets-prefork.py): the worker
# that accepts finds the question the master answered, so four connections are upgraded on
# both sides. sock_reuseport: two processes listen on one port with SO_REUSEPORT: the library
# leaves their connections plain TCP (none upgraded), each stream intact.
sock_prefork() {
    PY_ENDS_UPGRADED=8 py_ends prefork prefork 4
}
sock_reuseport() {
    PY_ENDS_UPGRADED=0 py_ends prefork reuseport 4
}
# sock_close: a server closes as soon as its answer (3 MiB, more than the client's ring) is
# written, on a link of 20 Mbit/s (netem on B): its last octets are still on the way when the
# client, reading, hands credits back; every octet must arrive, three connections
# (sockets-close.py).
sock_close() {
    local out rc=0
    vm_netem B "rate 20mbit" || return 1
    out=$(PY_ENDS_UPGRADED=6 py_ends close serve 3) || rc=1
    vm_netem B || rc=1
    echo "$out"
    return $rc
}
# sock_exit: a server answers (2,000 lines, then 1 MiB) and exits without closing, through the
# C library's exit (sockets-exit.py): the client reads all of it, then EOF, as over TCP.
sock_exit() {
    PY_ENDS_UPGRADED=2 py_ends exit serve 1
}
# sock_close_held: the same, with A's receive work (all of it: rx_callback_max=0) holding the
# socket lock 20 ms after each read (inject_receive_hold_us), so the server's last octets and
# its close reach A while the lock is held and wait in TCP's backlog: the stream must still end
# after every octet, not when the FIN is seen.
sock_close_held() {
    local rc=0
    vm_run A "rmmod iwarp && insmod $ko rx_callback_max=0 inject_receive_hold_us=20000" || return 1
    sock_close || rc=1
    vm_run A "rmmod iwarp && insmod $ko" || rc=1
    return $rc
}
# sock_coalesce: writes of 100 octets, 256 KiB of them, faster than a link of 256 kbit/s
# (netem on A's side) takes them (the debug kernel's sender makes about 600 a second): they
# must be coalesced, the sender's library counting at close at least two writes per data
# message; compared by hash.
sock_coalesce() {
    local out rc=0 counts
    vm_netem A "rate 256kbit" || return 1
    out=$(py_ends coalesce serve 0.25) || rc=1
    vm_netem A || rc=1
    echo "$out"
    counts=$(sed -n 's/.*connection closed: \([0-9]*\) writes sent in \([0-9]*\) data messages.*/\1 \2/p' <<<"$out" | sort -n | tail -1)
    echo "the sender's writes and data messages: ${counts:-none logged}"
    [ $rc = 0 ] && [ -n "$counts" ] && awk -v c="$counts" 'BEGIN { split(c, n, " "); exit !(n[1] >= 2 * n[2] && n[2] > 0) }'
}
# sock_zero_copy: without markers and CRCs, blocking writes of 64 KiB and more go from the
# program's buffer, which it refills as soon as each write returns (sockets-zerocopy.py);
# compared by hash, with most of those octets sent by zero copy as iwarp.ko counts them.
sock_zero_copy() {
    SOCKS_EXTRA=IWARP_SOCKETS_MPA=plain py_ends zerocopy serve 48
}
# sock_fortified: a reader built with _FORTIFY_SOURCE (tools/sockets-fortified), whose reads
# and polls are the C library's __read_chk, __recv_chk and __poll_chk, takes 32 MiB from socat
# in chunks of 1000 octets (so each message is read in several parts), compared by hash.
sock_fortified() {
    local bin=$here/target/sockets-fortified out
    nm -D "$bin" | grep -qw __read_chk && nm -D "$bin" | grep -qw __recv_chk && nm -D "$bin" | grep -qw __poll_chk ||
        { echo "$bin does not call the fortified functions"; return 1; }
    vm_run B "head -c 16M /dev/urandom >/tmp/fortified.bin && sha256sum </tmp/fortified.bin" >/dev/null || return 1
    vm_serve B fortified "$PORT" "$(socks) exec socat -u OPEN:/tmp/fortified.bin TCP-LISTEN:$PORT,reuseaddr" || return 1
    out=$(vm_run A "$(socks) timeout 300 $bin $B $PORT 1000 | sha256sum" 400)
    echo "$out"
    out+=$'\n'$(vm_unserve B fortified; vm_run B "sha256sum </tmp/fortified.bin; rm -f /tmp/fortified.bin")
    same_hashes "$out" && upgraded 2 "$out"
}
# sock_peer_killed: B's reader is killed mid-stream; A's writer must fail soon, not hang.
sock_peer_killed() {
    local out t
    vm_serve B reader "$PORT" "$(socks) exec socat -u TCP-LISTEN:$PORT,reuseaddr /dev/null" || return 1
    vm_submit A "$(socks) timeout 120 socat -u /dev/zero TCP:$B:$PORT; echo \"socat exit \$?\""
    local a=$VM_ID
    sleep 3
    t=$SECONDS
    vm_run B "pkill -9 -x socat" || return 1
    out=$(vm_wait A "$a" 200)
    echo "$out"
    echo "A's writer ended $((SECONDS - t)) s after B's reader was killed"
    upgraded 1 "$out" && grep -q 'socat exit 1$' <<<"$out" && ((SECONDS - t < 60))
}

# The interop tests with siw in guest B (see interop(), rping_cell()).
interop_tests() {
    t siw-link-B vm_run B 'modprobe siw && rdma link add siw0 type siw netdev $IWARP_IF && ibv_devices | grep -w siw0'
    # The interop matrix with siw: {we connect, we accept} x {MPA revision 2, 1} x {CRC, none};
    # siw sends revision 2 requests only, and refuses markers. With CRC A ends the connection,
    # without it B; 23-octet cells by a disconnect, 1 MiB cells by a Write past the other's
    # region that it must Terminate. Accepting (revision 2 only) has all four ends; connecting
    # has two per revision, the other two in the other revision.
    local dir rev crc size end
    for dir in connect accept; do
        for rev in 2 1; do
            [ $dir = accept ] && [ $rev = 1 ] && continue
            for crc in 1 0; do
                for size in 23 1048576; do
                    [ $dir = connect ] && [ $(((rev + crc + (size == 23)) % 2)) = 0 ] && continue
                    end=$([ $crc = 1 ] && echo a || echo b)-$([ $size = 23 ] && echo disconnects || echo terminates)
                    t "interop-siw-$dir-rev$rev-crc$crc-$size-$end" interop $dir $size "markers=0,crc=$crc,rev=$rev" $end
                done
            done
        done
    done
    # Peer-to-peer mode toward siw (it answers a peer-to-peer request, preferring a Write RTR):
    # our RTR goes first, then the script.
    t interop-siw-connect-p2p-write-rtr interop connect 23 "markers=0,crc=1,rev=2,rtr=wr" a-disconnects
    t interop-siw-connect-p2p-read-rtr interop connect 23 "markers=0,crc=0,rev=2,rtr=r" a-disconnects
    t interop-siw-markers-refused interop_markers
    t interop-siw-rejects-with-private-data interop_rejects
    t interop-rping-client-on-siw-64B-crc rping_cell serve 64 1
    t interop-rping-client-on-siw-64KiB rping_cell serve 65535 0
    t interop-rping-server-on-siw-64B rping_cell connect 64 0
    t interop-rping-server-on-siw-64KiB-crc rping_cell connect 65535 1
}

# --- the tests, in order: the one list --------------------------------------------------------

tests() {
    t boot-A cat "$VM_DIR/A/cpuinfo"
    t boot-B cat "$VM_DIR/B/cpuinfo"
    t insmod-A-with-tcp-probe insmod_probe
    t insmod-B vm_run B "insmod $ko && test -c /dev/iwarp"
    t query-device-A vm_run A "$check query"
    t query-device-B vm_run B "$check query"
    t tcp-A-to-B tcp
    t siw-link-A vm_run A 'modprobe siw && rdma link add siw0 type siw netdev $IWARP_IF && ibv_devices | grep -w siw0'
    # Interop with siw runs on the release kernel only: under lockdep (the debug kernel), 7.2's
    # siw itself reports an inconsistent lock state at random (a socket's sk_callback_lock,
    # write_lock_bh in softirq in siw_rtr_data_ready, read_lock with softirqs on from
    # release_sock in siw_qp_llp_data_ready), which would fail dmesg-clean for siw, not for us.
    [ "$flavour" = release ] && interop_tests
    t mr-register-A vm_run A "$check mr && $check stats-zero"
    # Without CAP_IPC_LOCK (as nobody), RLIMIT_MEMLOCK applies.
    t mr-memlock-A vm_run A "chmod 666 /dev/iwarp && setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all $check memlock 1024; rc=\$?; chmod 600 /dev/iwarp; exit \$rc"
    t mr-killed-process-unpins-B killed
    t rmmod-refused-while-in-use-B in_use
    t qp-mpa-v2-markers-one-way qp_pair "markers=0,crc=0,rev=2,pd=from-B" "rev=2,crc=1,rx_markers=0,tx_markers=1,peer=from-A" \
        "markers=1,crc=1,rev=2,pd=from-A" "rev=2,crc=1,rx_markers=1,tx_markers=0,peer=from-B"
    t qp-mpa-v1-fallback qp_pair "markers=1,crc=0,rev=1,pd=B1" "rev=1,crc=0,rx_markers=1,tx_markers=0,peer=A1" \
        "markers=0,crc=0,rev=2,pd=A1" "rev=1,crc=0,rx_markers=0,tx_markers=1,peer=B1"
    # Peer-to-peer mode (RFC 6581): the responder picks a Send RTR, the one both allow.
    t qp-p2p-rtr-negotiated qp_pair "markers=0,crc=1,rev=2,pd=B2,rtr=sw" "rev=2,crc=1,rx_markers=0,tx_markers=0,peer=A2,rtr=s" \
        "markers=0,crc=1,rev=2,pd=A2,rtr=rs" "rev=2,crc=1,rx_markers=0,tx_markers=0,peer=B2,rtr=s"
    # A responder holds what it sends until the initiator's first FPDU (RFC 5044 7.1.2), which a
    # user-level initiator sends 3 s late: a Send, or in peer-to-peer mode its RTR.
    t qp-responder-waits-for-the-first-fpdu vm_pair B "$check hold-serve $PORT send" A "$check late-first $B $PORT send"
    t qp-p2p-responder-waits-for-the-rtr vm_pair B "$check hold-serve $PORT rtr" A "$check late-first $B $PORT rtr"
    # No RTR type in common: a user-level responder offers its own, and the module's initiator
    # answers with TERM (2,0,7) and closes (RFC 6581 9.2).
    t qp-p2p-no-common-rtr-terminates vm_pair B "$check rtr-mismatch-serve $PORT" A "$check rtr-mismatch $B $PORT"
    t qp-p2p-no-common-rtr-terminated vm_pair B "$check rtr-mismatch-accept $PORT" A "$check rtr-mismatch-ask $B $PORT"
    # A Read RTR is a Read beyond the ORD: the whole ORD of Reads may follow it at once.
    t qp-p2p-read-rtr-then-a-full-ord vm_pair B "$check p2p-read-burst-serve $PORT" A "$check p2p-read-burst $B $PORT"
    t qp-garbage-peer-refused bad_peer "" EPROTO garbage
    t qp-silent-peer-times-out bad_peer "timeout=1000" ETIMEDOUT silent
    t qp-adopt-errors-A vm_run A "$check adopt-errors"
    t qp-kernel-send-to-user-level-peer kernel_send
    t verbs-errors-A vm_run A "$check verbs-errors && $check stats-zero"
    # Connections made and ended over and over leave nothing behind.
    t cm-connect-disconnect-cycles-A vm_run A "$check cycles $CYCLES && $check stats-zero"
    t verbs-markers-crc-1B-to-4MiB verbs "markers=1,crc=1,rev=2" 1,7,4096,65549,1048576,4194304
    t verbs-markers-every-64B verbs "markers=1,crc=1,rev=2,interval=64" 1,4096,65549,1048576
    t wire-fpdus-start-segments wire_fpdus
    t verbs-plain-mpa-v1 verbs "markers=0,crc=0,rev=1" 1,1500,65536,1048583
    # Peer-to-peer mode with each RTR: the initiator's goes first (a Send RTR takes no receive,
    # a Read RTR's empty response completes nothing), the responder's sends wait for it.
    local rtr
    for rtr in s w r; do
        t "verbs-p2p-rtr-$rtr" verbs "markers=1,crc=1,rev=2,rtr=$rtr" 1,4096,65549 64
    done
    # The same rounds over a TCP connection the module makes itself (CONNECT_QP), A copying every
    # payload it sends (COPY_SEND) instead of sending from its registered pages.
    t verbs-kernel-connect vm_pair B "$check verbs-serve $PORT $((4 << 20)) 'markers=1,crc=1'" \
        A "$check verbs-drive $B $PORT 1,4096,65536,1048576 64 'markers=1,crc=1,kernel-connect=1,copy=1'"
    t verbs-64-qps-at-once vm_pair B "$check many-serve $PORT 64" A "$check many-drive $B $PORT 64"
    t fault-bad-stag fault bad-stag
    t fault-write-bounds fault write-bounds
    t fault-read-rights fault read-rights
    t fault-no-recv fault no-recv
    t fault-write-after-invalidate fault invalidated-stag
    t fault-other-pd fault other-pd
    t cm-listen-reject-accept-disconnect vm_pair B "$check cm-serve $PORT" A "$check cm-drive $B $PORT"
    t cm-listen-reject-accept-disconnect-ipv6 vm_pair B "$check cm-serve $PORT ::" A "$check cm-drive $(vm_ip6 B) $PORT"
    t verbs-post-to-a-stalled-peer vm_pair B "$check stalled-peer $PORT" A "$check post-to-stalled $B $PORT"
    t fault-crc-error-from-the-wire vm_pair B "$check fault-serve $PORT crc-error" A "$check bad-frame $B $PORT crc-error"
    t fault-nothing-placed-after-a-refused-invalidate vm_pair B "$check fault-serve $PORT foreign-invalidate" A "$check bad-frame $B $PORT foreign-invalidate"
    t fault-nothing-placed-after-a-bad-read-request vm_pair B "$check fault-serve $PORT bad-read-request" A "$check bad-frame $B $PORT bad-read-request"
    t fault-urgent-data-ends-the-stream vm_pair B "$check fault-serve $PORT urgent" A "$check bad-frame $B $PORT urgent"
    # Segment boundaries never matter: a user-level peer sends a 60,000-octet FPDU 100 octets
    # at a time, and MSS-sized FPDUs 100 octets and one octet at a time.
    t wire-valid-stream-in-tiny-segments vm_pair B "$check drip-serve $PORT" A "$check drip $B $PORT"
    # With CRCs, Read Responses survive their source being rewritten while they are in flight.
    t verbs-read-while-the-owner-writes vm_pair B "$check read-race-serve $PORT" A "$check read-race $B $PORT"
    # A Reader that keeps the module's IRD full, refilling as responses complete.
    t verbs-reads-at-the-ird vm_pair B "$check ird-serve $PORT" A "$check ird-read $B $PORT"
    # One Read Request beyond the IRD: a Terminate, after whole responses in order.
    t verbs-reads-beyond-the-ird vm_pair B "$check ird-overflow-serve $PORT" A "$check ird-overflow $B $PORT"
    # A Read answered short (its last segment before the Read's length): our Terminate, the
    # Read completed in error, nothing placed past what came.
    for c in empty half; do
        t verbs-read-answered-short-$c vm_pair B "$check short-response-serve $PORT $c" A "$check short-response $B $PORT $c"
    done
    # RFC 7306: Fetch-and-Adds from two QPs on one counter, a Compare-and-Swap lock, Write with
    # Immediate and Immediate Data; a peer that declines the extensions is never sent them.
    t verbs-rfc7306-atomics-and-immediate-data vm_pair B "$check ext-serve $PORT" A "$check ext-drive $B $PORT"
    # STags that stop and start reaching their regions while a connection runs: a Read with
    # Invalidate of its sink, a Local Invalidate completing behind the Send posted before it, a
    # Fast Register under a new key; a Write through the old STag is Terminated, nothing placed.
    # Plain (the Send goes zero copy), and with markers and CRCs.
    local o
    for o in plain:markers=0,crc=0 markers-crc:markers=1,crc=1; do
        t "verbs-invalidate-and-fast-register-${o%%:*}" vm_pair B "$check stag-serve $PORT '${o#*:}'" A "$check stag-drive $B $PORT '${o#*:}'"
    done
    # The hostile peer's seeded smoke run (cargo xtask fuzz-vm runs more): streams changed at
    # the MPA exchange, in their octets or in the STags they name, each checked against the
    # model on the module's side.
    t hostile-peer-mutated-streams hostile 1
    # Local attackers: random ioctl and mmap arguments; QPs destroyed while other threads use
    # them; another process's STags named.
    t local-ioctl-fuzz-A vm_run A "$check ioctl-fuzz $CALLS 1 && $check stats-zero" 1200
    t local-qps-destroyed-while-in-use-A vm_run A "$check race $RACES && $check stats-zero"
    t local-stag-guesses-A vm_run A "$check guess-local $GUESSES && $check stats-zero" 1200
    # Faults from outside the programs.
    t fault-tcp-reset-injected reset_injected
    t fault-forged-segment-with-crc forged "markers=0,crc=1,rev=2"
    t fault-forged-segment-without-crc forged "markers=0,crc=0,rev=2"
    t fault-memory-pressure-B pressure
    t local-kernel-memory-charged-to-the-cgroup-B charged_memcg
    t fault-allocations-fail-in-the-module alloc_faults
    # Initiators that never finish their MPA requests hold up no other.
    t cm-slow-requests-block-nobody vm_pair B "$check cm-slow-serve $PORT" A "$check cm-slow-drive $B $PORT"
    t verbs-killed-mid-transfer killed_mid
    t example-send-recv example send_recv "client got 36 bytes: HELLO OVER IWARP, MARKERS AND CRC ON"
    t example-rdma-write example rdma_write "server's buffer now says: written straight into the server's memory"
    t example-rdma-read example rdma_read "client read 43 bytes: read from the server's memory by the client"
    # What networks do (vm-lib.sh); the debug kernel's KASAN guests are slow (a few MiB a
    # second), so they run reordering (out-of-order placement) only.
    local f faults=("${VM_NET_FAULTS[@]}")
    [ "$flavour" = debug ] && faults=("${VM_NET_FAULTS[@]:2:1}")
    for f in "${faults[@]}"; do
        # 1 % duplication: what 5 % and all at once check, at a lower rate (--full runs it).
        [ "${f%%|*}" = duplicate-1pct ] && [ "${IWARP_VM_FULL:-0}" != 1 ] && continue
        # Duplicated and damaged segments are dropped by TCP below us: what their runs check
        # (nothing breaks, every hash matches) does not grow with volume, so 2 rounds, as every
        # fault at once (which repeats each fault alone): SHORT=1. --full runs the long form.
        SHORT=0
        [[ ${f%%|*} =~ ^(all-at-once|duplicate-5pct|corrupt-0.1pct)$ ]] && SHORT=1
        t "net-${f%%|*}" net_fault "${f#*|}"
    done
    t net-reorder-25pct-ipv6 net_ipv6 reorder-25pct
    # Sockets over iWARP (docs/sockets.md).
    t sockets-socat-by-hash sock_hash $SOCK_MIB
    t sockets-iperf3-both-ways-4-streams sock_iperf3
    t sockets-sockperf-ping-pong-and-throughput sock_sockperf
    t sockets-http-server-and-curl sock_http
    t sockets-plain-peer-gets-tcp sock_plain_peer
    t sockets-reader-and-writer-processes sock_fork_split $((SOCK_MIB < 8 ? SOCK_MIB : 8))
    t sockets-fork-processes-read-in-turn py_ends fork turns 8 turns
    t sockets-socat-forking-server-three-clients sock_fork_server
    t sockets-rules-file-by-address sock_rules_file
    t sockets-memlock-limit-leaves-tcp sock_memlock
    t sockets-timeouts-and-nonblocking-writer-poll-select-epoll sock_pollout
    t sockets-sendfile-and-gathered-sendmsg sock_gather
    t sockets-zero-copy-writes-reusing-the-buffer sock_zero_copy
    t sockets-small-writes-coalesced-on-a-slow-link sock_coalesce
    t sockets-fortified-reader sock_fortified
    t sockets-stdio-client sock_stdio
    t sockets-duplicated-listener sock_dup_listener
    t sockets-prefork-workers-accept sock_prefork
    t sockets-reuseport-pair-stays-tcp sock_reuseport
    t sockets-close-right-after-writing sock_close
    t sockets-close-while-the-reader-holds-its-lock sock_close_held
    t sockets-exit-without-close-ends-with-eof sock_exit
    t sockets-calls-as-tcp-or-a-clear-errno sock_semantics
    t sockets-peer-killed-mid-stream sock_peer_killed
    t sockets-peer-that-lies-is-cut-off sock_liar
    t fault-peer-guest-killed peer_killed
    t nothing-left-A vm_run A "$check stats-zero"
    t nothing-left-B vm_run B "$check stats-zero"
    t init-failure-refused refused
    t siw-excluded siw_excluded
    t ib-link-A ib_link
    t ib-uverbs-regions-A ib_uverbs_regions
    t ib-uverbs-killed-process-unpins-A ib_uverbs_killed
    t ib-uverbs-rping-64B rping_uverbs iwarp server 64
    t ib-uverbs-rping-64KiB rping_uverbs iwarp client 65535
    t ib-uverbs-perftest-64KiB perftest_uverbs iwarp server 65536 ib_write_bw ib_read_bw ib_send_bw
    t ib-uverbs-perftest-8B perftest_uverbs iwarp server 8 ib_write_lat ib_read_lat ib_send_lat
    t ib-uverbs-qperf qperf_uverbs iwarp "-m 64k rc_bw rc_rdma_read_bw -m 8 rc_lat"
    t ib-uverbs-killed-mid-transfer ib_uverbs_killed_mid_transfer
    t ib-uverbs-cq-overrun ib_uverbs_overrun
    t ib-verbs-A ib_verbs
    t ib-nvme-over-fabrics ib_nvme
    t ib-nvme-target-silent-then-back ib_nvme_outage
    # Every fault at once; --full runs each of them alone too.
    for f in "${VM_NET_FAULTS[@]}"; do
        [ "${f%%|*}" = all-at-once ] || [ "${IWARP_VM_FULL:-0}" = 1 ] || continue
        t "ib-nvme-under-net-${f%%|*}" ib_nvme_net "${f%%|*}"
    done
    t ib-nvme-target-guest-killed ib_nvme_target_killed
    t ib-nvme-host-rmmod-mid-io ib_nvme_rmmod_host
    t ib-rdma-cm-between-guests ib_rdma_cm
    local iw=/sys/class/infiniband/iw0
    t ib-rdma-cm-mpa-rev1-answers-p2p ib_rdma_cm_mpa "echo 1 >$iw/mpa_rev" "echo 1 >$iw/mpa_p2p" "echo 2 >$iw/mpa_rev" --mpa-rev 1 --p2p 0
    t ib-rdma-cm-mpa-no-p2p ib_rdma_cm_mpa "echo 0 >$iw/mpa_p2p" "echo 0 >$iw/mpa_p2p" "echo 1 >$iw/mpa_p2p" --mpa-rev 2 --p2p 0
    t ib-nvme-host-on-siw ib_nvme_host_on_siw
    t ib-rdma-cm-to-siw ib_rdma_cm_to_siw
    t ib-nvme-target-on-siw ib_nvme_target_on_siw
    t ib-uverbs-rping-server-to-siw-64B rping_uverbs siw server 64
    t ib-uverbs-rping-client-of-siw-64KiB rping_uverbs siw client 65535
    t ib-uverbs-perftest-server-to-siw-64KiB perftest_uverbs siw server 65536 ib_write_bw ib_read_bw ib_send_bw
    t ib-uverbs-perftest-client-of-siw-8B perftest_uverbs siw client 8 ib_write_lat ib_read_lat ib_send_lat
    t ib-uverbs-qperf-server-to-siw qperf_uverbs siw "-m 8 rc_lat"
    # With an RDMA core device of ours still registered (ib-link-A's).
    t rmmod-A vm_run A "rmmod iwarp && ! grep -qw iwarp /proc/modules && test ! -e /dev/iwarp && test ! -e /sys/class/infiniband/iw0"
    t rmmod-B vm_run B "insmod $ko && rmmod iwarp && ! grep -qw iwarp /proc/modules"
    t dmesg-clean vm_stop
}

# First pass: the names, for the plan. Second: run them, each with ten ports of its own and its
# output as diagnostics.
NAMES=()
# on_this_kernel NAME: whether test NAME runs on this flavour's kernel.
on_this_kernel() {
    if [ "$flavour" = release ]; then ! [[ $1 =~ $DEBUG_ONLY ]]; else ! [[ $1 =~ $RELEASE_ONLY ]]; fi
}
t() { on_this_kernel "$1" && NAMES+=("$1"); }
PORT=0
tests
ktap_plan ${#NAMES[@]}
vm_start 2 "$flavour"
rc=$?
if [ $rc != 0 ]; then
    for n in "${NAMES[@]}"; do
        if [ $rc = 77 ]; then ktap_skip "$flavour/$n" "no VM could run (see above)"; else ktap_fail "$flavour/$n" "guests did not boot"; fi
    done
    [ $rc = 77 ] && [ "${CI:-}" != true ] && exit 0
    exit 1
fi
PORT=7000
out=$(mktemp /tmp/iwarp-vm-tests.XXXXXX)
# Wire conformance on every test: on the release kernel, each test's ten ports are captured on
# the bridge (the first WIRE_PACKETS packets) and tools/wire-check reads every iWARP connection
# in the capture, every FPDU of it, and has Wireshark's dissectors read every segment that holds
# whole FPDUs. Not checked: the tests that break the RFCs on purpose, and the one that ends the
# guests (and with them the capture's namespace).
WIRE_PACKETS=4000
WIRE_UNCHECKED=(
    verbs-markers-every-64B       # markers every 64 octets, an experiment's setting, not RFC 5044's 512
    fault-crc-error-from-the-wire # an FPDU with a bad CRC, sent by a user-level peer
    hostile-peer-mutated-streams  # streams mutated at random by the hostile peer
    net-corrupt-0.1pct            # netem's damaged copies, which TCP drops but the capture keeps
    net-all-at-once               # the same
    ib-nvme-under-net-all-at-once    # the same
    ib-nvme-under-net-corrupt-0.1pct # the same (--full)
    fault-forged-segment-with-crc    # a segment forged on purpose
    fault-forged-segment-without-crc # the same
    ib-uverbs-qperf                  # qperf's rdma_cm listens on a port of its own choosing, not the test's
    ib-uverbs-qperf-server-to-siw    # the same
    dmesg-clean
)
# Tests in which no iWARP connection between the guests reaches full operation: no traffic
# between them (one guest, loopback, no QP), or connections refused on purpose. Every other
# test's capture must hold one, so an empty capture fails.
WIRE_NO_CONNECTION='^(boot|insmod|query-device|siw-link|siw-excluded|ib-link|ib-verbs|ib-uverbs-(regions|killed)|mr-|local-|nothing-left|rmmod|init-failure|tcp-A-to-B)'
WIRE_NO_CONNECTION+='|^(cm-connect-disconnect-cycles-A|fault-memory-pressure-B|qp-adopt-errors-A|verbs-errors-A)$'
WIRE_NO_CONNECTION+='|^(interop-siw-markers-refused|interop-siw-rejects-with-private-data|qp-garbage-peer-refused|qp-silent-peer-times-out)$'
WIRE_NO_CONNECTION+='|^(sockets-plain-peer-gets-tcp|sockets-reuseport-pair-stays-tcp)$'
# recapture: a test that runs a second time drops what its capture (t's `pcap`, tcpdump
# `wire_pid`) holds so far and begins it again.
recapture() {
    [ -n "${pcap:-}" ] || return 0
    kill "$wire_pid" 2>/dev/null
    wait "$wire_pid"
    capture "$pcap" "tcp portrange $PORT-$((PORT + 9))" "$WIRE_PACKETS"
    wire_pid=$CAPTURE_PID
}
# What a test may ask more of its capture, for it alone: wire-check's options (--mpa-rev N).
WIRE_EXPECT=()
# The next test's ports are set when this one ends: its arguments were expanded with PORT
# before t ran, and what reads PORT while it runs must see the same ports.
t() {
    local name=$1
    shift
    on_this_kernel "$name" || return 0
    if [ -n "${IWARP_VM_TESTS:-}" ] && ! [[ $name =~ $IWARP_VM_TESTS ]]; then
        report
        ktap_skip "$flavour/$name" "not selected by IWARP_VM_TESTS"
        PORT=$((PORT + 10))
        return
    fi
    # In this shell (tests keep state here, and the last one ends the guests), output to a file.
    local t0=$SECONDS pcap= wire_pid
    if [ "$flavour" = release ] && ! [[ " ${WIRE_UNCHECKED[*]} " == *" $name "* ]]; then
        pcap="$VM_DIR/$name.pcap"
        capture "$pcap" "tcp portrange $PORT-$((PORT + 9))" "$WIRE_PACKETS"
        wire_pid=$CAPTURE_PID
    fi
    "$@" >"$out"
    local status=$? job=
    echo "took $((SECONDS - t0)) s" >>"$out"
    # The test before is reported now: its capture was checked while this test ran. This test's
    # capture is checked in the background while the next one runs (results stay in order).
    report
    mv "$out" "$out.pending"
    if [ -n "$pcap" ]; then
        local need=1
        [[ $name =~ $WIRE_NO_CONNECTION ]] && need=0
        capture_stop "$wire_pid"
        wire_check "$pcap" "$PORT-$((PORT + 9))" $CUT --connections $need "${WIRE_EXPECT[@]}" >"$out.pending.wire" 2>&1 &
        job=$!
    fi
    WIRE_EXPECT=()
    PENDING=("$flavour/$name" "$status" "$job")
    PORT=$((PORT + 10))
}
# report: prints the result of the test before (PENDING: name, status, wire check's job), its
# output and its wire check's.
PENDING=()
report() {
    [ ${#PENDING[@]} = 0 ] && return
    local name=${PENDING[0]} status=${PENDING[1]} job=${PENDING[2]}
    if [ -n "$job" ]; then
        wait "$job" || status=1
        cat "$out.pending.wire" >>"$out.pending"
        rm -f "$out.pending.wire"
    fi
    sed 's/^/# /' "$out.pending"
    if [ "$status" = 0 ]; then ktap_pass "$name"; else ktap_fail "$name"; fi
    PENDING=()
}
tests
report
rm -f "$out" "$out.pending"
! ktap_failed
