#!/usr/bin/env bash
# cargo xtask bench verbs: in one run between the same two guests, iwarp.ko (iwarp-bench) beside
# siw (perftest with rdma_cm, -R) and plain TCP (iperf3, sockperf ping-pong), and last the same
# perftest runs on iwarp.ko's RDMA core device (iw0) and on siw in turn (iw0, siw, iw0); prints
# each figure and the ratios. Usage: bench-vm.sh [--quick] [--faults | --sweep]
# The default run: 64 KiB write_bw and 8 B write_lat/send_lat (median, mean, 99th percentile of
# the same number of exchanges for every stack) of our configurations (markers and CRC,
# blocking and polling; receiving in a work item; plain, blocking and polling; copied), siw
# (perftest polling, and send_lat on CQ events) and TCP; 64 KiB write_bw over several QPs
# sharing one CQ; 8 B latency with 1,000 idle QPs connected; and the CPU time both guests spend
# per message, for each stack. Stacks are compared like for like: in the same waiting mode (see
# "Waiting" below), with the same Writes in flight (BW_DEPTH), each completion signalled, and
# every figure under the same rule for failed attempts (see cell).
# --faults: 64 KiB write_bw of iwarp.ko (markers and CRC; the same placing only in order; plain)
# and of TCP (iperf3) under network faults (netem on both guests, one wire packet per fault:
# gso_max_segs 1), each stack's ratio to its own run without, the median of 3 runs (1 in
# --quick), with TCP's counters (nstat) and, unless --quick, TCP's view (ss) of each run.
# --sweep: out-of-order placement measured. (a) 64 KiB write_bw against reorder rate and loss, of
# iwarp.ko placing out of order through markers, through alignment only (CRC, no markers), with
# CRC only (unaligned: FPDUs found only by chance), and in order only (hook off), beside siw and
# TCP, every stack's figure the median of the same number of runs; (b) against the marker
# separation, without faults and under 1 % reordering; (c) 256 KiB write_lat under 1 % loss,
# hook on ÷ off; (d) message sizes 8 B to 4 MiB, write_bw and write_lat of ours (markers and
# CRC; plain), siw and TCP. SWEEP_PARTS="sizes" or "ooo" runs only (d) or only (a)-(c). CSVs and
# SVG plots go to target/bench/ (made again by each run, never committed).
# Guests run under TCG here: absolute numbers mean little, ratios between stacks measured in the
# same guests, back to back, are the point.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/vm-lib.sh"
ko="$here/target/kmod/release/iwarp.ko"
bench="$here/target/release/iwarp-bench"
quick=0 faults=0 sweep=0
for a in "$@"; do
    case $a in
        --quick) quick=1 ;;
        --faults) faults=1 ;;
        --sweep) sweep=1 ;;
        *) echo "usage: bench-vm.sh [--quick] [--faults | --sweep]" >&2; exit 2 ;;
    esac
done
bw_iters=$((quick ? 300 : 2000)) lat_iters=$((quick ? 200 : 1000)) secs=$((quick ? 2 : 5))
bw_size=65536 lat_size=8
# Writes in flight in every write_bw, ours (iwarp-bench --depth) and siw's (perftest -t) alike:
# both tools' default, said here so that neither can drift. Latency tests keep one in flight.
bw_depth=128

vm_start 2 release || exit $?
B=$(vm_ip B)
status=0
# both CMD: CMD in guest A, then (if it succeeded) in guest B.
both() { vm_run A "$1" >/dev/null && vm_run B "$1" >/dev/null; }
both 'insmod '"$ko"' && modprobe siw && rdma link add siw0 type siw netdev $IWARP_IF' || { vm_stop; echo "FATAL: guest setup failed" >&2; exit 1; }

declare -A R
# ours NAME OPTS [WHAT [CLIENT]]: through iwarp.ko (iwarp-bench, OPTS on both sides, CLIENT on
# the client only): write_bw of BW_SIZE, write_lat and send_lat of LAT_SIZE (WHAT empty), only
# write_bw (WHAT bw), only the latencies (WHAT lat), only one of them (write_lat, send_lat),
# write_bw and write_lat (write); read from iwarp-bench's JSON. A cell (the rule for failures).
ours() {
    local name=$1 opts=$2 what=${3:-} out c run json=/run/iwarp/ours.json bw lat
    c="$bench client $B --port 7300 $opts ${4:-} --format json"
    bw="$c --test write_bw --sizes $bw_size --iters $bw_iters --depth $bw_depth"
    lat="--sizes $lat_size --iters $lat_iters --stop-server"
    case $what in
        bw) run="$bw --stop-server" ;;
        lat) run="$c --test write_lat,send_lat $lat" ;;
        write_lat | send_lat) run="$c --test $what $lat" ;;
        write) run="$bw && $c --test write_lat $lat" ;;
        *) run="$bw && $c --test write_lat,send_lat $lat" ;;
    esac
    cell iwarp.ko "$name" 7300 "timeout 900 $bench server --port 7300 $opts" "{ $run; } >$json" || return 1
    out=$(vm_run A "cat $json") || return 1
    echo "$out"
    R[$name/write_bw]=$(pick "$out" write_bw '.bw_bytes_per_sec / 1e6 * 10 | round / 10')
    local t st
    for t in write_lat send_lat; do
        for st in p50 mean p99; do R[$name/$t/$st]=$(pick "$out" $t ".lat_${st}_us * 10 | round / 10"); done
    done
}
# spent CMD...: runs CMD; SPENT_A and SPENT_B are the CPU time guests A and B spent meanwhile.
# A run in which a cell had to try again is run again (its failed attempts cost CPU too).
spent() {
    local try f a0 b0
    for try in 1 2 3; do
        f=$(attempts_failed) a0=$(vm_busy A) b0=$(vm_busy B)
        "$@" >/dev/null || return 1
        SPENT_A=$(($(vm_busy A) - a0)) SPENT_B=$(($(vm_busy B) - b0))
        (($(attempts_failed) == f)) && return 0
    done
    return 1
}
# cpu_cost NAME N1 N2 CMD...: runs "CMD... N1" and "CMD... N2" (N messages each, or as many as
# CMD leaves in MESSAGES) and records the CPU time per message of guest A (the sender, or the
# ping-pong's client) and guest B, in microseconds, from the difference of the two runs: what
# any run costs however short (starting the tools, connecting, registering memory) cancels out.
cpu_cost() {
    local name=$1 n1=$2 n2=$3 a1 b1 m1 m2
    shift 3
    MESSAGES=$n1
    spent "$@" "$n1" || return 1
    a1=$SPENT_A b1=$SPENT_B m1=$MESSAGES MESSAGES=$n2
    spent "$@" "$n2" || return 1
    m2=$MESSAGES
    ((m2 > m1)) || return 1
    local side d
    for side in a b; do
        if [ $side = a ]; then d=$((SPENT_A - a1)); else d=$((SPENT_B - b1)); fi
        if ((d >= CPU_MIN_TICKS)); then
            R[$name/cpu_$side]=$(awk -v d=$d -v n=$((m2 - m1)) 'BEGIN { printf "%.1f", d * 1e4 / n }')
        else
            echo "cpu $name: guest ${side^^}'s longer run took $d/100 s more CPU than its shorter one, below" \
                "$CPU_MIN_TICKS/100 s (the clock's resolution and the noise decide): not measured"
        fi
    done
    echo "cpu $name: ${R[$name/cpu_a]:-n/a} us (A), ${R[$name/cpu_b]:-n/a} us (B) per message, over $m1 and $m2"
}
# The least CPU time, in 1/100 s, by which the longer run of cpu_cost must exceed the shorter
# for a figure: /proc/stat counts in ticks of 10 ms, and short runs differ by a few ticks either
# way (negative costs in quick runs before this bound).
CPU_MIN_TICKS=5
# The runs cpu_cost compares, each taking the number of messages last.
ours_bw_n() { local bw_iters=$2; ours cpu-ours-64k "$1" bw; }
ours_lat_n() { local lat_iters=$2; ours cpu-ours-8 "$1" send_lat; }
perftest_bw_n() { perftest_bw "cpu-$pt_dev-64k" 65536 "$1"; }
# Blocking, as ours and TCP wait in these runs: a polling perftest would bill its spinning as
# the message's cost.
perftest_lat_n() { perftest "cpu-$pt_dev-8" ib_send_lat 8 "$1" 5 1 -e; }
# tcp_stream N: iperf3 sending N writes of 64 KiB.
tcp_stream() { cell TCP cpu-tcp-64k 5201 "iperf3 -s -1 -p 5201" "iperf3 -c $B -p 5201 -n $(($1 * 65536)) -l 65536"; }
# tcp_pingpong SECS: sockperf's ping-pong of 14 B for SECS; MESSAGES: the exchanges it made (its
# warm-up included, as the CPU time is).
tcp_pingpong() {
    cell TCP cpu-tcp-8 11111 "sockperf sr --tcp -i $B -p 11111" "sockperf pp --tcp -i $B -p 11111 -m 14 -t $1" stop || return 1
    MESSAGES=$(sed -n 's/.*\[Total Run\].*SentMessages=\([0-9]*\).*/\1/p' <<<"$OUT" | head -1)
}

