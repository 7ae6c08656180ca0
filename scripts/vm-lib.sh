# Host side of the guests, sourced by vm.sh, vm-tests.sh and demo.sh.
#
# vm_start N FLAVOUR   boot N guests (A, B, …) of the release|debug kernel on a bridge
# vm_run G CMD [SECS]  run CMD in guest G; prints its output, returns its status
# vm_submit G CMD      start CMD in guest G without waiting; sets VM_ID for vm_wait
# vm_wait G ID [SECS]  wait for a submitted command; prints its output, returns its status
# vm_pair S SCMD C CCMD [SECS]  start server SCMD in guest S, run client CCMD in guest C (for
#                      at most SECS, 600), then wait for the server; succeeds only if both do
#                      (if the client fails, the server's output follows it)
# vm_pair_on S PORT SCMD C CCMD [SECS]  vm_pair, the client started only once the server
#                      listens on PORT (for clients that do not wait for a listener)
# vm_serve G NAME PORT CMD [SECS]
#                      start server CMD in guest G in the background and wait (SECS, 60) until
#                      a TCP socket listens on PORT there; fails (with CMD's output) otherwise
# vm_served G NAME [SECS]  wait (SECS, 60) for that server to end: its output and status (it is
#                      ended, and fails, if it runs longer)
# vm_unserve G NAME    end that server now (for servers that run until told), and wait (10 s)
#                      until it is gone: its output
# vm_netem G [SPEC]    what the network does to guest G's outgoing packets: a netem qdisc
#                      with SPEC (e.g. "duplicate 1%"), or none when SPEC is empty
# vm_add G             boot one more guest (the next name) on the bridge while the others run
# vm_kill G            pull the plug on guest G (QEMU killed); vm_stop skips its dmesg
# vm_stop              shut the guests down, check their dmesg, remove the namespace
#
# Network: a namespace made for the run holds a bridge and one tap per guest; guest G number i
# (A=1, B=2, …) is 10.77.0.i/24 and fd77::i/64 on it. Nothing else: no QEMU user networking, no
# uplink.
# vm_start installs a trap so guests and namespace go away on exit, failure or Ctrl-C.

VM_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$VM_HERE/scripts/kenv.sh"
VM_NAMES=(A B C D)
VM_NS=""
VM_DIR=""
VM_PIDS=()
VM_COUNT=0
VM_KIMG=""
VM_KVM_OPT=()
# Guests a test killed on purpose (vm_kill).
VM_KILLED=""

vm_log() { printf '==> vm: %s\n' "$*" >&2; }

vm_ip() { # guest name -> address
    local i
    for i in "${!VM_NAMES[@]}"; do [ "${VM_NAMES[$i]}" = "$1" ] && echo "10.77.0.$((i + 1))"; done
}

vm_ip6() { # guest name -> IPv6 address
    local v4
    v4=$(vm_ip "$1")
    echo "fd77::${v4##*.}"
}

vm_index() {
    local i
    for i in "${!VM_NAMES[@]}"; do [ "${VM_NAMES[$i]}" = "$1" ] && echo "$i"; done
}

# KVM only helps if a stock kernel actually boots with it; on these machines it does not.
vm_accel() {
    local kimg=$1 probe
    probe="$CACHE/kvm-probe-$(uname -r)-$(basename "$(dirname "$(dirname "$(dirname "$(dirname "$kimg")")")")")"
    if [ -f "$probe" ]; then cat "$probe"; return; fi
    local verdict=tcg
    if [ -w /dev/kvm ]; then
        if timeout 25 vng --run "$kimg" --memory 512M --cpus 1 --exec 'echo KVM_PROBE_OK' </dev/null 2>/dev/null | grep -q KVM_PROBE_OK; then
            verdict=kvm
        fi
    fi
    echo "$verdict" >"$probe"
    echo "$verdict"
}

