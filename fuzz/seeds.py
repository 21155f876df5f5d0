"""Writes the committed seed corpus (corpus/<target>/<name>) of every fuzz target.

Seeds are small well-formed inputs built from the documented wire layouts (proto/src/*.rs,
ebpf/bpf/flow_event.h), config keys of the tests and docs, and the REST bodies the tests
send, so the fuzzer starts past every magic number and key name. Run: python3 fuzz/seeds.py
"""
import struct, os, json
root=os.path.join(os.path.dirname(os.path.abspath(__file__)),'corpus')
def w(target, name, data):
    d=os.path.join(root,target); os.makedirs(d,exist_ok=True)
    if isinstance(data,str): data=data.encode()
    open(os.path.join(d,name),'wb').write(data)

# --- packet (big-endian, 64 bytes)
def pkt(kind, flags=0, cls=2, sport=0xC123, seq=7, prn=1, pqpn=0xabcdef, trn=3, tqpn=0x123456, rqpn=0, delay=0, token=0xdeadbeef01020304):
    b=b'RM'+bytes([1,kind,flags,cls])+struct.pack('>HIIIIIIQQ',sport,seq,prn,pqpn,trn,tqpn,rqpn,delay,token)
    return b+b'\0'*16
w('packet','probe',pkt(1))
w('packet','ack1',pkt(2,rqpn=0x123456))
w('packet','ack2-hw',pkt(3,flags=1,rqpn=0x123456,delay=12345))
w('packet','ack2-sw',pkt(3,flags=2,cls=1,rqpn=0x123456,delay=999))
w('packet','trace',pkt(4,cls=3))
w('packet','foreign',b'GET / HTTP/1.1\r\n')

# --- batch (little-endian)
NOW_NS=1_800_000_000_000*1_000_000
def rec(prn,trn,seq,send_ns,rtt,status=0,cls=2,ts=2,sport=50000,dport=4791):
    return struct.pack('<IIIIQIIIIHHBBBB',prn,trn,seq,100+trn,send_ns,rtt if status==0 else 0,3000,2000,rtt+5000,sport,dport,cls,status,ts,0)
def ip16(a): 
    p=[int(x) for x in a.split('.')]; return bytes(10)+b'\xff\xff'+bytes(p)
def path(src,dst,sport,dport,hops,reached=1,ack=0,at=NOW_NS):
    b=ip16(src)+ip16(dst)+struct.pack('<HHBBH',sport,dport,len(hops),reached|(ack<<1),0)+struct.pack('<Q',at)
    for h in hops: b+= bytes(16) if h is None else ip16(h)
    return b
def batch(host,epoch,seq,recs,paths=None,dropped=0):
    flags=1 if paths is not None else 0
    b=b'RMB1'+struct.pack('<HHIIIIQQ',1,48,len(recs),host,epoch,flags,seq,dropped)+b''.join(recs)
    if paths is not None: b+=struct.pack('<I',len(paths))+b''.join(paths)
    return b
recs=[rec(1,3,i,NOW_NS-20_000_000_000+i*1_000_000,8000+i) for i in range(4)]+[rec(3,1,9,NOW_NS-20_000_000_000,0,status=1),rec(2,4,10,NOW_NS-19_000_000_000,0,status=2,cls=1)]
ps=[path('10.0.1.1','10.0.2.1',50000,4791,['10.1.0.1',None,'10.1.0.3','10.0.2.1']),path('10.0.2.1','10.0.1.1',50000,4791,['10.1.0.9'],reached=0,ack=1)]
w('batch','records',batch(1,1,1,recs))
w('batch','records-paths',batch(1,1,2,recs,ps))
w('batch','heartbeat',batch(2,1,3,[]))
w('batch','empty-path-section',batch(2,1,4,recs[:1],[]))
sect=struct.pack('<I',len(ps))+b''.join(ps)
w('paths','two-paths',sect)
w('paths','empty',struct.pack('<I',0))
w('paths','sixteen-hops',struct.pack('<I',1)+path('10.0.1.1','10.0.2.1',1,2,['10.9.0.%d'%i for i in range(16)]))
for n,b in [('records',batch(1,1,11,recs)),('records-paths',batch(2,1,12,recs,ps)),('late',batch(1,1,13,[rec(1,3,1,NOW_NS-3600_000_000_000,9000)])),('future',batch(2,1,14,[rec(4,2,1,NOW_NS+3600_000_000_000,9000)])),('unknown-rnic',batch(1,1,15,[rec(77,3,1,NOW_NS,9000)]))]:
    w('analyzer_ingest',n,b)

