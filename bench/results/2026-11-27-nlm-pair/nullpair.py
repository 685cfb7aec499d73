# NULL+NULL pairs of one program (python3 nullpair.py PORT PAIRS PROG VERS), the floor for nlmpair.py.
import sys, time
sys.argv += []
exec(open(__file__.replace('nullpair.py', 'nlmpair.py')).read().split("port = int")[0])
port = int(sys.argv[1]); n = int(sys.argv[2]); prog = int(sys.argv[3]); vers = int(sys.argv[4])
c = Conn(port)
lat = []
t0 = time.perf_counter()
for i in range(n):
    a = time.perf_counter()
    c.call(prog, vers, 0, b''); c.call(prog, vers, 0, b'')
    lat.append(time.perf_counter() - a)
el = time.perf_counter() - t0
lat.sort()
print("NULL pairs prog %d: pairs/s %.0f  p50 %.0f us  p90 %.0f us  max %.0f us" % (prog, n/el, lat[n//2]*1e6, lat[int(n*.9)]*1e6, lat[-1]*1e6))
