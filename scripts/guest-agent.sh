#!/bin/bash
# Runs inside each guest as its only command (virtme-ng --exec). Sets up the guest (our
# kernel's modules, the bridge address), then runs the command files the host drops into the
# shared directory (virtme-ng provides our kernel's modules), one at a time, writing output and exit status back. Ends on "shutdown",
# leaving the guest's dmesg behind.
# Usage: guest-agent.sh NAME SHARED_DIR IP
set -u
name=$1 dir=$2 ip=$3
exec >"$dir/agent.log" 2>&1
echo "agent $name starting on $(uname -r)"
mkdir -p /run/iwarp /var/run/rdma 2>/dev/null
ifc=$(ls /sys/class/net | grep -v '^lo$' | head -1)
ip link set lo up
if [ -n "$ifc" ]; then
    ip link set "$ifc" up
    ip addr add "$ip/24" dev "$ifc"
    # The same host number in a unique-local IPv6 prefix (vm-lib.sh vm_ip6); no duplicate
    # address detection, so it is usable at once.
    ip -6 addr add "fd77::${ip##*.}/64" dev "$ifc" nodad
fi
echo "$ifc" >"$dir/ifname"
grep -m1 'cpu MHz' /proc/cpuinfo >"$dir/cpuinfo"
# Waiting between looks without running a program: under TCG an exec of sleep costs about as
# much CPU as the 0.1 s it waits, taken from the guest's tests and from the other guest's host
# core. read -t on a FIFO that nobody writes is bash's own timer.
mkfifo /run/iwarp/idle && exec {idle}<>/run/iwarp/idle
touch "$dir/ready"
n=0
while [ ! -e "$dir/shutdown" ]; do
    if [ -e "$dir/cmd.$n" ]; then
        IWARP_GUEST=$name IWARP_IF=$ifc bash "$dir/cmd.$n" >"$dir/out.$n" 2>&1 </dev/null
        echo $? >"$dir/rc.$n.tmp"
        mv "$dir/rc.$n.tmp" "$dir/rc.$n"
        n=$((n + 1))
        continue
    fi
    read -r -t 0.1 -u "$idle"
done
# Debug kernels: ask kmemleak for a scan (twice, as it recommends) and keep its report.
if [ -d /sys/kernel/debug ] && { mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug; } &&
    [ -e /sys/kernel/debug/kmemleak ]; then
    echo scan >/sys/kernel/debug/kmemleak
    sleep 1
    echo scan >/sys/kernel/debug/kmemleak
    cat /sys/kernel/debug/kmemleak >"$dir/kmemleak"
fi
dmesg >"$dir/dmesg"
sync