# reload OPTS: iwarp.ko loaded again in both guests with module parameters OPTS.
reload() { both "rmmod iwarp && insmod $ko $1"; }
# pick JSON TEST EXPR: EXPR of the first result of TEST in iwarp-bench's JSON (one array per
# client run).
pick() { jq -rs --arg t "$2" "[.[][] | select(.test == \$t)][0] // empty | $3" <<<"$1"; }
# Every figure, ours and the other stacks' (siw and TCP, the anchors) alike, comes from a cell:
# a server in B, and a client in A started once the server listens. One rule for every stack: a
# failed attempt is printed with why and counted, and the cell is tried again as a pair (a fresh
# server and client), up to TRIES attempts in all while it has taken less than TRY_SECONDS
# (which bounds what a cell failing for good costs CI). A cell that still fails is printed as
# not measured, with why, and its ratios as n/a. Only our own missing figures fail the
# benchmark: the anchors' are not ours to fail on.
TRIES=5 TRY_SECONDS=180
declare -A MISSING FAILED
# cell STACK NAME PORT SERVER CLIENT [STOP]: the client's output in OUT (empty if not
# measured); failed attempts counted in FAILED[STACK] (iwarp.ko, siw, TCP). STOP=stop: the
# server runs until ended (after the client); otherwise it must end by itself, successfully.
# SETTLE (if set) runs in both guests after a failed attempt. Not in a subshell: it records
# what went wrong in MISSING and FAILED.
cell() {
    local stack=$1 name=$2 port=$3 server=$4 client=$5 stop=${6:-} try said why start=$SECONDS
    OUT=
    for ((try = 1; try <= TRIES; try++)); do
        if ((try > 1 && SECONDS - start >= TRY_SECONDS)); then
            why+=" (gave up after $((try - 1)) attempts in $((SECONDS - start)) s)"
            try=$((TRIES + 1))
            break
        fi
        if ! said=$(vm_serve B "$name" "$port" "$server"); then
            why="server did not listen"
        elif ! OUT=$(vm_run A "$client" 900); then
            said=$OUT why="client failed"
            vm_unserve B "$name" >/dev/null
        elif [ "$stop" = stop ]; then
            vm_unserve B "$name" >/dev/null
            break
        elif ! said=$(vm_served B "$name"); then
            why="server failed"
        else
            # What the server says of the run (iwarp-bench: where what arrived was placed).
            grep -h '^iwarp-bench server:' <<<"$said" | sed 's/^/    /'
            break
        fi
        why+=": $(reason "$said")"
        echo "$stack $name: attempt $try of $TRIES failed: $why"
        tail -5 <<<"$said" | sed 's/^/    /'
        FAILED[$stack]=$((${FAILED[$stack]:-0} + 1))
        # What the failed pair left behind must be gone before the next pair starts.
        if [ -n "${SETTLE:-}" ]; then vm_run A "$SETTLE" && vm_run B "$SETTLE"; fi >/dev/null
        sleep 2
    done
    if ((try > TRIES)); then
        OUT=
        MISSING[$name]=$why
        return 1
    fi
    ((try > 1)) && echo "$stack $name: measured on attempt $try"
    return 0
}
# attempts_failed: failed attempts so far, all stacks.
attempts_failed() {
    local n=0 s
    for s in "${FAILED[@]}"; do n=$((n + s)); done
    echo $n
}
# attempts: the rule and what it cost, by stack (the last line of every mode).
attempts() {
    echo "failed attempts, each tried again as a pair (every stack alike: up to $TRIES attempts a figure within" \
        "$TRY_SECONDS s): iwarp.ko ${FAILED[iwarp.ko]:-0}, siw ${FAILED[siw]:-0}, TCP ${FAILED[TCP]:-0}"
}
# reason OUTPUT: the line of a failed tool's OUTPUT that says why (its last words otherwise).
reason() {
    local why
    why=$(grep -iE 'fail|error|refused|unable|couldn|timed out|segmentation|did not' <<<"$1" | tail -1)
    [ -n "$why" ] || why=$(grep -v '^[[:space:]*-]*$' <<<"$1" | tail -1)
    echo "${why:-no output}"
}
# figure NAME TEXT COLUMN SCALE: column COLUMN of the line TEXT times SCALE, into R[NAME].
figure() {
    R[$1]=$(awk -v c="$3" -v k="$4" '$c ~ /^[0-9]+(\.[0-9]+)?$/ && $c + 0 > 0 {printf "%.1f", $c * k}' <<<"$2")
    [ -n "${R[$1]}" ] || [ -n "${MISSING[$1]:-}" ] || MISSING[$1]="no figure in its output: '$(tail -1 <<<"$OUT")'"
}
# mean_of NAME A B: the mean of figures A and B into R[NAME]; none if either is missing, with
# that round's reason.
mean_of() {
    R[$1]=$(awk -v a="${R[$2]:-}" -v b="${R[$3]:-}" 'BEGIN { if (a != "" && b != "") printf "%.1f", (a + b) / 2 }')
    [ -n "${R[$1]}" ] || MISSING[$1]=${MISSING[$2]:-${MISSING[$3]:-a round of it was not run}}
}
# The RDMA core device perftest runs on, and the stack its figures count for: siw's siw0, then in
# the last phase iw0 (ours, driven by the same binaries through rdma-core's siw provider) and
# siw0 in turn (to_iw0, to_siw).
pt_dev=siw0 pt_stack=siw
# perftest NAME TOOL SIZE ITERS COLUMN SCALE [ARGS]: perftest on PT_DEV through rdma_cm (port
# 18515), polling its CQ unless ARGS say -e. The result line is kept in LINE for more columns.
perftest() {
    local args="-R -d $pt_dev -s $3 -n $4 -F ${7:-}"
    # A crashed perftest leaves rdma_cm ids behind for a moment: wait until none is left.
    SETTLE='for i in $(seq 50); do [ -z "$(rdma resource show cm_id 2>/dev/null)" ] && exit 0; sleep 0.2; done' \
        cell $pt_stack "$1" 18515 "timeout 60 $2 $args" "timeout 60 $2 $args $B"
    LINE=$(awk -v s="$3" '$1 == s && NF > 4' <<<"$OUT" | tail -1)
    figure "$1" "$LINE" "$5" "$6"
    echo "$pt_dev $2${7:+ $7} $3 B: ${R[$1]:-not measured}"
    [ -n "${R[$1]:-}" ]
}
# perftest_bw NAME SIZE ITERS: perftest's write_bw in MB/s (it reports Gbit/s), BW_DEPTH Writes in
# flight, each completion signalled as ours are (-Q 1; up to 8 KiB perftest signals only one in
# 100 unless told). It polls its CQ: perftest refuses -e for Write.
perftest_bw() { perftest "$1" ib_write_bw "$2" "$3" 4 125 "--report_gbits -t $bw_depth -Q 1"; }
# perftest_lat NAME TOOL [ARGS]: 8 B latency over LAT_ITERS exchanges, as perftest reports it
# (half the round trip): t_typical (its median), t_avg, 99% percentile.
perftest_lat() {
    perftest "$1/p50" "$2" 8 "$lat_iters" 5 1 "${3:-}"
    figure "$1/mean" "$LINE" 6 1
    figure "$1/p99" "$LINE" 8 1
}
# perftest_all NAME: perftest on PT_DEV polling, as it runs by default, in every test (NAME);
# send_lat also sleeping on CQ events (NAME-events), the one of the three that perftest lets block.
perftest_all() {
    perftest_bw "$1/write_bw" "$bw_size" "$bw_iters"
    perftest_lat "$1/write_lat" ib_write_lat
    perftest_lat "$1/send_lat" ib_send_lat
    perftest_lat "$1-events/send_lat" ib_send_lat -e
}
# perftest_warm: a short ib_write_lat and ib_send_lat on PT_DEV, discarded. Under TCG QEMU
# translates code when it first runs, and no perftest latency test has run on this boot before
# the turns: their first round would pay for that, and siw's round after it would not.
perftest_warm() {
    echo "---- warm-up on $pt_dev (discarded)"
    perftest warm-up/write_lat ib_write_lat 8 200 5 1
    perftest warm-up/send_lat ib_send_lat 8 200 5 1
    return 0
}
# iperf3_bw NAME: TCP's bandwidth (iperf3) in MB/s, in writes of BW_SIZE (at most its largest, 1 MiB).
iperf3_bw() {
    cell TCP "$1" 5201 "iperf3 -s -1 -p 5201" "iperf3 -c $B -p 5201 -t $secs -l $((bw_size > 1048576 ? 1048576 : bw_size)) -J"
    figure "$1" "$(grep -o '"bits_per_second":[[:space:]]*[0-9.e+]*' <<<"$OUT" | tail -1 | tr ':' ' ')" 2 1.25e-7
}
# sockperf_lat NAME: TCP's latency (sockperf ping-pong of LAT_SIZE, at least its smallest, 14 B):
# every exchange logged (one way, half the round trip, as perftest's) and the same statistics
# taken of the first LAT_ITERS as of the other stacks' LAT_ITERS, into R[NAME/p50|mean|p99].
sockperf_lat() {
    local n m=$((lat_size < 14 ? 14 : lat_size))
    cell TCP "$1/p50" 11111 "sockperf sr --tcp -i $B -p 11111" \
        "sockperf pp --tcp -i $B -p 11111 -m $m -t $((secs + 2)) --full-log /run/iwarp/sockperf.csv >/dev/null && $here/scripts/sockperf-lat.sh /run/iwarp/sockperf.csv $lat_iters" stop
    read -r n R[$1/p50] R[$1/mean] R[$1/p99] <<<"$OUT"
    [ "${n:-0}" = "$lat_iters" ] || { R[$1/p50]= R[$1/mean]= R[$1/p99]=; MISSING[$1/p50]="sockperf logged ${n:-no} exchanges, not $lat_iters"; }
}
tcp() {
    iperf3_bw tcp/write_bw
    echo "tcp iperf3 64 KiB writes: ${R[tcp/write_bw]:-not measured} MB/s"
    sockperf_lat tcp/lat
    echo "tcp sockperf ping-pong 14 B (its smallest), p50/mean/p99: ${R[tcp/lat/p50]:-not measured} ${R[tcp/lat/mean]:-} ${R[tcp/lat/p99]:-} us"
}