# --- ebpf events: native (little-endian) struct flow_event, 80 bytes
def ev(kind,route,pid,tid,cg,kt,lq,dq,fl,dgid,comm):
    b=struct.pack('<IIIIQQIII',kind,route,pid,tid,cg,kt,lq,dq,fl)+b'\0'*4+dgid+comm.encode().ljust(16,b'\0')[:16]
    assert len(b)==80; return b
g=bytes(10)+b'\xff\xff'+bytes([10,0,2,1])
w('ebpf_events','rtr-destroy-exit',ev(1,1,100,101,7,1000,0x11,0x22,0x12345,g,'python')+ev(1,2,100,102,7,1001,0x12,0x23,0xfffff,g,'python')+ev(2,1,100,101,7,2000,0x11,0,0,bytes(16),'python')+ev(3,3,100,100,7,3000,0,0,0,bytes(16),'python'))
w('ebpf_events','full-table',b''.join(ev(1,1,200+i,1,0,i,i,i,i,g,'train') for i in range(6)))

# --- configs
w('server_config','sections','listen = "127.0.0.1:9"\ndatabase = "sqlite://x.db"\n[controller]\ntormesh_pps = 150.0\ntask_pair_pps = 2.0\n[controller.skeleton.features]\nwindow = 32\n[analyzer]\nperiod = "2s"\nfabric_map = "/etc/rocemesh/fabric.toml"\n[analyzer.diagnosis]\nwindow = "2s"\ntick = "100ms"\nresolve_after = "5s"\n[analyzer.latency]\nshort_window = "1s"\nlookback = "10s"\nlong_window = "20s"\n')
w('server_config','alerts-auth-impact','[auth]\ntokens = [\n  { role = "admin", token = "0123456789abcdef" },\n  { role = "read",  token = "fedcba9876543210" },\n  { role = "agent", token_file = "/run/secrets/agent" },\n]\n[alerts]\nexternal_url = "http://rocemesh.example:8080"\npoll = "1s"\ngroup_wait = "2s"\npriority_wait = "10s"\nretention = "7d"\nretry_initial = "1s"\nretry_max = "5m"\npermanent_after_attempts = 3\ntimeout = "10s"\n[[alerts.receivers]]\nname = "oncall"\nurl = "http://alert-relay.monitoring:9095/hook"\nsecret = "s3cret"\npriorities = ["P0", "P1"]\ncomponents = ["link", "switch"]\n[impact]\ntick = "2s"\nreassess_resolved = "10m"\nretention = "7d"\nmax_samples_per_task = 100000\nbaseline_samples = 5\nwindow_samples = 3\nmax_judged_samples = 10000\n')
w('server_config','empty','')
w('agent_config','udp','controller_url = "http://c:1"\nanalyzer_url = "http://a:2"\nhost = "h1"\ntrace_enabled = false\ntrace_pps = 5.5\ntrace_max_hops = 4\ntrace_refresh = "2s"\nsampling_enabled = false\nsample_interval = "100ms"\nsample_upload = "500ms"\n[[rnics]]\nname = "a"\nip = "127.0.0.1"\n')
w('agent_config','verbs','controller_url = "http://c:1"\ntransport = "verbs"\nservice_tracing = "user"\nservice_libraries = ["/opt/lib/libibverbs.so.1"]\n[[rnics]]\nname = "a"\nip = "10.0.0.1"\nrdma_device = "mlx5_0"\ngid_index = 3\n')

