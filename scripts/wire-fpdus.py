#!/usr/bin/env python3
"""Checks on the wire that FPDUs start TCP segments: reads a capture (classic pcap, Ethernet)
of iWARP connections on PORT without markers, with CRCs, and for every TCP segment that carries
data after the MPA exchange, walks the FPDUs from its first octet by their length fields. A
segment is aligned when it holds whole FPDUs only: the walk ends exactly at its end.

Usage: wire-fpdus.py PCAP PORT MIN-PERCENT
Prints the counts and exits 1 if fewer than MIN-PERCENT of the data segments are aligned.
"""
import struct
import sys


def packets(path):
    """Yields the captured frames of a classic pcap file."""
    with open(path, "rb") as f:
        head = f.read(24)
        magic = struct.unpack("<I", head[:4])[0]
        order = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
        if struct.unpack(order + "I", head[:4])[0] not in (0xA1B2C3D4, 0xA1B23C4D):
            sys.exit(f"{path}: not a pcap file")
        if struct.unpack(order + "I", head[20:24])[0] != 1:
            sys.exit(f"{path}: not an Ethernet capture")
        while rec := f.read(16):
            _, _, incl, orig = struct.unpack(order + "IIII", rec)
            frame = f.read(incl)
            if incl != orig:
                sys.exit(f"{path}: a frame was cut short (capture with the full snap length)")
            yield frame


def tcp_payloads(path, port):
    """Yields (flow, payload) of the IPv4 TCP segments to or from `port` that carry data."""
    for frame in packets(path):
        if len(frame) < 34 or frame[12:14] != b"\x08\x00":
            continue
        ip = frame[14:]
        ihl, proto, total = (ip[0] & 15) * 4, ip[9], struct.unpack(">H", ip[2:4])[0]
        if proto != 6:
            continue
        tcp = ip[ihl:total]
        sport, dport = struct.unpack(">HH", tcp[:4])
        if port not in (sport, dport):
            continue
        payload = tcp[(tcp[12] >> 4) * 4:]
        if payload:
            yield (ip[12:16], sport, ip[16:20], dport), payload


def whole_fpdus(payload):
    """Whether `payload` is whole FPDUs (CRC on, no markers), walked from its first octet."""
    off = 0
    while off + 2 <= len(payload):
        ulpdu = struct.unpack(">H", payload[off:off + 2])[0]
        off += (2 + ulpdu + 3) // 4 * 4 + 4
    return off == len(payload)


def main(path, port, min_percent):
    segments = aligned = mpa = 0
    flows = set()
    for flow, payload in tcp_payloads(path, int(port)):
        if payload.startswith(b"MPA ID Re"):
            mpa += 1
            continue
        flows.add(flow)
        segments += 1
        aligned += whole_fpdus(payload)
    share = 100.0 * aligned / segments if segments else 0.0
    print(f"{path}: {segments} data segments in {len(flows)} directions after {mpa} MPA frames; "
          f"{aligned} hold whole FPDUs from their first octet ({share:.1f} %, at least {min_percent} % required)")
    return 0 if segments and share >= float(min_percent) else 1


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