# median: the median of the numbers on stdin (empty lines are runs that failed), or nothing.
median() { sort -g | awk 'NF { v[n++] = $1 } END { if (n) print (n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) }'; }

# TCP's counters of a run, in both guests (nstat: what changed since the last look).
TCP_COUNTERS='TcpOutSegs|TcpRetransSegs|TcpExt(TCPSACKReorder|TCPDSACKRecv|TCPSpuriousRTOs|TCPBacklogDrop|TCPRcvQDrop|TCPOFOQueue|TCPOFODrop|TCPFastRetrans|TCPTimeouts|DelayedACKs|TCPBacklogCoalesce|TCPLossProbes|TCPRenoReorder|TCPTSReorder|TCPSACKReneging)'
# counters_reset, then counters after a run: TCP's counters in both guests and, unless --quick,
# TCP's view of the busiest connection (ss, sampled twice a second during the run: cwnd,
# reordering, time limited by the window or the send buffer; scripts/ss-summary.py).
SS_PORTS="( sport = :7300 or dport = :7300 or sport = :5201 or dport = :5201 )"
counters_reset() {
    local g
    for g in A B; do
        vm_run $g 'nstat -n' >/dev/null
        ((quick)) && continue
        # In the background: a guest's agent runs one command at a time.
        vm_run $g "rm -f /run/iwarp/ss.stop; setsid bash -c 'while [ ! -e /run/iwarp/ss.stop ]; do ss -tinmH state established \"$SS_PORTS\"; echo ==; sleep 0.5; done' >/run/iwarp/ss.log 2>&1 </dev/null &" >/dev/null
    done
}
counters() {
    local g
    for g in A B; do
        echo "    $g: $(vm_run $g "nstat -z | awk '\$1 ~ /^($TCP_COUNTERS)\$/ && \$2 > 0 { sub(/^TcpExt/, \"\", \$1); printf \"%s %s  \", \$1, \$2 }'")"
        ((quick)) && continue
        echo "    $g: $(vm_run $g 'touch /run/iwarp/ss.stop; sleep 1; cat /run/iwarp/ss.log' | python3 "$here/scripts/ss-summary.py")"
    done
}
if [ $faults = 1 ]; then
    one_packet_per_fault || { vm_stop; echo "FATAL: gso_max_segs" >&2; exit 1; }
    # The goal's faults ("reorder N %": N % of the packets held 2 ms, the others sent at once),
    # then the rest of vm-lib.sh's (their GSO-sized form runs in the VM tests).
    fault_list=("none|" "reorder-1pct|$(netem_reorder 1)" "reorder-5pct|$(netem_reorder 5)" "reorder-25pct|$(netem_reorder 25)" "loss-1pct|loss 1%")
    ((quick)) || fault_list+=("duplicate-5pct|duplicate 5%" "corrupt-0.1pct|corrupt 0.1%")
    # Every stack's figure is the median of FAULT_REPS runs (1 in --quick, else 3), the stacks
    # taking turns.
    reps=${FAULT_REPS:-$((quick ? 1 : 3))}
    # The first run after boot is slower (caches, first use of the module): not measured.
    ours warm-up "--markers 1 --crc 1" bw >/dev/null || status=1
    for f in "${fault_list[@]}"; do
        n=${f%%|*}
        echo "---- netem: ${f#*|}"
        vm_netem A "${f#*|}" && vm_netem B "${f#*|}" || { echo "FAILED: netem ${f#*|}"; status=1; continue; }
        for ((k = 1; k <= reps; k++)); do
            for m in "mc|--markers 1 --crc 1" "mc-inorder|--markers 1 --crc 1 --ooo 0" "plain|--markers 0 --crc 0"; do
                counters_reset
                ours "$n/${m%%|*}#$k" "${m#*|}" bw || status=1
                echo "$n ${m%%|*}: ${R[$n/${m%%|*}#$k/write_bw]:-not measured} MB/s"
                counters
            done
            counters_reset
            iperf3_bw "$n/tcp#$k/write_bw"
            echo "$n TCP: ${R[$n/tcp#$k/write_bw]:-not measured} MB/s"
            counters
        done
        for m in mc mc-inorder plain tcp; do
            R[$n/$m/write_bw]=$(for ((k = 1; k <= reps; k++)); do echo "${R[$n/$m#$k/write_bw]:-}"; done | median)
        done
    done
    vm_netem A && vm_netem B
    vm_stop || status=1
    echo
    echo "==== 64 KiB write_bw under network faults (netem on both guests, one wire packet per fault: gso_max_segs 1),"
    echo "     each stack's ratio to its own run without; the median of $reps run(s) of each stack, every one blocking (ours' default"
    echo "     wait; iperf3 in write); reorder N %: N % of the packets held 2 ms"
    printf '%-16s %22s %24s %22s %22s %16s\n' "fault" "iwarp M+C MB/s (÷)" "M+C in order MB/s (÷)" "iwarp plain MB/s (÷)" "TCP MB/s (÷)" "M+C ooo÷inorder"
    for f in "${fault_list[@]}"; do
        n=${f%%|*}
        to_none() { printf '%s (%s)' "${R[$n/$1]:-n/a}" "$(ratio "${R[$n/$1]:-}" "${R[none/$1]:-}")"; }
        printf '%-16s %22s %24s %22s %22s %16s\n' "$n" "$(to_none mc/write_bw)" "$(to_none mc-inorder/write_bw)" "$(to_none plain/write_bw)" "$(to_none tcp/write_bw)" \
            "$(ratio "${R[$n/mc/write_bw]:-}" "${R[$n/mc-inorder/write_bw]:-}")"
        for m in mc mc-inorder plain; do [ -n "${R[$n/$m/write_bw]:-}" ] || { echo "FAILED: our $n $m write_bw is missing"; status=1; }; done
        [ -n "${R[$n/tcp/write_bw]:-}" ] || echo "$n TCP: NOT MEASURED: ${MISSING[$n/tcp/write_bw]:-unknown}"
    done
    echo "goals: reorder 1 % and 5 % at least 0.9 of own; reorder 25 % and loss 1 % at least TCP's ratio"
    attempts
    exit $status
