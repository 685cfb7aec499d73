import re,datetime,sys
L=open(sys.argv[1]).read().splitlines()
fileid=sys.argv[2]
ev=[]
def ts(x): return datetime.datetime.fromisoformat(x.rstrip('Z')).timestamp()
for l in L:
    if ' objseq: ' not in l: continue
    t=ts(l.split()[0])
    m=re.search(r'BG_UPLOAD n=(\d+) ms=(\d+)',l)
    if m: ev.append(('up',t-int(m.group(2))/1000,t))
    m=re.search(r'MAKE_ROOM file=(\d+) lock_ms=(\d+) ms=(\d+) how="(\w+)"',l)
    if m and m.group(4)!="none": ev.append(('pub',t-int(m.group(3))/1000,t,m.group(1)))
pubs=[e for e in ev if e[0]=='pub' and e[3]==fileid]
t0=min(p[1] for p in pubs)-0.3; t1=max(p[2] for p in pubs)
ups=[e for e in ev if e[0]=='up' and e[2]>=t0 and e[1]<=t1]
step=0.001; n=int((t1-t0)/step)
infl=[0]*n; blk=[0]*n
for u in ups:
    for i in range(max(0,int((u[1]-t0)/step)),min(n,int((u[2]-t0)/step))): infl[i]+=1
for p in pubs:
    for i in range(max(0,int((p[1]-t0)/step)),min(n,int((p[2]-t0)/step))): blk[i]=1
print('window s',round(t1-t0,2),'uploads',len(ups),'avg in flight',round(sum(infl)/n,2))
from collections import Counter
c=Counter(infl); print('time share by uploads in flight',{k:round(v/n,2) for k,v in sorted(c.items())})
bb=[infl[i] for i in range(n) if blk[i]]
c=Counter(bb); print('writers blocked',round(len(bb)/n,2),'of the time; uploads in flight then',{k:round(v/len(bb),2) for k,v in sorted(c.items())})
