#!/usr/bin/env bash
# cargo xtask bench profile: where the guests' CPU time goes in the runs whose goals issue 9 sets,
# so a missed goal comes with its reason. Each case runs iwarp-bench between two guests under
# `perf record -a` (the cpu-clock event: TCG has no PMU, and it samples at the tick, a few hundred
# samples a second) around both the server (guest B) and the client (guest A), and prints each
# guest's hottest symbols (kernel, iwarp.ko, user space) and its time by area: CRC, copies,
# iwarp.ko, TCP/IP, virtio-net, idle. Usage: profile-vm.sh [--quick] [--reorder | --nvme]
# --reorder: the bandwidth cases only, under 25 % reordering (a quarter of the packets held 2 ms,
# one wire packet per fault, as bench-vm.sh --faults): where the time goes when it does.
# --nvme: instead, fio's 4 KiB random reads 32 deep from nvmet in A (the target) to the host in
# B, as bench-nvme.sh runs them, over iwarp.ko plain, over siw and over NVMe/TCP in turn.
# Cases: 64 KiB write_bw with markers and CRC and without either; 8 B write_lat and send_lat with
# markers and CRC. Samples stay in the guests' /run; nothing is written to the tree.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/vm-lib.sh"
ko="$here/target/kmod/release/iwarp.ko"
bench="$here/target/release/iwarp-bench"
quick=0 reorder=0 nvme=0
for a in "$@"; do
    case $a in
        --quick) quick=1 ;;
        --reorder) reorder=1 ;;
        --nvme) nvme=1 ;;
        *) echo "usage: profile-vm.sh [--quick] [--reorder | --nvme]" >&2; exit 2 ;;
    esac
done
command -v perf >/dev/null || { echo "SKIP: perf is not installed (cargo xtask setup installs linux-perf)" >&2; exit 1; }
bw_iters=$((quick ? 2000 : 8000)) lat_iters=$((quick ? 2000 : 8000))
top=$((quick ? 12 : 25))

vm_start 2 release || exit $?
B=$(vm_ip B)
status=0
((nvme)) || { vm_run A "insmod $ko" >/dev/null && vm_run B "insmod $ko" >/dev/null; } || { vm_stop; echo "FATAL: insmod failed" >&2; exit 1; }
cases=("mc-bw|--markers 1 --crc 1|write_bw|65536|$bw_iters" "plain-bw|--markers 0 --crc 0|write_bw|65536|$bw_iters"
    "mc-write-lat|--markers 1 --crc 1|write_lat|8|$lat_iters" "mc-send-lat|--markers 1 --crc 1|send_lat|8|$lat_iters")
if ((reorder)); then
    cases=("${cases[@]:0:2}")
    one_packet_per_fault || status=1
    for g in A B; do
        vm_netem $g "$(netem_reorder 25)" || status=1
    done
    echo "==== under 25 % reordering (a quarter of the packets held 2 ms), one wire packet per fault"
fi
# What each area's symbols look like (perf's symbol names, kernel and module).
areas='
/crc32|crc_|crc32c/            { a["CRC"] += $1; next }
/memcpy|memmove|copy_user|copy_to|copy_from|rep_movs|memset/ { a["copies"] += $1; next }
/^ *[0-9.]+ +\[iwarp\]/        { a["iwarp.ko (protocol, placement, queues)"] += $1; next }
/tcp_|ip_|__ip|inet_|skb|sk_|sock_|__sk|nf_|dev_|__dev|netif|napi|net_rx|neigh|br_/ { a["TCP/IP, sockets, skbs"] += $1; next }
/virtio|vring|vp_|virtnet/     { a["virtio-net"] += $1; next }
/idle|halt|poll_idle|cpuidle|default_idle|mwait/ { a["idle"] += $1; next }
/\[\.\]/                       { a["user space"] += $1; next }
                               { a["other kernel"] += $1 }
END { for (k in a) printf "    %5.1f%%  %s\n", a[k], k }'
# Rust symbols (v0 mangling) made readable enough to tell functions apart: the identifiers of
# the path and its generic arguments, back-references and disambiguators skipped, the crate
# (iwarp_main) left out.
demangle='import re, sys
def path(m):
    s, out, i = m.group(0), [], 2
    while i < len(s) and len(out) < 8:
        if (n := re.match(r"\d+", s[i:])):
            i += len(n.group(0))
            i += s[i] == "_"
            out.append(s[i:i + int(n.group(0))])
            i += int(n.group(0))
        elif (t := re.match(r"(Cs|s|B)[0-9A-Za-z]*_", s[i:])):
            i += len(t.group(0))
        else:
            i += 1
    return "::".join(o for o in out if o != "iwarp_main") or s
for line in sys.stdin:
    print(re.sub(r"_R[0-9A-Za-z_]+", path, line), end="")'
