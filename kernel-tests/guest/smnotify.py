#!/usr/bin/env python3
"""Sends one NSM SM_NOTIFY (program 100024 version 1 procedure 6) over TCP, for the NLM
checks (guest/nlm.sh): "host MON_NAME rebooted and now has NSM state STATE".

  smnotify.py SERVER PORT MON_NAME STATE

nfs-utils' sm-notify sends SM_NOTIFY over UDP only, through the portmapper; granary
serves NSM over UDP too (server/tests/portmap.rs runs the real sm-notify), and this
check sends the same call, as a rebooted client's statd would, over TCP.
Prints "replied" when the server accepted the call, else what went wrong.
"""
import os
import socket
import struct
import sys


def xdr_string(b):
    pad = (4 - len(b) % 4) % 4
    return struct.pack(">I", len(b)) + b + b"\0" * pad


def main():
    server, port, name, state = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    xid = int.from_bytes(os.urandom(4), "big")
    # call: xid, CALL, rpcvers 2, prog, vers, proc, AUTH_NONE cred and verifier
    call = struct.pack(">IIIIII", xid, 0, 2, 100024, 1, 6) + struct.pack(">IIII", 0, 0, 0, 0)
    call += xdr_string(name.encode()) + struct.pack(">i", state)
    with socket.create_connection((server, port), timeout=20) as s:
        s.sendall(struct.pack(">I", 0x80000000 | len(call)) + call)
        head = s.recv(4, socket.MSG_WAITALL)
        size = struct.unpack(">I", head)[0] & 0x7FFFFFFF
        reply = s.recv(size, socket.MSG_WAITALL)
    rxid, mtype, stat = struct.unpack(">III", reply[:12])
    if rxid != xid or mtype != 1 or stat != 0:
        print(f"rejected (xid match {rxid == xid}, type {mtype}, reply_stat {stat})")
        return
    # accepted reply: verifier (flavor, length, body), then accept_stat
    vlen = struct.unpack(">I", reply[16:20])[0]
    off = 20 + (vlen + 3) // 4 * 4
    accept = struct.unpack(">I", reply[off:off + 4])[0]
    print("replied" if accept == 0 else f"accept_stat {accept}")


main()