fi

if [ $sweep = 1 ]; then
    out_dir="$here/target/bench"
    mkdir -p "$out_dir"
    ours warm-up "--markers 1 --crc 1" bw >/dev/null || status=1
    parts=" ${SWEEP_PARTS:-sizes ooo} "
    # (d) Message sizes, 8 B to 4 MiB, without faults: write_bw and write_lat of ours (markers
    # and CRC; plain), siw and TCP (iperf3 writes of that size, up to its largest, 1 MiB;
    # sockperf up to its largest message, 64 KiB). Fewer iterations for larger messages.
    sizes=(8 64 512 4096 32768 262144 1048576 4194304)
    # sized Z: this size's runs, with its size and iterations in the variables all runs read.
    sized() {
        local most=$lat_iters
        local bw_size=$1 lat_size=$1 bw_iters=$((8388608 / $1)) lat_iters=$((2097152 / $1))
        bw_iters=$((bw_iters > 2000 ? 2000 : bw_iters < 20 ? 20 : bw_iters))
        lat_iters=$((lat_iters > most ? most : lat_iters < 20 ? 20 : lat_iters))
        ours "size/$1/mc" "--markers 1 --crc 1" write || status=1
        ours "size/$1/plain" "--markers 0 --crc 0" write || status=1
        perftest_bw "size/$1/siw/write_bw" "$1" "$bw_iters"
        perftest "size/$1/siw/write_lat/p50" ib_write_lat "$1" "$lat_iters" 5 1
        iperf3_bw "size/$1/tcp/write_bw"
        (($1 > 65536)) || sockperf_lat "size/$1/tcp/write_lat"
    }
    if [[ $parts == *" sizes "* ]]; then
        for z in "${sizes[@]}"; do
            echo "---- $z B"
            sized "$z"
        done
    fi
    if [[ $parts == *" ooo "* ]]; then
        one_packet_per_fault || { vm_stop; echo "FATAL: gso_max_segs" >&2; exit 1; }
        # (a) Reordering ("reorder N %": N % of the packets held 2 ms, the others sent at once,
        # as in --faults), and loss without delay.
        rates=("none|" "reorder-1%|$(netem_reorder 1)" "reorder-5%|$(netem_reorder 5)" "reorder-25%|$(netem_reorder 25)"
            "loss-0.1%|loss 0.1%" "loss-1%|loss 1%")
        # Every stack, ours and siw and TCP alike, takes turns SWEEP_REPS times (3 unless set);
        # each cell is the median of its runs (R[FAULT/STACK], how many gave a figure in
        # R[FAULT/STACK/runs]).
        reps=${SWEEP_REPS:-3}
        configs=("markers|--markers 1 --crc 1" "aligned|--markers 0 --crc 1 --aligned 1" "unaligned|--markers 0 --crc 1"
            "inorder|--markers 1 --crc 1 --ooo 0")
        for f in "${rates[@]}"; do
            n=${f%%|*}
            echo "---- netem: ${f#*|}"
            vm_netem A "${f#*|}" && vm_netem B "${f#*|}" || { echo "FAILED: netem ${f#*|}"; status=1; continue; }
            for ((k = 1; k <= reps; k++)); do
                for c in "${configs[@]}"; do ours "$n/${c%%|*}#$k" "${c#*|}" bw || status=1; done
                perftest_bw "$n/siw#$k" "$bw_size" "$bw_iters"
                iperf3_bw "$n/tcp#$k"
            done
            for m in "${configs[@]%%|*}" siw tcp; do
                runs=$(for ((k = 1; k <= reps; k++)); do echo "${R[$n/$m#$k/write_bw]:-${R[$n/$m#$k]:-}}"; done)
                R[$n/$m]=$(median <<<"$runs")
                R[$n/$m/runs]=$(grep -c . <<<"$runs")
            done
        done
        # (b) Marker separation, FPDUs not aligned (only markers find them), as in Balaji et al.'s
        # "Analyzing the Impact of Supporting Out-of-Order Communication on In-order Performance".
        intervals=(512 1024 2048 4096 16384 none)
        for f in "none|" "reorder-1%|$(netem_reorder 1)"; do
            n=${f%%|*}
            echo "---- marker separation, netem: ${f#*|}"
            vm_netem A "${f#*|}" && vm_netem B "${f#*|}" || { echo "FAILED: netem ${f#*|}"; status=1; continue; }
            for iv in "${intervals[@]}"; do
                if [ "$iv" = none ]; then o="--markers 0"; else o="--markers 1 --marker-interval $iv"; fi
                ours "sep/$n/$iv" "$o --crc 1" bw || status=1
            done
        done
        # (c) What early placement saves once the lost segment is retransmitted: the round trip of
        # a 256 KiB Write ping-pong under 1 % loss (most rounds lose a segment), placing out of order
        # (only the missing octets are left to place) against in order only, markers and CRC.
        echo "---- 256 KiB write_lat under loss 1%"
        vm_netem A "loss 1%" && vm_netem B "loss 1%" || { echo "FAILED: netem loss 1%"; status=1; }
        for m in ooo inorder; do
            o="--markers 1 --crc 1"
            [ $m = inorder ] && o+=" --ooo 0"
            lat_size=262144 lat_iters=$((quick ? 50 : 300)) ours "lat/$m" "$o" write_lat || status=1
        done
        vm_netem A && vm_netem B
    fi
    vm_stop || status=1
    echo
    if [[ $parts == *" sizes "* ]]; then
        echo "==== (d) against message size, no faults: write_bw MB/s and write_lat median us (half the round trip);"
        echo "     one run of each stack; ours and TCP blocking, siw polling (perftest refuses -e for Write)"
        bcsv="$out_dir/bw-by-size.csv" lcsv="$out_dir/lat-by-size.csv"
        echo "size,iwarp M+C,iwarp plain,siw,TCP" >"$bcsv"
        echo "size,iwarp M+C,iwarp plain,siw,TCP" >"$lcsv"
        printf '%-8s %10s %10s %10s %10s | %10s %10s %10s %10s\n' size "bw M+C" plain siw TCP "lat M+C" plain siw TCP
        for z in "${sizes[@]}"; do
            b=("${R[size/$z/mc/write_bw]:-}" "${R[size/$z/plain/write_bw]:-}" "${R[size/$z/siw/write_bw]:-}" "${R[size/$z/tcp/write_bw]:-}")
            l=("${R[size/$z/mc/write_lat/p50]:-}" "${R[size/$z/plain/write_lat/p50]:-}" "${R[size/$z/siw/write_lat/p50]:-}" "${R[size/$z/tcp/write_lat/p50]:-}")
            label=$z
            ((z >= 1048576)) && label=$((z / 1048576))M || { ((z >= 1024)) && label=$((z / 1024))K; }
            (IFS=,; echo "$label,${b[*]}" >>"$bcsv"; echo "$label,${l[*]}" >>"$lcsv")
            printf '%-8s %10s %10s %10s %10s | %10s %10s %10s %10s\n' "$label" "${b[@]}" "${l[@]}"
            for m in mc plain; do
                [ -n "${R[size/$z/$m/write_bw]:-}" ] && [ -n "${R[size/$z/$m/write_lat/p50]:-}" ] || { echo "FAILED: our $m figures at $z B are missing"; status=1; }
            done
        done
        echo "(an empty cell: not measured; TCP writes at most 1 MiB at a time (iperf3's largest); its latency is sockperf's, up to 64 KiB)"
        python3 "$here/scripts/plot-svg.py" "$bcsv" "$out_dir/bw-by-size.svg" "RDMA Write bandwidth against message size (TCP: writes of that size)" "MB/s" log &&
            python3 "$here/scripts/plot-svg.py" "$lcsv" "$out_dir/lat-by-size.svg" "RDMA Write latency (median, half the round trip) against message size" "us" log || status=1
        echo "plots: $out_dir/bw-by-size.svg $out_dir/lat-by-size.svg (data beside them as CSV)"
        echo
    fi
    if [[ $parts == *" ooo "* ]]; then
        echo "==== (a) 64 KiB write_bw MB/s against network faults (netem on both guests)"
        csv="$out_dir/ooo-sweep.csv"
        echo "fault,markers,alignment only,CRC only,markers in order only,siw,TCP" >"$csv"
        line() { printf '%-13s %8s %8s %8s %8s %8s %8s | %10s %11s %10s %9s %9s %10s\n' "$@"; }
        echo "(every figure, each stack's alike: the median of $reps runs, the stacks taking turns; ours and TCP blocking,"
        echo " siw polling (perftest refuses -e for Write))"
        line fault markers aligned crc-only in-order "siw poll" TCP "mark÷inord" "align÷inord" "align÷crc" "mark÷siw" "mark÷TCP" "mark÷none"
        for f in "${rates[@]}"; do
            n=${f%%|*}
            v() { echo "${R[$n/$1]:-}"; }
            echo "$n,$(v markers),$(v aligned),$(v unaligned),$(v inorder),$(v siw),$(v tcp)" >>"$csv"
            line "$n" "$(v markers)" "$(v aligned)" "$(v unaligned)" "$(v inorder)" "$(v siw)" "$(v tcp)" \
                "$(ratio "$(v markers)" "$(v inorder)")" "$(ratio "$(v aligned)" "$(v inorder)")" "$(ratio "$(v aligned)" "$(v unaligned)")" \
                "$(ratio "$(v markers)" "$(v siw)")" "$(ratio "$(v markers)" "$(v tcp)")" "$(ratio "$(v markers)" "${R[none/inorder]:-}")"
            for m in "${configs[@]%%|*}" siw tcp; do
                r=${R[$n/$m/runs]:-0}
                ((r == reps)) && continue
                case $m in
                    siw | tcp) echo "$n $m: measured in $r of $reps runs (why: the failed attempts above)" ;;
                    *) echo "FAILED: our $n $m write_bw measured in $r of $reps runs"; status=1 ;;
                esac
            done
        done
        echo "markers: markers and CRC (the default); aligned: CRC only, FPDUs aligned to segments; crc-only: CRC only,"
        echo "not aligned (out of order, FPDUs are found only by chance); in-order: markers and CRC, out-of-order"
        echo "placement off; mark÷none: markers under the fault ÷ in order only without faults; mark÷siw: ours blocking"
        echo "÷ siw polling (no pair in one waiting mode: perftest cannot block in a Write test)"
        echo
        echo "==== (b) 64 KiB write_bw MB/s against marker separation (FPDUs not aligned; CRC on)"
        sep="$out_dir/marker-separation.csv"
        echo "octets between markers,no fault,reorder 1%" >"$sep"
        printf '%-10s %10s %12s %14s\n' interval "no fault" "reorder 1%" "÷ no markers"
        for iv in "${intervals[@]}"; do
            a=${R[sep/none/$iv/write_bw]:-} b=${R[sep/reorder-1%/$iv/write_bw]:-}
            echo "$iv,$a,$b" >>"$sep"
            printf '%-10s %10s %12s %14s\n' "$iv" "$a" "$b" "$(ratio "$a" "${R[sep/none/none/write_bw]:-}")"
            [ -n "$a" ] && [ -n "$b" ] || { echo "FAILED: marker separation $iv is missing"; status=1; }
        done
        echo
        echo "==== (c) 256 KiB write_lat (half round trip, us) under 1 % loss: out of order ÷ in order only"
        for st in p50 mean p99; do
            printf '%-5s out of order %10s  in order %10s  ÷ %s\n' "$st" "${R[lat/ooo/write_lat/$st]:-n/a}" "${R[lat/inorder/write_lat/$st]:-n/a}" \
                "$(ratio "${R[lat/ooo/write_lat/$st]:-}" "${R[lat/inorder/write_lat/$st]:-}")"
        done
        python3 "$here/scripts/plot-svg.py" "$csv" "$out_dir/ooo-sweep.svg" "64 KiB RDMA Write bandwidth under reordering and loss" "MB/s" &&
            python3 "$here/scripts/plot-svg.py" "$sep" "$out_dir/marker-separation.svg" "64 KiB RDMA Write bandwidth against marker separation" "MB/s" || status=1
        echo "plots: $out_dir/ooo-sweep.svg $out_dir/marker-separation.svg (data beside them as CSV)"
    fi
    attempts
    exit $status