# report G CASE ROLE: guest G's profile of CASE, G being its ROLE (module symbols from kallsyms:
# the module was loaded from the tree, not /lib/modules), hottest symbols first, then by area.
report() {
    local f=/run/iwarp/perf.$2.data
    echo "-- guest $1 ($3)"
    vm_run "$1" "perf report -i $f --kallsyms /proc/kallsyms --no-children --sort dso,sym --stdio 2>/dev/null >$f.txt
grep -m1 '^# Samples' $f.txt
grep -E '^ +[0-9.]+%' $f.txt | head -$top
echo '  by area:'
grep -E '^ +[0-9.]+%' $f.txt | sed 's/%//' | awk '$areas' | sort -rn" | python3 -c "$demangle" || status=1
}
record() { echo "perf record -a -e cpu-clock -o /run/iwarp/perf.$1.data --"; }
# The host's side: its two cores run both guests' emulation. host_cpu prints, for each guest's
# QEMU, the CPU time (1/100 s) of its virtual CPU's thread (the busiest but the main one), of
# its main thread (the device emulation: virtio-net and the tap) and of the rest, then
# the host's total busy time and the wall clock (1/100 s).
host_cpu() {
    local i p t
    for i in "${!VM_PIDS[@]}"; do
        p=$(pgrep -g "${VM_PIDS[$i]}" qemu-system | head -1)
        [ -n "$p" ] || { echo "0 0 0"; continue; }
        # The process's own count keeps the time of threads that have ended.
        { awk '{ print "all", $14 + $15 }' "/proc/$p/stat"; for t in /proc/$p/task/*; do echo "${t##*/} $(awk '{ print $14 + $15 }' "$t/stat")"; done; } |
            awk -v main="$p" '$1 == "all" { all = $2; next } $1 == main { m = $2; next } $2 > v { v = $2 } END { print v + 0, m + 0, all - v - m }'
    done
    awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat
    echo $(($(date +%s%N) / 10000000))
}
# host_share BEFORE AFTER: host_cpu's difference as shares of one host core over the run.
host_share() {
    paste -d' ' <(tr '\n' ' ' <<<"$1") <(tr '\n' ' ' <<<"$2") | awk -v cores="$(nproc)" '{
        n = NF / 2; wall = $(2 * n) - $n
        for (i = 1; i <= n; i++) d[i] = $(n + i) - $i
        printf "-- host (%d cores; %% of one core over the run): ", cores
        printf "guest A vCPU %.0f%%, device emulation %.0f%%, other %.0f%%; ", 100 * d[1] / wall, 100 * d[2] / wall, 100 * d[3] / wall
        printf "guest B vCPU %.0f%%, device emulation %.0f%%, other %.0f%%; ", 100 * d[4] / wall, 100 * d[5] / wall, 100 * d[6] / wall
        printf "whole host busy %.0f%% of %d%%\n", 100 * d[7] / wall, 100 * cores }'
}
# nvme_case ID|NAME|DEVICE|UP|DOWN (vm-nvme.sh's nvme_stack): nvmet in A over DEVICE, the host
# in B, and fio's 4 KiB random reads 32 deep for 10 s (3 with --quick) under perf in both.
nvme_case() {
    local id name dev up down NQN=nqn.2026-11.org.iwarp:profile PORT=4420 secs=$((quick ? 3 : 10)) a out
    IFS='|' read -r id name dev up down <<<"$1"
    echo "==== nvme-$id: NVMe over $name, fio 4 KiB random reads 32 deep, $secs s"
    vm_run A "$up" >/dev/null && vm_run B "$up" >/dev/null && nvme_target A "$dev" >/dev/null &&
        vm_run B "set -e; $(nvme_connect "$dev" A B)" >/dev/null || { echo "FAILED: nvme-$id: setup"; return 1; }
    before=$(host_cpu)
    vm_submit A "$(record "nvme-$id") sleep $((secs + 1))"
    a=$VM_ID
    out=$(vm_run B "$(nvme_dev) && $(record "nvme-$id") fio --filename=\$dev --direct=1 --ioengine=libaio --rw=randread --bs=4k --iodepth=32 --time_based --runtime=$secs --size=256M --name=read-iops --output-format=terse --terse-version=3 | cut -d';' -f8") || { echo "$out"; return 1; }
    vm_wait A "$a" 120 >/dev/null
    after=$(host_cpu)
    echo "fio: $(grep -E '^[0-9.]+$' <<<"$out") IOPS"
    host_share "$before" "$after"
    report B "nvme-$id" host
    report A "nvme-$id" target
    vm_run B "$(nvme_disconnect "$dev")" >/dev/null && nvme_target_down A "$dev" >/dev/null &&
        vm_run A "$down" >/dev/null && vm_run B "$down" >/dev/null
}
if ((nvme)); then
    source "$here/scripts/vm-nvme.sh"
    cases=()
    for s in plain siw tcp; do
        nvme_case "$(nvme_stack $s)" || status=1
    done
fi
for c in "${cases[@]}"; do
    IFS='|' read -r name opts test size iters <<<"$c"
    echo "==== $name: $test of $size B, iwarp-bench $opts"
    before=$(host_cpu)
    out=$(vm_pair B "$(record "$name") timeout 900 $bench server --port 7300 $opts" \
        A "$(record "$name") $bench client $B --port 7300 $opts --test $test --sizes $size --iters $iters --stop-server" 900) ||
        { echo "$out"; echo "FAILED: $name"; status=1; continue; }
    after=$(host_cpu)
    grep -E "^$test|MB/s|us" <<<"$out" | grep -v "^\[" | head -4
    host_share "$before" "$after"
    report B "$name" server
    report A "$name" client
done
vm_stop || status=1
exit $status
