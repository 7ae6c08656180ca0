# NVMe over Fabrics between the guests, for vm-tests.sh and bench-nvme.sh (sourced after
# vm-lib.sh): an RDMA link on the guest's netdev, nvmet exporting a memory-backed namespace over
# one RDMA device, or over NVMe/TCP where the device is named `tcp`. The caller sets NQN and PORT.

# rdma_link NAME TYPE: the command that adds RDMA link NAME of TYPE on the guest's netdev.
rdma_link() { echo "rdma link add $1 type $2 netdev \$IWARP_IF"; }
# only_rdma_link NAME: deletes every RDMA link of the guest but NAME (siw0 of the interop tests):
# rdma_cm takes the first device whose GID matches an address, and siw0 shares iw0's netdev.
only_rdma_link() {
    echo "for d in \$(rdma link show | awk '{print \$2}' | cut -d/ -f1 | sort -u); do [ \$d = $1 ] || rdma link delete \$d; done"
}
# nvme_stack ID: the stack ID (mc: iwarp.ko with markers and CRC, plain: without either, siw,
# tcp: NVMe/TCP) as the benchmarks take it: ID|NAME|DEVICE (tcp for NVMe/TCP)|the commands that
# make DEVICE in a guest|those that take it away. iwarp.ko is $ko.
nvme_stack() {
    case $1 in
        mc) echo "mc|iwarp M+C|iw0|insmod $ko && $(rdma_link iw0 iwarp)|rdma link delete iw0 && rmmod iwarp" ;;
        plain) echo "plain|iwarp plain|iw0|insmod $ko iw_markers=0 iw_crc=0 && $(rdma_link iw0 iwarp)|rdma link delete iw0 && rmmod iwarp" ;;
        siw) echo "siw|siw|siw0|modprobe siw && $(rdma_link siw0 siw)|rdma link delete siw0 && rmmod siw" ;;
        tcp) echo "tcp|NVMe/TCP|tcp|true|true" ;;
    esac
}
# nvme_transport DEV: the NVMe transport over device DEV: tcp for `tcp`, else rdma.
nvme_transport() { if [ "$1" = tcp ]; then echo tcp; else echo rdma; fi; }
# nvme_target G DEV: nvmet in guest G exports a memory-backed null_blk namespace over its RDMA
# device DEV (the only RDMA link G keeps) or over TCP, at G's address, port PORT (subsystem NQN).
nvme_target() {
    local tr
    tr=$(nvme_transport "$2")
    vm_run "$1" "set -e
        $([ "$tr" = rdma ] && only_rdma_link "$2")
        a=\$(ip -4 -o addr show \$IWARP_IF | awk '{print \$4}' | cut -d/ -f1)
        modprobe null_blk nr_devices=1 memory_backed=1 gb=1
        modprobe nvmet-$tr
        mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
        cd /sys/kernel/config/nvmet
        mkdir subsystems/$NQN ports/1 subsystems/$NQN/namespaces/1
        echo 1 >subsystems/$NQN/attr_allow_any_host
        echo -n /dev/nullb0 >subsystems/$NQN/namespaces/1/device_path
        echo 1 >subsystems/$NQN/namespaces/1/enable
        echo $tr >ports/1/addr_trtype; echo ipv4 >ports/1/addr_adrfam
        echo \$a >ports/1/addr_traddr; echo $PORT >ports/1/addr_trsvcid
        ln -s /sys/kernel/config/nvmet/subsystems/$NQN ports/1/subsystems/$NQN
        echo nvmet listens on \$a:$PORT over $2"
}
# nvme_dev: the commands that set $dev to the block device of $NQN's namespace, and fail while
# there is none: a controller another test left behind has a namespace of its own.
nvme_dev() {
    echo "dev=; for c in /sys/class/nvme/nvme*; do [ \"\$(cat \$c/subsysnqn 2>/dev/null)\" = $NQN ] && [ -b /dev/\${c##*/}n1 ] && dev=/dev/\${c##*/}n1; done; [ -n \"\$dev\" ]"
}
# nvme_connect DEV T G [OPTIONS]: the commands with which guest G connects over its RDMA device
# DEV (the only RDMA link it keeps) or TCP to nvme_target's namespace in guest T, with nvme
# connect's OPTIONS: its block device in $dev.
nvme_connect() {
    local tr
    tr=$(nvme_transport "$1")
    echo "$([ "$tr" = rdma ] && only_rdma_link "$1")
        modprobe nvme-$tr
        nvme connect -t $tr -a $(vm_ip "$2") -s $PORT -n $NQN -q nqn.2026-11.org.iwarp:host-$3 ${4:-}
        for i in \$(seq 300); do $(nvme_dev) && break; sleep 0.1; done
        [ -n \"\$dev\" ] || { echo 'no namespace within 30 s'; false; }"
}
# nvme_disconnect DEV: the commands that disconnect nvme_connect's namespace over DEV and unload
# the host.
nvme_disconnect() {
    echo "nvme disconnect -n $NQN
        rmmod nvme-$(nvme_transport "$1") nvme-fabrics nvme-core"
}
# nvme_target_down G DEV: takes nvme_target's export over DEV in G down.
nvme_target_down() {
    vm_run "$1" "cd /sys/kernel/config/nvmet
        rm -f ports/1/subsystems/$NQN
        rmdir subsystems/$NQN/namespaces/1 subsystems/$NQN ports/1
        rmmod nvmet-$(nvme_transport "$2") nvmet null_blk"
}