fi

# Waiting. Each guest has one virtual CPU, so a guest that spins takes the CPU its own device
# emulation needs (docs/performance.md): stacks are compared only in the same waiting mode.
#  - blocking: ours waits on the CQ as libiwarp does by default (spins 15 µs, then sleeps);
#    perftest with -e sleeps on CQ events; TCP sleeps in recv and write.
#  - polling: ours with --poll 1 spins on the CQ, never sleeping; perftest without -e.
# perftest refuses -e for Write (its write_bw polls its CQ, its write_lat watches memory), so
# siw has a blocking figure for send_lat only. write_lat waits by watching the buffer in both
# modes, as perftest's does: ours yields the CPU between looks when blocking, not when polling.
# The headline ratio to siw is therefore the polling pair, iwarp plain (no markers or CRC, as
# siw) --poll 1 ÷ perftest without -e, the one pair with all three tests; to TCP, the blocking
# pair. --quick runs both pairs in full as well: the second mode costs it only one more
# iwarp-bench run (plain, polling: three short tests) and one more perftest (send_lat -e), each
# a few seconds of work and of starting and connecting, about half a minute of its seven.
echo "---- iwarp.ko, markers and CRC on, blocking"
ours mc "--markers 1 --crc 1" || status=1
echo "---- iwarp.ko, markers and CRC on, polling (--poll 1)"
ours mc-poll "--markers 1 --crc 1 --poll 1" || status=1
# The old receive design, and (below) where the cost of markers and CRC goes, are studies of
# our own design: the full run only (CI's --quick keeps every comparison with siw and TCP).
rx_work=$((!quick))
if ((rx_work)); then
    echo "---- iwarp.ko, markers and CRC on, blocking, receiving in a work item (rx_callback_max=0: the old design)"
    reload rx_callback_max=0 && ours mc-work "--markers 1 --crc 1" || status=1
    reload "" || status=1
