#!/usr/bin/env bash
# cargo xtask bench verbs: in one run between the same two guests, iwarp.ko (iwarp-bench) beside
# siw (perftest with rdma_cm, -R) and plain TCP (iperf3, sockperf ping-pong); prints each
# figure and the ratios. Usage: bench-vm.sh [--quick]
# Guests run under TCG here: absolute numbers mean little, ratios between stacks measured in the
# same guests, back to back, are the point.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/vm-lib.sh"
ko="$here/target/kmod/release/iwarp.ko"
bench="$here/target/release/iwarp-bench"
quick=0
[ "${1:-}" = --quick ] && quick=1
bw_iters=$((quick ? 300 : 2000)) lat_iters=$((quick ? 200 : 1000)) secs=$((quick ? 2 : 5))

vm_start 2 release || exit $?
B=$(vm_ip B)
status=0
setup='insmod '"$ko"' && modprobe siw && rdma link add siw0 type siw netdev $IWARP_IF'
vm_run A "$setup" >/dev/null && vm_run B "$setup" >/dev/null || { vm_stop; echo "FATAL: guest setup failed" >&2; exit 1; }

declare -A R
# ours NAME OPTS: write_bw 64 KiB, write_lat 8 B, send_lat 8 B through iwarp.ko.
ours() {
    local name=$1 opts=$2 out
    out=$(vm_pair B "timeout 600 $bench server --port 7300 $opts" \
        A "$bench client $B --port 7300 $opts --format csv --test write_bw --sizes 65536 --iters $bw_iters && \
           $bench client $B --port 7300 $opts --format csv --test write_lat,send_lat --sizes 8 --iters $lat_iters --stop-server") || { echo "$out"; return 1; }
    echo "$out" | grep -E '^(test|write|send)'
    R[$name/write_bw]=$(awk -F, '$1 == "write_bw" {printf "%.1f", $7 / 1e6}' <<<"$out")
    R[$name/write_lat]=$(awk -F, '$1 == "write_lat" {print $8}' <<<"$out")
    R[$name/send_lat]=$(awk -F, '$1 == "send_lat" {print $8}' <<<"$out")
}
# perftest TOOL SIZE ITERS COLUMN: siw through rdma_cm; the server side runs in B.
perftest() {
    local out
    out=$(vm_pair B "timeout 120 $1 -R -d siw0 -s $2 -n $3 -F $4" \
        A "for i in \$(seq 20); do $1 -R -d siw0 -s $2 -n $3 -F $4 $B && exit 0; sleep 1; done; exit 1") || { echo "$out" >&2; return 1; }
    awk -v s="$2" '$1 == s && NF > 4' <<<"$out" | tail -1
}
siw() {
    local line
    line=$(perftest ib_write_bw 65536 "$bw_iters" --report_gbits) || return 1
    echo "siw ib_write_bw: $line"
    R[siw/write_bw]=$(awk '{printf "%.1f", $4 * 125}' <<<"$line")
    line=$(perftest ib_write_lat 8 "$lat_iters" "") || return 1
    echo "siw ib_write_lat: $line"
    R[siw/write_lat]=$(awk '{print $6}' <<<"$line")
    line=$(perftest ib_send_lat 8 "$lat_iters" "") || return 1
    echo "siw ib_send_lat: $line"
    R[siw/send_lat]=$(awk '{print $6}' <<<"$line")
}
tcp() {
    local out
    # Servers as daemons in B (ended by their pid afterwards), so each client starts against a
    # server that is already listening.
    vm_run B "iperf3 -s -D -p 5201 -I /tmp/iperf3.pid && { sockperf sr --tcp -i $B -p 11111 >/dev/null 2>&1 & echo \$! >/tmp/sockperf.pid; } && sleep 1" || return 1
    out=$(vm_run A "iperf3 -c $B -p 5201 -t $secs -l 65536 -J") || { echo "$out" >&2; return 1; }
    R[tcp/write_bw]=$(grep -o '"bits_per_second":[[:space:]]*[0-9.e+]*' <<<"$out" | tail -1 | awk -F: '{printf "%.1f", $2 / 8e6}')
    echo "tcp iperf3 64 KiB writes: ${R[tcp/write_bw]} MB/s"
    out=$(vm_run A "sockperf pp --tcp -i $B -p 11111 -m 14 -t $secs") || { echo "$out" >&2; return 1; }
    R[tcp/lat]=$(grep -o 'avg-latency=[0-9.]*' <<<"$out" | head -1 | cut -d= -f2)
    echo "tcp sockperf ping-pong 14 B (its smallest): ${R[tcp/lat]} us"
    vm_run B 'kill $(cat /tmp/iperf3.pid) $(cat /tmp/sockperf.pid)' >/dev/null
    [ -n "${R[tcp/lat]}" ] && [ -n "${R[tcp/write_bw]}" ]
}

