#!/usr/bin/env python3
# snapshot CPU ticks of postgres/pgbench processes by category
import os,sys,json
def snap():
    r={}
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try:
            st=open(f'/proc/{p}/stat').read()
            comm=st[st.index('(')+1:st.rindex(')')]
            f=st[st.rindex(')')+2:].split()
            t=int(f[11])+int(f[12])
            cl=open(f'/proc/{p}/cmdline').read().replace('\0',' ').strip()
        except Exception: continue
        if comm in ('postgres','pgbench') or cl.startswith('postgres'):
            r[p]=(cl,t)
    f=open('/proc/stat').readline().split()[1:]
    r['_sys']=('_sys',sum(int(x) for x in f[:3])+sum(int(x) for x in f[5:8]))
    r['_idle']=('_idle',int(f[3])+int(f[4]))
    return r
def cat(cl):
    if cl.startswith('_'): return cl
    if 'pgbench' in cl and not cl.startswith('postgres:'): return 'pgbench'
    if 'pgbus_stream worker' in cl: return 'worker'
    for k in ('walwriter','wal writer','checkpointer','background writer','autovacuum','stats','logical'):
        if k in cl: return 'aux:'+k
    if '[local]' in cl or 'INSERT' in cl or 'idle' in cl or 'postgres postgres' in cl: return 'backend'
    return 'other:'+cl[:40]
if sys.argv[1]=='snap':
    json.dump(snap(),open(sys.argv[2],'w'))
elif sys.argv[1]=='diff':
    a=json.load(open(sys.argv[2])); b=json.load(open(sys.argv[3])); secs=float(sys.argv[4])
    out={}
    for p,(cl,t) in b.items():
        t0=a.get(p,(cl,0))[1] if a.get(p,(None,0))[0]==cl or p in a else 0
        d=t-t0
        if d<=0: continue
        k=cat(cl); out[k]=out.get(k,0)+d
    print(' '.join(f'{k}={v/secs:.0f}%' for k,v in sorted(out.items())))
if sys.argv[1]=='window':
    import time
    a=snap(); t0=time.time(); time.sleep(float(sys.argv[2])); b=snap(); secs=time.time()-t0
    out={}
    for p,(cl,t) in b.items():
        d=t-(a[p][1] if p in a else 0)
        if d<=0: continue
        k=cat(cl); out[k]=out.get(k,0)+d
    print(' '.join(f'{k}={v/secs:.0f}%' for k,v in sorted(out.items())))
