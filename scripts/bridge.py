"""What the injectors of the VM tests (inject-reset.py, inject-segment.py) share: a promiscuous
raw socket on the guests' bridge, TCP/IPv4 frames read and made. Standard library only."""
import socket
import struct

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800


def open_bridge(bridge):
    """A raw socket on BRIDGE that sees every frame the bridge forwards between the guests."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((bridge, 0))
    # Promiscuous: the bridge passes frames it forwards between the guests up to us only then.
    SOL_PACKET, PACKET_ADD_MEMBERSHIP, PACKET_MR_PROMISC = 263, 1, 1
    s.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, struct.pack("iHH8s", socket.if_nametoindex(bridge), PACKET_MR_PROMISC, 0, b""))
    s.settimeout(0.2)
    return s


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def parse(frame):
    """The fields of a TCP/IPv4 frame (a dict), or None."""
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
    return {
        "eth_dst": frame[0:6], "eth_src": frame[6:12], "src": ip[12:16], "dst": ip[16:20],
        "sport": sport, "dport": dport, "seq": seq, "ack": ack, "flags": tcp[13],
        "window": struct.unpack("!H", tcp[14:16])[0], "options": tcp[20:doff], "len": total - ihl - doff,
    }


def tcp_frame(eth_dst, eth_src, src, dst, sport, dport, seq, ack, flags, window=0, options=b"", payload=b""):
    """An Ethernet frame holding a TCP/IPv4 segment, checksums and all."""
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, (5 + len(options) // 4) << 4, flags, window, 0, 0) + options + payload
    pseudo = src + dst + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", checksum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0x7777, 0, 64, socket.IPPROTO_TCP, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    return eth_dst + eth_src + struct.pack("!H", ETH_P_IP) + ip + tcp
