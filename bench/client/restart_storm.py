#!/usr/bin/env python3
"""restart_storm: N EventSource-like clients on one stream, then a worker
restart; each client, when its stream ends, waits its retry: (as a browser
does) and connects again, until it is served (200 and its opening frames).

  restart_storm.py PORT PATH N WORKER_PID_CMD

WORKER_PID_CMD prints the worker's pid (a shell command, run before the
restart and after it, to sample the new worker's CPU). Prints one JSON line:
connected, reconnected, seconds_to_all_back, seconds_to_new_worker (seen by
polling every 0.5 s), back_p50_s/p90/p99 (when the clients were served
again, from the stop), non_200 (statuses other than 200 met on the way), retry_min/max, worker_cpu_peak (share of a core over
the busiest 0.5 s), listen_overflows (the host's accept-queue drops
meanwhile), worker_cpu_s (CPU seconds of the new worker until all
were back).
"""
import asyncio, json, os, resource, subprocess, sys, time

PORT, PATH, N, PID_CMD = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
HZ = os.sysconf('SC_CLK_TCK')
state = {'non200': 0, 'back': 0, 'retries': []}


def worker_pid():
    out = subprocess.run(PID_CMD, shell=True, capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None


def listen_overflows():
    """The host's TcpExt ListenOverflows (connections the kernel dropped on
    a full accept queue; every listener of the host counts)."""
    try:
        with open('/proc/net/netstat') as f:
            rows = [ln.split() for ln in f if ln.startswith('TcpExt:')]
        return int(rows[1][rows[0].index('ListenOverflows')])
    except (OSError, ValueError, IndexError):
        return None


def cpu_ticks(pid):
    try:
        with open(f'/proc/{pid}/stat') as f:
            s = f.read()
        fields = s[s.rindex(')') + 2:].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return None


async def open_stream(last_id):
    """Connects and reads the opening frames. Returns (status, reader, writer,
    retry, id, served): served is false for a stream that only said retry:."""
    r, w = await asyncio.open_connection('127.0.0.1', PORT)
    hdr = f'GET {PATH} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n'
    if last_id:
        hdr += f'Last-Event-ID: {last_id}\r\n'
    w.write((hdr + '\r\n').encode())
    line = await r.readline()
    parts = line.split()
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    while (await r.readline()) not in (b'\r\n', b'\n', b''):
        pass
    retry, ident, served = None, None, False
    if status == 200:
        buf = b''
        while b'event: pgbus:connected' not in buf:
            chunk = await r.read(4096)
            if not chunk:
                break
            buf += chunk
        for ln in buf.decode(errors='replace').splitlines():
            if ln.startswith('retry: ') and ln[7:].strip().isdigit():
                retry = int(ln[7:].strip())
            if ln.startswith('id: '):
                ident = ln[4:].strip()
        served = b'event: pgbus:connected' in buf
    return status, r, w, retry, ident, served


async def client(i, restarted, started):
    last_id, retry = None, 2000
    while True:
        status, r, w, rt, ident, served = await open_stream(None)
        retry = rt or retry
        if served or status != 200:
            break
        w.close()
        await asyncio.sleep(retry / 1000)
    if status != 200:
        state['non200'] += 1
    last_id = ident or last_id
    state['retries'].append(retry)
    started.set() if len(state['retries']) == N else None
    await restarted.wait()
    # the stream ends with the worker; then come back as an EventSource does
    while True:
        try:
            while await r.read(65536):
                pass
        except (ConnectionError, OSError):
            pass
        w.close()
        await asyncio.sleep(retry / 1000)
        while True:
            try:
                status, r, w, rt, ident, served = await open_stream(last_id)
            except (ConnectionError, OSError):
                await asyncio.sleep(retry / 1000)  # refused while the worker is down
                continue
            if status == 0:  # closed before a status line: a network error, retried
                w.close()
                state['resets'] = state.get('resets', 0) + 1
                await asyncio.sleep(retry / 1000)
                continue
            if status == 200 and served:
                state['back'] += 1
                state['last_back'] = time.time()
                state.setdefault('back_at', []).append(state['last_back'])
                return w
            if status != 200:
                state['non200'] += 1
                state.setdefault('statuses', {}).setdefault(str(status), 0)
                state['statuses'][str(status)] += 1
                return w  # a browser gives up here
            retry = rt or retry  # a retry stream: come back after it
            break


async def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    restarted, started = asyncio.Event(), asyncio.Event()
    tasks = []
    for i in range(N):
        tasks.append(asyncio.ensure_future(client(i, restarted, started)))
        if i % 200 == 199:
            await asyncio.sleep(0.05)
    await asyncio.wait_for(started.wait(), 300)
    old = worker_pid()
    overflows0 = listen_overflows()
    t0 = time.time()
    os.kill(old, 15)
    restarted.set()
    # the new worker's CPU, sampled every 0.5 s until everyone is back
    new, samples, first = None, [], None
    deadline = t0 + 300
    while state['back'] + state['non200'] < N and time.time() < deadline:
        await asyncio.sleep(0.5)
        if new is None:
            p = worker_pid()
            if p and p != old:
                new = p
                first = cpu_ticks(new)
                state['new_worker_at'] = time.time()
        if new is not None:
            samples.append((time.time(), cpu_ticks(new)))
    peak = 0.0
    for (ta, ca), (tb, cb) in zip(samples, samples[1:]):
        if ca is not None and cb is not None:
            peak = max(peak, (cb - ca) / HZ / (tb - ta))
    total = (samples[-1][1] - first) / HZ if samples and first is not None and samples[-1][1] is not None else None
    overflows1 = listen_overflows()
    back = sorted(t - t0 for t in state.get('back_at', []))
    pct = lambda q: round(back[min(len(back) - 1, int(q * len(back)))], 2) if back else None
    print(json.dumps({'connected': N, 'reconnected': state['back'], 'non_200': state['non200'],
                      'seconds_to_all_back': round(state.get('last_back', t0) - t0, 2),
                      'seconds_to_new_worker': round(state['new_worker_at'] - t0, 2) if 'new_worker_at' in state else None,
                      'back_p50_s': pct(0.5), 'back_p90_s': pct(0.9), 'back_p99_s': pct(0.99),
                      'retry_min': min(state['retries']), 'retry_max': max(state['retries']),
                      'statuses': state.get('statuses', {}), 'resets': state.get('resets', 0),
                      'listen_overflows': overflows1 - overflows0 if None not in (overflows0, overflows1) else None,
                      'worker_cpu_peak': round(peak, 2),
                      'worker_cpu_s': round(total, 2) if total is not None else None}))
    for t in tasks:
        t.cancel()


asyncio.run(main())