vm_start() {
    local n=${1:-2} flavour=${2:-release} kdir kimg accel i name
    kdir=$(kernel_build_dir "$flavour")
    kimg="$kdir/arch/x86/boot/bzImage"
    if [ ! -f "$kdir/.built" ]; then
        echo "SKIP: no $flavour test kernel at $kdir (run 'cargo xtask kernel${flavour/release/}')" >&2
        return 77
    fi
    command -v vng >/dev/null && command -v qemu-system-x86_64 >/dev/null || {
        echo "SKIP: virtme-ng or QEMU missing (run 'cargo xtask setup')" >&2
        return 77
    }
    VM_COUNT=$n
    VM_DIR=$(mktemp -d /tmp/iwarp-vm.XXXXXX)
    VM_NS="iwarp-$$"
    trap vm_stop EXIT
    trap 'VM_ABORT=1; vm_stop; exit 130' INT TERM
    accel=$(vm_accel "$kimg")
    local kvm_opt=(--disable-kvm)
    if [ "$accel" = kvm ]; then kvm_opt=(); vm_log "KVM works here: using it"; else
        vm_log "NOTICE: KVM cannot boot this kernel here; guests run under TCG (software emulation, slow)"
    fi
    ip netns add "$VM_NS"
    ip -n "$VM_NS" link set lo up
    ip -n "$VM_NS" link add br0 type bridge
    ip -n "$VM_NS" link set br0 up
    VM_KIMG=$kimg
    VM_KVM_OPT=("${kvm_opt[@]}")
    for ((i = 0; i < n; i++)); do vm_launch "$i"; done
    local deadline=$((SECONDS + 180))
    for ((i = 0; i < n; i++)); do vm_booted "$i" "$deadline" || return 1; done
}

# Starts guest number i (0 = A) on the bridge, in the background.
vm_launch() {
    local i=$1 name=${VM_NAMES[$1]}
    mkdir -p "$VM_DIR/$name"
    ip -n "$VM_NS" tuntap add "tap$name" mode tap
    ip -n "$VM_NS" link set "tap$name" master br0
    ip -n "$VM_NS" link set "tap$name" up
    # vng runs in the namespace so QEMU can open the tap; its console goes to a log.
    # Under TCG, starting a program was most of a test's time (an exec of /bin/true took 86 ms;
    # now 31). User mappings stay put (norandmaps), so QEMU reuses the code it translated for the
    # last process instead of translating ld.so and libc again at new addresses; and the guest
    # caches the root's pages and names (9p, cache=loose). Safe because nothing a guest reads
    # from the host's root changes while it runs: all is built before it boots, and host and
    # guest exchange files through the rwdir, a mount of its own.
    ip netns exec "$VM_NS" setsid vng --run "$VM_KIMG" "${VM_KVM_OPT[@]}" --disable-microvm \
        --cpus 1 --memory 1G --rwdir="$VM_DIR/$name" --cwd "$VM_HERE" --force-9p \
        --append "tsc=reliable no5lvl norandmaps rootflags=version=9p2000.L,trans=virtio,access=any,msize=524288,cache=loose" \
        --qemu-opts="-netdev tap,id=n0,ifname=tap$name,script=no,downscript=no -device virtio-net-pci,netdev=n0,mac=52:54:00:77:00:0$((i + 1))" \
        --exec "bash $VM_HERE/scripts/guest-agent.sh $name $VM_DIR/$name $(vm_ip "$name")" \
        </dev/null >"$VM_DIR/$name/console.log" 2>&1 &
    VM_PIDS[$i]=$!
}

# Waits until guest number i is ready (until SECONDS reaches DEADLINE).
vm_booted() {
    local i=$1 deadline=$2 name=${VM_NAMES[$1]}
    while [ ! -e "$VM_DIR/$name/ready" ]; do
        if ! kill -0 "${VM_PIDS[$i]}" 2>/dev/null || [ $SECONDS -ge "$deadline" ]; then
            vm_log "guest $name failed to boot; console:"
            tail -30 "$VM_DIR/$name/console.log" >&2
            return 1
        fi
        sleep 0.5
    done
    vm_log "guest $name booted ($(vm_ip "$name"), $(cat "$VM_DIR/$name/ifname"), $(cat "$VM_DIR/$name/cpuinfo"))"
}

