# NLM LOCK+UNLOCK pairs, one call in flight, over a raw ONC RPC client (TCP_NODELAY):
# python3 nlmpair.py PORT PAIRS. MOUNTs "/", CREATEs a file over NFSv3, then times pairs.
import socket, struct, sys, time
def p32(x): return struct.pack('>I', x & 0xffffffff)
def p64(x): return struct.pack('>Q', x)
def opaque(b):
    pad = (4 - len(b) % 4) % 4
    return p32(len(b)) + b + b'\0'*pad
class Conn:
    def __init__(s, port, nodelay=True):
        s.s = socket.create_connection(('127.0.0.1', port))
        if nodelay: s.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.xid = 1
    def call(s, prog, vers, proc, args):
        s.xid += 1
        cred = p32(0) + opaque(b'bench') + p32(0) + p32(0) + p32(0)
        msg = p32(s.xid) + p32(0) + p32(2) + p32(prog) + p32(vers) + p32(proc) + p32(1) + opaque(cred) + p32(0) + p32(0) + args
        s.s.sendall(p32(0x80000000 | len(msg)) + msg)
        data = b''
        while True:
            hdr = s.recvn(4); n = struct.unpack('>I', hdr)[0]
            data += s.recvn(n & 0x7fffffff)
            if n & 0x80000000: break
        # xid, REPLY, MSG_ACCEPTED, verf(flavor,len), accept_stat
        xid, mt, rs, vf, vl = struct.unpack('>IIIII', data[:20])
        off = 20 + vl
        ast = struct.unpack('>I', data[off:off+4])[0]
        assert ast == 0, ast
        return data[off+4:]
    def recvn(s, n):
        b = b''
        while len(b) < n:
            c = s.s.recv(n - len(b))
            if not c: raise EOFError
            b += c
        return b
def u32(b, o): return struct.unpack('>I', b[o:o+4])[0], o+4
def getop(b, o):
    n, o = u32(b, o); return b[o:o+n], o + n + (4 - n % 4) % 4
port = int(sys.argv[1]); n = int(sys.argv[2]); nodelay = sys.argv[3] == '1' if len(sys.argv) > 3 else True
c = Conn(port, nodelay)
r = c.call(100005, 3, 1, opaque(b'/'))
st, o = u32(r, 0); assert st == 0; root, o = getop(r, o)
name = b'f%d' % time.time_ns()
sattr = p32(1) + p32(0o644) + p32(0) + p32(0) + p32(0) + p32(0) + p32(0)
r = c.call(100003, 3, 8, opaque(root) + opaque(name) + p32(0) + sattr)
st, o = u32(r, 0); assert st == 0, st; follows, o = u32(r, o); fh, o = getop(r, o)
def alock(svid): return opaque(b'pyhost') + opaque(fh) + opaque(b'oh') + p32(svid) + p64(0) + p64(100)
lat = []
t0 = time.perf_counter()
for i in range(n):
    a = time.perf_counter()
    r = c.call(100021, 4, 2, opaque(b'c') + p32(1) + p32(1) + alock(1) + p32(0) + p32(1))
    ck, o = getop(r, 0); st, o = u32(r, o); assert st == 0, st
    r = c.call(100021, 4, 4, opaque(b'c') + alock(1))
    ck, o = getop(r, 0); st, o = u32(r, o); assert st == 0, st
    lat.append(time.perf_counter() - a)
el = time.perf_counter() - t0
lat.sort()
print("pairs/s %.0f  p50 %.0f us  p90 %.0f us  max %.0f us" % (n/el, lat[n//2]*1e6, lat[int(n*.9)]*1e6, lat[-1]*1e6))
