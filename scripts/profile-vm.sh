#!/usr/bin/env bash
# cargo xtask bench profile: where the guests' CPU time goes in the runs whose goals issue 9 sets,
# so a missed goal comes with its reason. Each case runs iwarp-bench between two guests under
# `perf record -a` (the cpu-clock event: TCG has no PMU, and it samples at the tick, a few hundred
# samples a second) around both the server (guest B) and the client (guest A), and prints each
# guest's hottest symbols (kernel, iwarp.ko, user space) and its time by area: CRC, copies,
# iwarp.ko, TCP/IP, virtio-net, idle. Usage: profile-vm.sh [--quick]
# Cases: 64 KiB write_bw with markers and CRC and without either; 8 B write_lat and send_lat with
# markers and CRC. Samples stay in the guests' /run; nothing is written to the tree.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/vm-lib.sh"
ko="$here/target/kmod/release/iwarp.ko"
bench="$here/target/release/iwarp-bench"
quick=0
for a in "$@"; do
    case $a in
        --quick) quick=1 ;;
        *) echo "usage: profile-vm.sh [--quick]" >&2; exit 2 ;;
    esac
done
command -v perf >/dev/null || { echo "SKIP: perf is not installed (cargo xtask setup installs linux-perf)" >&2; exit 1; }
bw_iters=$((quick ? 2000 : 8000)) lat_iters=$((quick ? 2000 : 8000))
top=$((quick ? 12 : 25))

vm_start 2 release || exit $?
B=$(vm_ip B)
vm_run A "insmod $ko" >/dev/null && vm_run B "insmod $ko" >/dev/null || { vm_stop; echo "FATAL: insmod failed" >&2; exit 1; }
status=0
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
# report G CASE: guest G's profile of CASE (module symbols from kallsyms: the module was loaded
# from the tree, not /lib/modules), hottest symbols first, then by area.
report() {
    local f=/run/iwarp/perf.$2.data
    echo "-- guest $1 ($([ "$1" = A ] && echo client || echo server))"
    vm_run "$1" "perf report -i $f --kallsyms /proc/kallsyms --no-children --sort dso,sym --stdio 2>/dev/null >$f.txt
grep -m1 '^# Samples' $f.txt
grep -E '^ +[0-9.]+%' $f.txt | head -$top
echo '  by area:'
grep -E '^ +[0-9.]+%' $f.txt | sed 's/%//' | awk '$areas' | sort -rn" | python3 -c "$demangle" || status=1
}
record() { echo "perf record -a -e cpu-clock -o /run/iwarp/perf.$1.data --"; }
for c in "mc-bw|--markers 1 --crc 1|write_bw|65536|$bw_iters" "plain-bw|--markers 0 --crc 0|write_bw|65536|$bw_iters" \
    "mc-write-lat|--markers 1 --crc 1|write_lat|8|$lat_iters" "mc-send-lat|--markers 1 --crc 1|send_lat|8|$lat_iters"; do
    IFS='|' read -r name opts test size iters <<<"$c"
    echo "==== $name: $test of $size B, iwarp-bench $opts"
    out=$(vm_pair B "$(record "$name") timeout 900 $bench server --port 7300 $opts" \
        A "$(record "$name") $bench client $B --port 7300 $opts --test $test --sizes $size --iters $iters --stop-server" 900) ||
        { echo "$out"; echo "FAILED: $name"; status=1; continue; }
    grep -E "^$test|MB/s|us" <<<"$out" | grep -v "^\[" | head -4
    report B "$name"
    report A "$name"
done
vm_stop || status=1
exit $status