# vm_add G: boots one more guest on the bridge while the others run (the next name: C after A
# and B).
vm_add() {
    local i
    i=$(vm_index "$1")
    [ "$i" = "$VM_COUNT" ] || { vm_log "guest $1 is not the next one to add"; return 1; }
    vm_launch "$i"
    VM_COUNT=$((VM_COUNT + 1))
    vm_booted "$i" $((SECONDS + 180))
}

# vm_kill G: pulls the plug on guest G (its QEMU is killed, as a machine that loses power); it
# leaves no dmesg, so vm_stop does not check one.
vm_kill() {
    local i
    i=$(vm_index "$1")
    kill -- "-${VM_PIDS[$i]}" 2>/dev/null
    wait "${VM_PIDS[$i]}" 2>/dev/null
    VM_KILLED+=" $1 "
}

vm_submit() {
    local g=$1 cmd=$2 id
    # The next number is counted from the files, not kept in a variable, so submitting from a
    # subshell (out=$(vm_pair ...)) cannot make two commands share a number.
    id=$(find "$VM_DIR/$g" -maxdepth 1 -name 'cmd.*' ! -name '*.tmp' | wc -l)
    printf '%s\n' "$cmd" >"$VM_DIR/$g/cmd.$id.tmp"
    mv "$VM_DIR/$g/cmd.$id.tmp" "$VM_DIR/$g/cmd.$id"
    VM_ID=$id
}

vm_wait() {
    local g=$1 id=$2 secs=${3:-600} deadline i
    i=$(vm_index "$g")
    deadline=$((SECONDS + secs))
    while [ ! -e "$VM_DIR/$g/rc.$id" ]; do
        if [ $SECONDS -ge $deadline ] || ! kill -0 "${VM_PIDS[$i]}" 2>/dev/null; then
            cat "$VM_DIR/$g/out.$id" 2>/dev/null
            vm_log "guest $g: command $id timed out or the guest died"
            return 124
        fi
        sleep 0.2
    done
    cat "$VM_DIR/$g/out.$id"
    return "$(cat "$VM_DIR/$g/rc.$id")"
}

vm_run() {
    vm_submit "$1" "$2"
    vm_wait "$1" "$VM_ID" "${3:-600}"
}

# vm_busy G: the CPU time guest G has spent so far, softirq and interrupts included (all but
# idle and iowait), in 1/100 s.
vm_busy() { vm_run "$1" "awk '/^cpu / { print \$2 + \$3 + \$4 + \$7 + \$8 + \$9 }' /proc/stat"; }

# ratio A B: A ÷ B to two places, or n/a when either is missing (the benchmarks' tables).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }

# upgraded N OUTPUT: OUTPUT of programs run under the sockets library with IWARP_SOCKETS_LOG=1
# says N connections were upgraded (a line per connection and end), and shows it.
upgraded() {
    local n
    n=$(grep -c 'iwarp-preload: descriptor .* upgraded' <<<"$2")
    echo "$n connection(s) upgraded (want $1)"
    [ "$n" = "$1" ]
}

vm_pair() {
    vm_submit "$1" "$2"
    local server=$VM_ID
    if vm_run "$3" "$4" "${5:-600}"; then
        vm_wait "$1" "$server" 300
        return
    fi
    # The client failed: the server's side of the story (it may have failed first).
    echo "--- server in $1:"
    vm_wait "$1" "$server" 30
    return 1
}

vm_pair_on() {
    vm_serve "$1" pair "$2" "$3" || return 1
    if vm_run "$4" "$5" "${6:-600}"; then
        vm_served "$1" pair 300
        return
    fi
    echo "--- server in $1:"
    vm_served "$1" pair 30
    return 1
}