fi
echo "---- iwarp.ko, markers and CRC off (as siw runs by default), blocking"
ours plain "--markers 0 --crc 0" || status=1
echo "---- iwarp.ko, markers and CRC off, polling (--poll 1): beside siw's polling perftest"
ours plain-poll "--markers 0 --crc 0 --poll 1" || status=1
# Many QPs (CLAN's shared queues): the aggregate over QPs sharing one CQ, and one QP's latency
# while many others are connected and idle (no per-QP scan may be on the hot path). A study of
# our own design: the full run only.
qp_counts=(1 4 16 64)
((quick)) && qp_counts=()
idle_qps=1000
for q in "${qp_counts[@]}"; do
    echo "---- iwarp.ko, markers and CRC on, blocking: 64 KiB write_bw over $q QP(s) sharing one CQ"
    ours "qps$q" "--markers 1 --crc 1" bw "--qps $q" || status=1
done
if ((!quick)); then
    echo "---- iwarp.ko, markers and CRC on, blocking: 8 B latency alone, then with $idle_qps idle QPs connected"
    ours alone "--markers 1 --crc 1" lat || status=1
    ours idle "--markers 1 --crc 1" lat "--idle $idle_qps" || status=1
fi
echo "---- iwarp.ko, markers and CRC off, every payload copied (no zero copy), blocking"
ours plain-copy "--markers 0 --crc 0 --copy 1" || status=1
echo "---- TCP (iperf3, sockperf): blocking"
tcp
# What a message costs the hosts (the headline of Kim et al.'s QPIP: host overhead, not wire
# speed): the CPU time of both guests per 64 KiB RDMA Write (iperf3 write for TCP) and per 8 B
# ping-pong exchange (one message each way), each stack in its own run, blocking (but siw's
# write_bw, which cannot).
echo "---- CPU time per message"
cpu_bw_n2=$((100 + 4 * bw_iters)) cpu_lat_n2=$((100 + 5 * lat_iters))
cpu_cost cpu/ours/64k 100 $cpu_bw_n2 ours_bw_n "--markers 1 --crc 1" || status=1
cpu_cost cpu/ours/8 100 $cpu_lat_n2 ours_lat_n "--markers 1 --crc 1" || status=1
cpu_cost cpu/plain/64k 100 $cpu_bw_n2 ours_bw_n "--markers 0 --crc 0" || status=1
cpu_cost cpu/plain/8 100 $cpu_lat_n2 ours_lat_n "--markers 0 --crc 0" || status=1
# Where the cost of markers and CRC goes: each on its own.
if ((!quick)); then
    cpu_cost cpu/markers/64k 100 $cpu_bw_n2 ours_bw_n "--markers 1 --crc 0" || status=1
    cpu_cost cpu/crc/64k 100 $cpu_bw_n2 ours_bw_n "--markers 0 --crc 1" || status=1
