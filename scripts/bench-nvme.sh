#!/usr/bin/env bash
# cargo xtask bench nvme: NVMe over Fabrics between the same two guests, in one run, over
# iwarp.ko (markers and CRC, then neither) and over siw: nvmet in A exports a memory-backed
# null_blk namespace over the RDMA device, nvme-rdma in B connects, and fio measures 4 KiB random
# reads one at a time (latency), 4 KiB random reads and writes 16 deep (IOPS) and 128 KiB
# sequential reads and writes 8 deep (MB/s). The stacks take turns, ROUNDS times (1 with
# --quick, else 3), and each figure is the median of its rounds. Prints the figures and the
# ratios to siw (iwarp plain ÷ siw is like for like: siw runs without markers or CRC).
# Usage: bench-nvme.sh [--quick]
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/vm-lib.sh"
source "$here/scripts/vm-nvme.sh"
ko="$here/target/kmod/release/iwarp.ko"
secs=10 rounds=3
for a in "$@"; do
    case $a in
        --quick) secs=3 rounds=1 ;;
        *) echo "usage: bench-nvme.sh [--quick]" >&2; exit 2 ;;
    esac
done
rounds=${ROUNDS:-$rounds}

vm_start 2 release || exit $?
status=0
PORT=4420
# Each stack: NAME|DEVICE|the commands that make DEVICE in a guest|those that take it away.
stacks=("iwarp M+C|iw0|insmod $ko && $(rdma_link iw0 iwarp)|rdma link delete iw0 && rmmod iwarp"
    "iwarp plain|iw0|insmod $ko iw_markers=0 iw_crc=0 && $(rdma_link iw0 iwarp)|rdma link delete iw0 && rmmod iwarp"
    "siw|siw0|modprobe siw && $(rdma_link siw0 siw)|rdma link delete siw0 && rmmod siw")
# The fio jobs, one after another (stonewall), on the namespace; JSON out.
jobs="--name=lat --rw=randread --bs=4k --iodepth=1 --stonewall
    --name=read-iops --rw=randread --bs=4k --iodepth=16 --stonewall
    --name=write-iops --rw=randwrite --bs=4k --iodepth=16 --stonewall
    --name=read-mbps --rw=read --bs=128k --iodepth=8 --stonewall
    --name=write-mbps --rw=write --bs=128k --iodepth=8 --stonewall"
fio="fio --output-format=json --direct=1 --ioengine=libaio --time_based --runtime=$secs --ramp_time=1 --size=256M"
json_dir=$(mktemp -d)
trap 'rm -rf "$json_dir"' EXIT

# measure STACK ROUND: one turn of STACK; its fio JSON in $json_dir.
measure() {
    local name dev up down out NQN
    IFS='|' read -r name dev up down <<<"$1"
    NQN=nqn.2026-11.org.iwarp:bench-$PORT
    echo "---- $name, round $2"
    vm_run A "$up" >/dev/null && vm_run B "$up" >/dev/null || { echo "FAILED: $name: $up"; return 1; }
    local rc=0
    if nvme_target A "$dev"; then
        out=$(vm_run B "set -e
            $(nvme_connect "$dev" A B)
            $fio --filename=\$dev $(echo $jobs) >/tmp/fio.json
            $(nvme_disconnect)
            echo FIO-JSON; cat /tmp/fio.json") || rc=1
        nvme_target_down A >/dev/null || rc=1
    else
        rc=1
    fi
    if ((rc)); then
        echo "$out" | tail -5
        echo "FAILED: $name, round $2"
        vm_run B "dmesg | grep -iE 'nvme|rdma|iwarp|siw' | tail -5"
    else
        sed -n '/^FIO-JSON$/,$p' <<<"$out" | tail -n +2 >"$json_dir/$name.$2.json"
    fi
    vm_run A "$down" >/dev/null && vm_run B "$down" >/dev/null || { echo "FAILED: $name: $down"; rc=1; }
    PORT=$((PORT + 1))
    return $rc
}

for ((r = 1; r <= rounds; r++)); do
    for s in "${stacks[@]}"; do measure "$s" "$r" || status=1; done
done
vm_stop || status=1

echo
echo "==== NVMe over Fabrics (nvme-rdma to nvmet-rdma, null_blk), same two TCG guests; fio, libaio, direct;"
echo "     each figure the median of $rounds round(s) of ${secs} s; latency: completion, us"
python3 - "$json_dir" "$rounds" "${stacks[@]%%|*}" <<'EOF' || status=1
import json, os, statistics, sys
d, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
# (label, job, direction, how to read the figure)
rows = [("4k randread QD1 lat p50", "lat", "read", lambda s: s["clat_ns"]["percentile"]["50.000000"] / 1e3),
        ("4k randread QD1 lat mean", "lat", "read", lambda s: s["clat_ns"]["mean"] / 1e3),
        ("4k randread QD16 IOPS", "read-iops", "read", lambda s: s["iops"]),
        ("4k randwrite QD16 IOPS", "write-iops", "write", lambda s: s["iops"]),
        ("128k read QD8 MB/s", "read-mbps", "read", lambda s: s["bw_bytes"] / 1e6),
        ("128k write QD8 MB/s", "write-mbps", "write", lambda s: s["bw_bytes"] / 1e6)]
fig, missing = {}, 0
for n in names:
    for label, job, rw, get in rows:
        vals = []
        for r in range(1, rounds + 1):
            p = os.path.join(d, f"{n}.{r}.json")
            if not os.path.exists(p):
                continue
            for j in json.load(open(p))["jobs"]:
                if j["jobname"] == job and j["error"] == 0:
                    vals.append(get(j[rw]))
        if vals:
            fig[n, label] = statistics.median(vals)
        else:
            missing += 1
            print(f"FAILED: {n}: {label} not measured")
print(f"{'':26}" + "".join(f"{n:>14}" for n in names) + "".join(f"{n + ' ÷ siw':>20}" for n in names if n != "siw"))
for label, *_ in rows:
    line = f"{label:26}" + "".join(f"{fig[n, label]:>14.1f}" if (n, label) in fig else f"{'n/a':>14}" for n in names)
    for n in names:
        if n == "siw":
            continue
        a, b = fig.get((n, label)), fig.get(("siw", label))
        line += f"{a / b:>20.2f}" if a and b else f"{'n/a':>20}"
    print(line)
print("(IOPS and MB/s: higher is better for us; latency: lower is better; iwarp plain ÷ siw is like for like)")
sys.exit(1 if missing else 0)
EOF
exit $status