# --- JSON bodies
reg={"host":"host-9","epoch":3,"rnics":[{"ifname":"eth0","ip":"10.0.9.1","qpn":77,"port":4791,"tor":"t9","rail":0,"gateway":"10.0.9.254","gid":"fe80::1"},{"ifname":"eth1","ip":"fd00::9","qpn":78,"port":4791}]}
task={"name":"job-2","endpoints":[{"host":"host-1","rnic":"eth0","rail":0,"namespace":"ns","pod":"p0","ready":True},{"host":"host-2","rnic":"eth1"}]}
thr={"host_id":1,"epoch":1,"interval_ms":100,"series":[{"rnic_id":1,"start_ms":1799999990000,"tx_bytes":[0,1000000,0,1000000],"rx_bytes":[5,6,7,8]},{"rnic_id":2,"start_ms":1799999990000,"tx_bytes":[1],"rx_bytes":[2]}]}
metric={"name":"throughput","value":123.5,"at_ms":1799999999000}
obj={"metric":"throughput","higher_is_better":True,"baseline":100.0,"tolerable_degradation":0.2}
recv={"name":"ops","url":"http://127.0.0.1:9/hook","secret":"k","priorities":["P0"],"components":["link"]}
ready={"host":"host-1","rnic":"eth0"}
auth={"sign_key":1,"keys":[{"id":1,"key":"07"*32},{"id":2,"key":"09"*32}],"source_pps":100.0,"source_burst":50}
for i,(n,b) in enumerate([('register',reg),('task',task),('throughput',thr),('probe-auth',auth)]):
    w('api_json',n,bytes([i])+json.dumps(b).encode())
routes=[('register',reg),('task',task),('task-put',task),('ready',ready),('throughput',thr),('metric',metric),('objective',obj),('receiver',recv)]
for i,(n,b) in enumerate(routes):
    w('server_api',n,bytes([i])+json.dumps(b).encode())
w('server_api','results',bytes([8])+batch(1,1,21,recs,ps))
for n,q in [('get-sla','sla?scope=tor_pair&limit=10'),('get-problems','problems?state=all&since_ms=0&limit=5&priority=P0'),('get-sla-latest','sla/latest?scope=rnic&key=1'),('get-outbox','alerts/outbox?state=pending&receiver=ops'),('get-hosts','hosts/1'),('get-paths','paths?src_tor=t1&dst_tor=t2&limit=3'),('get-pinglist','pinglists/1?epoch=1'),('get-verdict','tasks/1/verdict?from=0&to=1800000000000'),('get-metrics','tasks/1/metrics?name=throughput&from=0&to=1800000000000'),('get-rnic-by-ip','rnics/by-ip/10.0.1.1')]:
    w('server_api',n,bytes([9])+q.encode())

# --- tagged (version 3) packets, sealed with the fuzz keyring (key id 1 = [7]*32, id 2 = [9]*32)
# on the fuzz target's flow (10.0.0.1:50000 -> 10.0.1.2:4791); PROBEs padded to 256 bytes
# with their send time in bytes 64..72.
import hmac, hashlib, ipaddress
FLOW=ipaddress.ip_address('::ffff:10.0.0.1').packed+ipaddress.ip_address('::ffff:10.0.1.2').packed+struct.pack('>HH',50000,4791)
def seal(b, kid, key, sent_ms=1800000000000):
    b=bytearray(b); b[2]=3; b[48]=kid
    if b[3]==1:
        b+=struct.pack('>Q',sent_ms)+bytes(256-72)
    b[49:64]=hmac.new(key, bytes(b[:49])+bytes(b[64:])+FLOW, hashlib.sha256).digest()[:15]
    return bytes(b)
w('packet','probe-tagged',seal(pkt(1),1,bytes([7]*32)))
w('packet','ack2-tagged-next-key',seal(pkt(3,flags=1,rqpn=0x123456,delay=12345),2,bytes([9]*32)))
w('packet','probe-unknown-key',seal(pkt(1),5,bytes([1]*32)))