# What networks do to packets, for netem (vm_netem): NAME|SPEC. The VM tests run each under
# heavy traffic (on GSO-sized packets).
VM_NET_FAULTS=("duplicate-1pct|duplicate 1%" "duplicate-5pct|duplicate 5%" "reorder-25pct|delay 2ms reorder 25% 50%"
    "loss-1pct|loss 1%" "corrupt-0.1pct|corrupt 0.1%" "all-at-once|delay 2ms reorder 5% 50% loss 1% duplicate 1% corrupt 0.1%")

# netem_reorder N: the netem spec that holds N % of the packets 2 ms and sends the others at
# once (netem's own percentage counts those sent at once). The benchmarks' "reorder N %".
netem_reorder() { echo "delay 2ms reorder $((100 - $1))% 50%"; }

# one_packet_per_fault: netem acts on what leaves an interface, which with GSO is a whole GSO
# packet (up to 64 KiB): a stack that builds smaller ones would take more drops and holds per
# octet. With gso_max_segs 1 in both guests every skb is one wire packet, for every stack alike.
one_packet_per_fault() {
    vm_run A 'ip link set dev $IWARP_IF gso_max_segs 1' >/dev/null && vm_run B 'ip link set dev $IWARP_IF gso_max_segs 1' >/dev/null
}