echo "---- iwarp.ko, markers and CRC on"
ours ours-mc "--markers 1 --crc 1" || status=1
echo "---- iwarp.ko, markers and CRC off (as siw runs by default)"
ours ours "--markers 0 --crc 0" || status=1
echo "---- iwarp.ko, markers and CRC off, every payload copied (no zero copy)"
ours ours-copy "--markers 0 --crc 0 --copy 1" || status=1
echo "---- siw (perftest -R)"
siw || status=1
echo "---- TCP (iperf3, sockperf)"
tcp || status=1
vm_stop || status=1

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }
echo
echo "==== one run, same two TCG guests (MB/s = 10^6 B/s; latency = half round trip, us)"
row() { printf '%-22s %14s %14s %14s %14s %14s\n' "$@"; }
row "" "iwarp (M+C)" "iwarp (plain)" "plain, copied" "siw" "TCP"
row "write_bw 64 KiB MB/s" "${R[ours-mc/write_bw]:-n/a}" "${R[ours/write_bw]:-n/a}" "${R[ours-copy/write_bw]:-n/a}" "${R[siw/write_bw]:-n/a}" "${R[tcp/write_bw]:-n/a}"
row "write_lat 8 B us" "${R[ours-mc/write_lat]:-n/a}" "${R[ours/write_lat]:-n/a}" "${R[ours-copy/write_lat]:-n/a}" "${R[siw/write_lat]:-n/a}" "${R[tcp/lat]:-n/a}"
row "send_lat 8 B us" "${R[ours-mc/send_lat]:-n/a}" "${R[ours/send_lat]:-n/a}" "${R[ours-copy/send_lat]:-n/a}" "${R[siw/send_lat]:-n/a}" "${R[tcp/lat]:-n/a}"
echo
echo "==== ratios (bandwidth: higher is better for us; latency: lower is better for us)"
for cfg in ours ours-mc; do
    printf '%-8s write_bw ÷ siw %s, ÷ TCP %s;  write_lat ÷ siw %s, ÷ TCP %s;  send_lat ÷ siw %s, ÷ TCP %s\n' "$cfg" \
        "$(ratio "${R[$cfg/write_bw]:-}" "${R[siw/write_bw]:-}")" "$(ratio "${R[$cfg/write_bw]:-}" "${R[tcp/write_bw]:-}")" \
        "$(ratio "${R[$cfg/write_lat]:-}" "${R[siw/write_lat]:-}")" "$(ratio "${R[$cfg/write_lat]:-}" "${R[tcp/lat]:-}")" \
        "$(ratio "${R[$cfg/send_lat]:-}" "${R[siw/send_lat]:-}")" "$(ratio "${R[$cfg/send_lat]:-}" "${R[tcp/lat]:-}")"
done
echo "zero copy write_bw ÷ copied (plain): $(ratio "${R[ours/write_bw]:-}" "${R[ours-copy/write_bw]:-}")"
exit $status