fi
cpu_cost cpu/siw/64k 100 $cpu_bw_n2 perftest_bw_n
cpu_cost cpu/siw/8 100 $cpu_lat_n2 perftest_lat_n
cpu_cost cpu/tcp/64k 100 $cpu_bw_n2 tcp_stream
cpu_cost cpu/tcp/8 1 $((1 + 2 * secs)) tcp_pingpong
# The fairest comparison with siw: the same perftest binaries, flags and iterations on iw0, our
# RDMA core device, which rdma-core's siw provider drives as it drives siw0. siw and our devices
# never run side by side (docs/device-model.md), so the two take turns: iw0, siw, iw0 again
# (ABA), so that whatever drifts over the run (the guests' memory, caches, the host's load)
# weighs on both alike; the headline takes the mean of iw0's two rounds against siw's round
# between them. MPA as siw runs by default (neither markers nor CRC), then our defaults (both).
# to_iw0 / to_siw: siw0 → iw0 / iw0 → siw0, in both guests.
to_iw0() {
    both 'rdma link delete siw0 && rmmod siw && rdma link add iw0 type iwarp netdev $IWARP_IF' &&
        both 'echo 0 >/sys/class/infiniband/iw0/mpa_markers && echo 0 >/sys/class/infiniband/iw0/mpa_crc' &&
        pt_dev=iw0 pt_stack=iwarp.ko
}
to_siw() { both 'rdma link delete iw0 && modprobe siw && rdma link add siw0 type siw netdev $IWARP_IF' && pt_dev=siw0 pt_stack=siw; }
echo "---- perftest (-R) on iw0, siw0, iw0 in turn, the same binaries and flags: markers and CRC off"
# A failed perftest leaves its figure missing (checked at the end); a failed swap ends the turns.
if to_iw0 && { perftest_warm; perftest_all pt-plain-1; to_siw; } && { perftest_all siw-between; to_iw0; }; then
    perftest_all pt-plain-2
    for k in write_bw {write_lat,send_lat}/{p50,mean,p99}; do mean_of pt-plain/$k pt-plain-{1,2}/$k; done
    for k in send_lat/{p50,mean,p99}; do mean_of pt-plain-events/$k pt-plain-{1,2}-events/$k; done
    cpu_cost cpu/pt-plain/64k 100 $cpu_bw_n2 perftest_bw_n || status=1
    cpu_cost cpu/pt-plain/8 100 $cpu_lat_n2 perftest_lat_n || status=1
    if ((!quick)); then
        echo "---- perftest (-R) on iw0: markers and CRC on"
        both 'echo 1 >/sys/class/infiniband/iw0/mpa_markers && echo 1 >/sys/class/infiniband/iw0/mpa_crc' || status=1
        perftest_all pt-mc
    fi
else
    echo "FAILED: perftest on iw0 and siw0 in turn"
    status=1
fi
vm_stop || status=1

# at STACK TEST [STAT]: a figure of the main run, empty if not measured (TCP's one ping-pong
# stands for both latency tests).
at() {
    local k=$1/$2
    [ "$1" = tcp ] && [ "$2" != write_bw ] && k=tcp/lat
    echo "${R[$k${3:+/$3}]:-}"
}
shown() {
    local v
    v=$(at "$@")
    echo "${v:-n/a}"
}
row() {
    printf '%-16s' "$1"
    shift
    printf ' %21s' "$@"
    echo
}
# table STACK|HEADING...: write_bw and both latencies (median/mean/p99) of each STACK, a column
# each, headed HEADING.
table() {
    local c t cells=()
    for c; do cells+=("${c#*|}"); done
    row "" "${cells[@]}"
    cells=()
    for c; do cells+=("$(shown "${c%%|*}" write_bw)"); done
    row "write_bw 64 KiB" "${cells[@]}"
    for t in write_lat send_lat; do
        cells=()
        for c; do cells+=("$(shown "${c%%|*}" $t p50)/$(shown "${c%%|*}" $t mean)/$(shown "${c%%|*}" $t p99)"); done
        row "$t 8 B" "${cells[@]}"
    done
}
# versus LABEL OURS THEIRS TEST...: OURS ÷ THEIRS in each TEST (a latency: median, mean).
versus() {
    local line t a=$2 b=$3
    line=$(printf '%-44s' "$1")
    shift 3
    for t; do
        if [ "$t" = write_bw ]; then
            line+="  write_bw $(ratio "$(at $a $t)" "$(at $b $t)");"
        else
            line+="  $t $(ratio "$(at $a $t p50)" "$(at $b $t p50)"), $(ratio "$(at $a $t mean)" "$(at $b $t mean)");"
        fi
    done
    echo "${line%;}"
}
echo
echo "==== one run, same two TCG guests (MB/s = 10^6 B/s, $bw_depth Writes in flight; latency = half the round trip, us,"
echo "     over $lat_iters exchanges each: median / mean / 99th percentile, the same statistics for every stack)"
echo "-- blocking: ours waits as libiwarp does by default (spins 15 us on the CQ, then sleeps); perftest -e sleeps on CQ"
echo "   events (send_lat only: perftest refuses -e for Write); TCP sleeps in recv and write"
rx_col=()
((rx_work)) && rx_col=("mc-work|M+C rx work, blocking")
table "mc|M+C, blocking" "${rx_col[@]}" "plain|plain, blocking" "plain-copy|plain copy, blocking" \
    "siw-between-events|siw -e (turns), blocking" "pt-plain-events|iw0 plain -e, blocking" "tcp|TCP, blocking"
echo "-- polling: ours --poll 1 (spins on the CQ, never sleeps); perftest as it runs by default (polls its CQ)"
pt_mc_col=()
((quick)) || pt_mc_col=("pt-mc|iw0 M+C, polling")
table "mc-poll|M+C, polling" "plain-poll|plain, polling" "siw-between|siw (turns), polling" "pt-plain|iw0 plain, polling" \
    "${pt_mc_col[@]}"
