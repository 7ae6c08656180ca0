#!/usr/bin/env python3
"""Zero-copy writes over the sockets preload library: blocking writes of 64 KiB and more go by
RDMA Write straight from the program's buffer (without markers and CRCs), and must not return
while the module may still read it. The sender reuses one buffer, filling it anew after each
write returns: octets read from it too late would arrive changed, and the hashes differ. It
asks iwarp.ko (`iwarp stat`) how much of its QP's payload went by zero copy.

Usage: sockets-zerocopy.py serve PORT | send HOST PORT MIB
Both print the SHA-256 of the stream they read or sent, for the caller to compare.
"""
import hashlib
import os
import re
import socket
import subprocess
import sys

from sockets_ends import connect, main, serve_hashed

# Write sizes in turn: large ones (zero copy, some cut at the ring's end or by its room), and
# small ones (copied into the send ring) between them.
SIZES = [64 << 10, 100_000, (1 << 20) + 13, 7, 300_001, 4096, 3 << 20]



def sent_by_module():
    """(zero copy, copied) payload octets of this process's QP, from `iwarp stat`."""
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "iwarp")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_PRELOAD", "IWARP_SOCKETS"))}
    out = subprocess.run([tool, "stat"], env=env, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith(f"pid {os.getpid()} "):
            return int(re.search(r"sent_zero_copy (\d+)", line)[1]), int(re.search(r"sent_copied (\d+)", line)[1])
    sys.exit(f"send: no QP of pid {os.getpid()} in `iwarp stat`:\n{out}")


def send(host, port, mib):
    c = connect(host, port)
    buf = bytearray(max(SIZES))
    h, total, large, i = hashlib.sha256(), 0, 0, 0
    while total < mib << 20:
        n = SIZES[i % len(SIZES)]
        i += 1
        buf[:n] = os.urandom(n)
        h.update(buf[:n])
        c.sendall(memoryview(buf)[:n])
        total += n
        large += n if n >= 64 << 10 else 0
    zero_copy, copied = sent_by_module()
    c.shutdown(socket.SHUT_WR)
    c.recv(1)
    print(f"send: {total} octets in {i} writes, {large} in writes of 64 KiB or more; the module sent {zero_copy} by zero copy, {copied} copied")
    print(h.hexdigest())
    # Most of the large writes' octets go by reference (a message cut below a page at the
    # ring's end is copied), and the small writes' octets are copied.
    if zero_copy < large * 9 // 10 or copied < total - large:
        print("send: the large writes did not go by zero copy")
        sys.exit(1)


if __name__ == "__main__":
    main(send, serve=serve_hashed)
