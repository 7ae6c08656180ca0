#!/usr/bin/env bash
# cargo xtask bench nvme: NVMe over Fabrics between the same two guests, in one run, over
# iwarp.ko (markers and CRC, then neither), over siw, and over NVMe/TCP (what a user without an
# RNIC would run instead): nvmet in A exports a memory-backed null_blk namespace, the host in B
# connects, and fio measures 4 KiB random reads one at a time (latency and IOPS) and 32 deep
# (IOPS), 4 KiB random writes 32 deep, and 128 KiB sequential reads and writes 8 deep (MB/s).
# Around each fio job both guests' busy CPU time is read, so each job also gives the CPU time
# per I/O of host and target together. The stacks take turns, ROUNDS times (1 with --quick, else
# 3), and each figure is the median of its rounds. Prints the figures and the ratios to NVMe/TCP
# and to siw (iwarp plain ÷ siw is like for like: siw runs without markers or CRC).
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
# The stacks (vm-nvme.sh), in the order they take turns.
stacks=("$(nvme_stack mc)" "$(nvme_stack plain)" "$(nvme_stack siw)" "$(nvme_stack tcp)")
# The fio jobs, each run alone: NAME|its options.
jobs=("qd1|--rw=randread --bs=4k --iodepth=1"
    "read-iops|--rw=randread --bs=4k --iodepth=32"
    "write-iops|--rw=randwrite --bs=4k --iodepth=32"
    "read-mbps|--rw=read --bs=128k --iodepth=8"
    "write-mbps|--rw=write --bs=128k --iodepth=8")
# No ramp time: the CPU time read around a job must cover the I/Os fio counts.
fio="fio --output-format=json --direct=1 --ioengine=libaio --time_based --runtime=$secs --size=256M"
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT

# measure STACK ROUND: one turn of STACK; per job, fio's JSON and the guests' busy CPU time
# (1/100 s, A then B) in $data.
measure() {
    local id name dev up down out NQN job a0 b0
    IFS='|' read -r id name dev up down <<<"$1"
    NQN=nqn.2026-11.org.iwarp:bench-$PORT
    echo "---- $name, round $2"
    vm_run A "$up" >/dev/null && vm_run B "$up" >/dev/null || { echo "FAILED: $name: $up"; return 1; }
    local rc=0
    if nvme_target A "$dev" >/dev/null && vm_run B "set -e; $(nvme_connect "$dev" A B); test -n \"\$dev\"" >/dev/null; then
        for job in "${jobs[@]}"; do
            a0=$(vm_busy A) b0=$(vm_busy B)
            out=$(vm_run B "$(nvme_dev) && $fio --filename=\$dev --name=${job%%|*} ${job#*|} >/tmp/fio.json && cat /tmp/fio.json") || {
                echo "$out" | tail -5; echo "FAILED: $name: ${job%%|*}"; rc=1; continue; }
            echo "$(($(vm_busy A) - a0)) $(($(vm_busy B) - b0))" >"$data/$id.$2.${job%%|*}.cpu"
            sed -n '/^{/,$p' <<<"$out" >"$data/$id.$2.${job%%|*}.json"
        done
        vm_run B "$(nvme_disconnect "$dev")" >/dev/null || rc=1
    else
        echo "FAILED: $name: no namespace"
        rc=1
    fi
    nvme_target_down A "$dev" >/dev/null || rc=1
    if ((rc)); then
        vm_run B "dmesg | grep -iE 'nvme|rdma|iwarp|siw' | tail -5"
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
echo "==== NVMe over Fabrics (null_blk), same two TCG guests; fio, libaio, direct; each figure the"
echo "     median of $rounds round(s) of ${secs} s; latency: completion, us; CPU: host and target"
echo "     together, us of busy guest CPU per I/O"
ids=() names=()
for s in "${stacks[@]}"; do
    IFS='|' read -r id name _ <<<"$s"
    ids+=("$id") names+=("$name")
done
python3 - "$data" "$rounds" "${ids[*]}" "${names[@]}" <<'EOF' || status=1
import json, os, statistics, sys
d, rounds, ids, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
name = dict(zip(ids, names))

def cpu_per_io(s, cpu):
    # jiffies (1/100 s) of both guests over the job's I/Os, in us per I/O.
    return (cpu[0] + cpu[1]) * 1e4 / s["total_ios"] if s["total_ios"] else None

# (label, job, direction, how to read the figure, higher is better)
rows = [("4k randread QD1 lat p50", "qd1", "read", lambda s, c: s["clat_ns"]["percentile"]["50.000000"] / 1e3, False),
        ("4k randread QD1 IOPS", "qd1", "read", lambda s, c: s["iops"], True),
        ("4k randread QD32 IOPS", "read-iops", "read", lambda s, c: s["iops"], True),
        ("4k randwrite QD32 IOPS", "write-iops", "write", lambda s, c: s["iops"], True),
        ("128k read QD8 MB/s", "read-mbps", "read", lambda s, c: s["bw_bytes"] / 1e6, True),
        ("128k write QD8 MB/s", "write-mbps", "write", lambda s, c: s["bw_bytes"] / 1e6, True)]
rows += [(f"CPU us/IO, {job}", job, rw, cpu_per_io, False)
         for job, rw in [("qd1", "read"), ("read-iops", "read"), ("write-iops", "write"),
                         ("read-mbps", "read"), ("write-mbps", "write")]]
fig, missing = {}, 0
for i in ids:
    for label, job, rw, get, _ in rows:
        vals = []
        for r in range(1, rounds + 1):
            p = os.path.join(d, f"{i}.{r}.{job}")
            if not os.path.exists(p + ".json"):
                continue
            cpu = [int(x) for x in open(p + ".cpu").read().split()]
            for j in json.load(open(p + ".json"))["jobs"]:
                if j["jobname"] == job and j["error"] == 0:
                    v = get(j[rw], cpu)
                    if v is not None:
                        vals.append(v)
        if vals:
            fig[i, label] = statistics.median(vals)
        else:
            missing += 1
            print(f"FAILED: {name[i]}: {label} not measured")
ours = [i for i in ids if i not in ("siw", "tcp")]
pairs = [(i, b) for b in ("tcp", "siw") for i in ours]
print(f"{'':26}" + "".join(f"{name[i]:>12}" for i in ids)
      + "".join(f"{name[i].replace('iwarp ', '') + ' ÷ ' + name[b].replace('NVMe/', ''):>15}" for i, b in pairs))
for label, *_ in rows:
    line = f"{label:26}" + "".join(f"{fig[i, label]:>12.1f}" if (i, label) in fig else f"{'n/a':>12}" for i in ids)
    for i, b in pairs:
        x, y = fig.get((i, label)), fig.get((b, label))
        line += f"{x / y:>15.2f}" if x and y else f"{'n/a':>15}"
    print(line)
print("(IOPS, MB/s: higher is better for us; latency and CPU per I/O: lower is better; plain ÷ siw is")
print(" like for like; the goals: ≥ 1.0× NVMe/TCP's IOPS and MB/s at ≤ its CPU per I/O, ≥ 2× siw's)")
sys.exit(1 if missing else 0)
EOF
exit $status
