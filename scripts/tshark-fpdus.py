#!/usr/bin/env python3
"""Checks a capture of an iWARP connection with Wireshark's own dissectors (tshark's iwarp_mpa),
a decoder independent of ours: for each TCP data segment after the MPA exchange, did tshark
find whole FPDUs from its first octet to its last, each with a good CRC? That is what a sender
that aligns FPDUs to segments must produce (Wireshark's MPA dissector itself assumes it).
Usage: tshark-fpdus.py PCAP PORT MIN_PERCENT. Fails below MIN_PERCENT, or on any bad CRC in a
segment tshark otherwise took as whole FPDUs."""
import os
import subprocess
import sys

from pcap import in_stream_order

pcap, port, need = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
# Wireshark's MPA dissector follows each direction in order: a capture of a reordering network
# is shown to it as each end sent it (the segments themselves unchanged).
sorted_pcap = pcap + ".in-order"
in_stream_order(pcap, port, sorted_pcap)
fields = ["tcp.len", "tcp.srcport", "tcp.dstport", "iwarp_mpa.ulpdulength", "iwarp_mpa.crc_check", "iwarp_mpa.crc", "_ws.col.Info"]
cmd = ["tshark", "-r", sorted_pcap, "-o", "tcp.desegment_tcp_streams:FALSE", "--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct",
       "-Y", f"tcp.port == {port} && tcp.len > 0", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]
for f in fields:
    cmd += ["-e", f]
try:
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
except FileNotFoundError:
    sys.exit("# tshark is not installed (scripts/setup.sh installs it)")
finally:
    os.remove(sorted_pcap)

def fpdu_len(ulpdu):
    return 2 + ulpdu + (-(2 + ulpdu)) % 4 + 4

segments = whole = bad_crc = handshake = 0
for line in out.splitlines():
    tcp_len, _, _, ulpdus, good, sent, info = (line.split("\t") + [""] * 7)[:7]
    if "MPA Request" in info or "MPA Reply" in info:
        handshake += 1
        continue
    if handshake < 2:
        continue
    segments += 1
    lens = [int(x) for x in ulpdus.split(",") if x]
    goods = [x for x in good.split(",") if x]
    if lens and sum(fpdu_len(n) for n in lens) == int(tcp_len):
        if len(goods) == len(lens):
            whole += 1
        else:
            bad_crc += 1
pct = 100.0 * whole / segments if segments else 0.0
print(f"# tshark {pcap}: {segments} data segments after {handshake} MPA frames; {whole} decoded by Wireshark's "
      f"iwarp_mpa as whole FPDUs with good CRCs ({pct:.1f} %, at least {need:g} % required); {bad_crc} more whose CRC tshark rejected")
passed = need == 0 or (segments > 0 and pct >= need and bad_crc == 0)
sys.exit(0 if passed else 1)