echo "(M+C: markers and CRC, our default; plain: neither, as siw runs by default; rx work: receiving in a work item;"
echo " iw0: perftest with the same flags as siw's, on iwarp.ko through rdma-core's siw provider, the others iwarp-bench;"
echo " turns: perftest on iw0, siw0, iw0 in turn at the end of the run; iw0's figures the mean of its two rounds;"
echo " TCP: iperf3 and sockperf ping-pong of 14 B, its smallest; write_lat watches the buffer in both modes, as perftest's"
echo " does: ours yields the CPU between looks when blocking, not when polling)"
echo
echo "==== ratios, each between two stacks waiting alike (bandwidth: higher is better for us; latency: lower is better"
echo "     for us; medians, then means). Headline: the same perftest on iw0 ÷ on siw, plain, both polling (the one mode"
echo "     perftest runs every test in); iwarp-bench plain ÷ TCP, both blocking"
versus "perftest on iw0 ÷ on siw, plain, polling (headline)" pt-plain siw-between write_bw write_lat send_lat
versus "perftest on iw0 ÷ on siw, plain, -e" pt-plain-events siw-between-events send_lat
versus "  iw0's first round alone ÷ siw, polling" pt-plain-1 siw-between write_bw write_lat send_lat
versus "  iw0's second round alone ÷ siw, polling" pt-plain-2 siw-between write_bw write_lat send_lat
((quick)) || versus "perftest on iw0 ÷ on siw, M+C, polling" pt-mc siw-between write_bw write_lat send_lat
versus "plain, polling ÷ siw, polling" plain-poll siw-between write_bw write_lat send_lat
versus "plain, blocking ÷ siw -e, blocking" plain siw-between-events send_lat
versus "plain, blocking ÷ TCP, blocking (headline)" plain tcp write_bw write_lat send_lat
versus "M+C, polling ÷ siw, polling" mc-poll siw-between write_bw write_lat send_lat
versus "M+C, blocking ÷ siw -e, blocking" mc siw-between-events send_lat
versus "M+C, blocking ÷ TCP, blocking" mc tcp write_bw write_lat send_lat
versus "perftest on iw0 ÷ iwarp-bench, plain, polling" pt-plain plain-poll write_bw write_lat send_lat
versus "ours polling ÷ blocking, plain" plain-poll plain write_bw write_lat send_lat
versus "ours polling ÷ blocking, M+C" mc-poll mc write_bw write_lat send_lat
versus "M+C ÷ plain, both blocking" mc plain write_bw
versus "M+C ÷ plain, both polling" mc-poll plain-poll write_bw
versus "zero copy ÷ copied (plain, blocking)" plain plain-copy write_bw
((rx_work)) && versus "rx in callback ÷ in work item, M+C, blocking" mc mc-work write_bw write_lat send_lat
echo
echo "==== CPU time per message (guest CPU, softirq included), us: sender (A) / receiver (B)"
echo "     64 KiB: an RDMA Write (TCP: a 64 KiB write); 8 B: a ping-pong exchange (a message each way);"
echo "     from the difference of a short and a long run, so what any run costs once cancels out;"
echo "     every stack blocking (ours' default wait, perftest -e, TCP) but siw at 64 KiB, which polls (perftest has no -e for Write)"
cpu() { echo "${R[cpu/$1/$2/cpu_a]:-n/a} / ${R[cpu/$1/$2/cpu_b]:-n/a}"; }
printf '%-8s %22s %22s %22s %22s %22s\n' "" "iwarp M+C, blocking" "iwarp plain, blocking" "siw: 64k polls, 8 -e" "iw0 plain: as siw" "TCP, blocking"
for m in 64k 8; do printf '%-8s %22s %22s %22s %22s %22s\n' "$m" "$(cpu ours $m)" "$(cpu plain $m)" "$(cpu siw $m)" "$(cpu pt-plain $m)" "$(cpu tcp $m)"; done
((quick)) || echo "64k, markers only: $(cpu markers 64k); CRC only: $(cpu crc 64k) (blocking)"
for m in 64k 8; do
    for side in a b; do
        line="$m, guest ${side^^}:"
        for cfg in ours plain pt-plain; do
            line+=" $cfg ÷ TCP $(ratio "${R[cpu/$cfg/$m/cpu_$side]:-}" "${R[cpu/tcp/$m/cpu_$side]:-}"), ÷ siw $(ratio "${R[cpu/$cfg/$m/cpu_$side]:-}" "${R[cpu/siw/$m/cpu_$side]:-}");"
        done
        echo "$line"
    done
done
if ((!quick)); then
    echo
    echo "==== many QPs (markers and CRC, blocking): 64 KiB write_bw in all, MB/s (÷ one QP)"
    for q in "${qp_counts[@]}"; do printf '%s QPs: %s (%s)   ' "$q" "${R[qps$q/write_bw]:-n/a}" "$(ratio "${R[qps$q/write_bw]:-}" "${R[qps1/write_bw]:-}")"; done
    echo
    for t in write_lat send_lat; do
        echo "$t 8 B with $idle_qps idle QPs ÷ alone (blocking): median $(ratio "${R[idle/$t/p50]:-}" "${R[alone/$t/p50]:-}"), mean $(ratio "${R[idle/$t/mean]:-}" "${R[alone/$t/mean]:-}")  (${R[idle/$t/p50]:-n/a} vs ${R[alone/$t/p50]:-n/a} us)"
    done
fi
echo
for k in siw-between/{write_bw,write_lat/p50,send_lat/p50} siw-between-events/send_lat/p50 tcp/write_bw tcp/lat/p50; do
    [ -n "${R[$k]:-}" ] || echo "${k%%/*} ${k#*/}: NOT MEASURED: ${MISSING[$k]:-not run} (its ratios are n/a)"
done
attempts
# Our own figures must all be there; the anchors' are not ours to fail on.
mine=()
for cfg in mc mc-poll ${rx_col:+mc-work} plain plain-poll plain-copy; do mine+=("$cfg/write_bw" "$cfg/write_lat/p50" "$cfg/send_lat/p50"); done
for q in "${qp_counts[@]}"; do mine+=("qps$q/write_bw"); done
((quick)) || mine+=(alone/write_lat/p50 alone/send_lat/p50 idle/write_lat/p50 idle/send_lat/p50)
# perftest on iw0 is ours too: iwarp.ko under rdma-core's siw provider.
for cfg in pt-plain $( ((quick)) || echo pt-mc); do mine+=("$cfg/write_bw" "$cfg/write_lat/p50" "$cfg/send_lat/p50"); done
mine+=(pt-plain-events/send_lat/p50)
for m in "${mine[@]}"; do
    c=${m%%/*}
    awk -v x="${R[$m]:-}" 'BEGIN { exit !(x + 0 > 0) }' || { echo "FAILED: our $c ${m#*/} figure is missing${MISSING[$m]:+: ${MISSING[$m]}}"; status=1; }
done
exit $status