# Servers started by vm_serve live in the guest's /run/iwarp/serve.NAME.{sh,out,pid,rc}.
vm_serve() {
    local g=$1 f=/run/iwarp/serve.${2//\//-} port=$3 cmd=$4 secs=${5:-60}
    vm_run "$g" "rm -f $f.*
# A server ended just before may still hold the port for a moment.
while [ \$SECONDS -lt 10 ] && ss -Hltn 'sport = :$port' | grep -q .; do sleep 0.2; done
cat >$f.sh <<'VM_SERVE_EOF'
$cmd
VM_SERVE_EOF
setsid bash -c 'bash $f.sh; echo \$? >$f.rc.tmp; mv $f.rc.tmp $f.rc' >$f.out 2>&1 </dev/null &
echo \$! >$f.pid
while [ \$SECONDS -lt $secs ]; do
    ss -Hltn 'sport = :$port' | grep -q . && exit 0
    [ -e $f.rc ] && break
    sleep 0.1
done
echo 'server $2 did not listen on port $port:'; cat $f.out; kill -- -\$(cat $f.pid) 2>/dev/null; exit 1"
}

vm_served() {
    local g=$1 f=/run/iwarp/serve.${2//\//-} secs=${3:-60}
    vm_run "$g" "while [ \$SECONDS -lt $secs ] && [ ! -e $f.rc ]; do sleep 0.1; done
cat $f.out
[ -e $f.rc ] && exit \$(cat $f.rc)
kill -- -\$(cat $f.pid) 2>/dev/null; echo 'server $2 still running after ${secs} s: ended it'; exit 1"
}

vm_unserve() {
    local f=/run/iwarp/serve.${2//\//-}
    vm_run "$1" "pid=\$(cat $f.pid); kill -- -\$pid 2>/dev/null
while [ \$SECONDS -lt 10 ] && kill -0 -- -\$pid 2>/dev/null; do sleep 0.1; done
cat $f.out"
}

vm_netem() {
    local g=$1 spec=${2:-}
    if [ -z "$spec" ]; then
        vm_run "$g" 'tc qdisc del dev $IWARP_IF root 2>/dev/null; true' >/dev/null
    else
        vm_run "$g" "modprobe sch_netem && tc qdisc replace dev \$IWARP_IF root netem $spec" >/dev/null
    fi
}

# Lines that mean the kernel is unhappy. The out-of-tree taint of loading iwarp.ko is expected.
VM_BAD_DMESG='WARNING:|BUG:|Oops|KASAN|KFENCE|suspected memory leak|possible recursive locking|circular locking|inconsistent lock state|sleeping function called from invalid context|Call Trace:|taints kernel'
VM_OK_DMESG='loading out-of-tree module taints kernel'
VM_DUMPS_BEGIN='iwarp-test: expected stack dumps begin'
VM_DUMPS_END='iwarp-test: expected stack dumps end'

# vm_without_expected_dumps DMESG: DMESG without the call traces a test made the kernel dump on
# purpose. The test brackets them (VM_DUMPS_BEGIN, VM_DUMPS_END), and inside the bracket only
# the first "Call Trace:" within 8 lines of the OOM killer's or fault injection's header is
# excused (the header, its parameters, CPU, taint, hardware and, from a kworker, its workqueue
# come first): any other (a stall, a lockdep report, a failed allocation's warning) still counts.
vm_without_expected_dumps() {
    awk -v begin="$VM_DUMPS_BEGIN" -v end="$VM_DUMPS_END" '
        index($0, begin) { inside = 1 }
        index($0, end) { inside = 0 }
        /invoked oom-killer|FAULT_INJECTION: forcing a failure/ { near = 9 }
        { if (near > 0) near-- }
        inside && near > 0 && /Call Trace:/ { near = 0; next }
        { print }' "$1"
}

vm_stop() {
    trap - EXIT INT TERM
    [ -n "$VM_DIR" ] || return 0
    local i name status=0 deadline
    for ((i = 0; i < VM_COUNT; i++)); do touch "$VM_DIR/${VM_NAMES[$i]}/shutdown"; done
    # Guests finish their current command first; when interrupted, do not wait for it.
    local grace=60
    [ -n "${VM_ABORT:-}" ] && grace=2
    deadline=$((SECONDS + grace))
    for ((i = 0; i < VM_COUNT; i++)); do
        while kill -0 "${VM_PIDS[$i]}" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
        if kill -0 "${VM_PIDS[$i]}" 2>/dev/null; then
            vm_log "guest ${VM_NAMES[$i]} did not power off; ending it"
            kill -- "-${VM_PIDS[$i]}" 2>/dev/null
        fi
        wait "${VM_PIDS[$i]}" 2>/dev/null
    done
    for ((i = 0; i < VM_COUNT; i++)); do
        name=${VM_NAMES[$i]}
        if [[ $VM_KILLED == *" $name "* ]]; then
            vm_log "guest $name was killed by a test: no dmesg to check"
            continue
        fi
        local d="$VM_DIR/$name/dmesg"
        if [ ! -s "$d" ]; then
            vm_log "guest $name left no dmesg (crashed?); console tail:"
            tail -20 "$VM_DIR/$name/console.log" >&2
            status=1
            continue
        fi
        local bad
        bad=$(vm_without_expected_dumps "$d" | grep -E "$VM_BAD_DMESG" | grep -vE "$VM_OK_DMESG")
        # kmemleak (debug kernel): leaks whose allocation backtrace passes through our module.
        if [ -s "$VM_DIR/$name/kmemleak" ] && grep -q iwarp "$VM_DIR/$name/kmemleak"; then
            bad+=$'\n'"kmemleak: leaks allocated by iwarp.ko:"$'\n'"$(cat "$VM_DIR/$name/kmemleak")"
        fi
        if [ -n "$bad" ]; then
            vm_log "guest $name dmesg is NOT clean:"
            printf '%s\n' "$bad" >&2
            vm_log "guest $name dmesg from the first bad line on (up to 150 lines):"
            vm_without_expected_dumps "$d" | grep -m1 -A150 -E "$VM_BAD_DMESG" | grep -vE "$VM_OK_DMESG" >&2
            status=1
        else
            vm_log "guest $name dmesg clean"
        fi
    done
    [ -n "$VM_NS" ] && ip netns del "$VM_NS" 2>/dev/null
    if [ -n "${IWARP_KEEP_VM_DIR:-}" ]; then vm_log "guest files kept in $VM_DIR"; else rm -rf "$VM_DIR"; fi
    VM_DIR=""
    return $status
}
