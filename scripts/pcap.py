"""Classic pcap captures (Ethernet, IPv4 TCP), read and rewritten with the standard library only:
what the wire checks (wire-fpdus.py, tshark-fpdus.py) share."""
import struct
import sys


def records(path):
    """Yields (byte order, global header, record header, frame) of each captured frame."""
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
            yield order, head, rec, frame


def segment(frame, port):
    """(flow, sequence number, payload) of an IPv4 TCP segment to or from `port`, else None."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[14:]
    ihl, proto, total = (ip[0] & 15) * 4, ip[9], struct.unpack(">H", ip[2:4])[0]
    if proto != 6:
        return None
    tcp = ip[ihl:total]
    sport, dport, seq = struct.unpack(">HHI", tcp[:8])
    if port not in (sport, dport):
        return None
    return (ip[12:16], sport, ip[16:20], dport), seq, tcp[(tcp[12] >> 4) * 4:]


def tcp_payloads(path, port):
    """Yields (flow, payload) of the segments to or from `port` that carry data."""
    for _, _, _, frame in records(path):
        s = segment(frame, port)
        if s and s[2]:
            yield s[0], s[2]


def in_stream_order(path, port, out):
    """Writes to `out` the data segments on `port`, as each end sent them: the MPA exchange
    first, then each direction by sequence number (what a capture of a reordering network shows
    in arrival order). Returns how many were written."""
    head, order, kept, first = None, "<", [], {}
    for order, head, rec, frame in records(path):
        s = segment(frame, port)
        if not s or not s[2]:
            continue
        flow, seq, payload = s
        first.setdefault(flow, seq)
        mpa = payload.startswith(b"MPA ID Re")
        # Signed distance from the flow's first segment to arrive (which reordering may have
        # brought early), so the sort wraps neither way.
        rel = (seq - first[flow] + (1 << 31)) % (1 << 32) - (1 << 31)
        kept.append((not mpa, flow != next(iter(first)), rel, rec, frame))
    kept.sort(key=lambda k: k[:3])
    with open(out, "wb") as f:
        if head:
            f.write(head)
        for *_, rec, frame in kept:
            f.write(rec + frame)
    return len(kept)
