// The debugging CLI against real maps populated by real traffic: every command as a table
// and as JSON, working from the pins alone (no agent here).
import { spawn, spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { PodInfo } from '../../src/sandbox/network.js';
import { MiniCluster } from '../../src/sandbox/mini-cluster.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';

let c: MiniCluster;
let web: PodInfo;
let pins = '';
const ferry = (...args: string[]) => spawnSync(process.execPath, [join(REPO_ROOT, 'bin', 'ferry.js'), ...args], { encoding: 'utf8' });

beforeAll(async () => {
  c = await MiniCluster.create({ nodes: 2 });
  web = await c.pod('web', 1, { whoami: 8080 });
  c.apply([
    { clusterIP: '10.96.0.30', ports: [{ port: 80, proto: 'TCP', targetPort: 8080, nodePort: 30700 }], endpoints: [web] },
    { clusterIP: '10.96.0.31', ports: [{ port: 80, proto: 'TCP', targetPort: 8080, nodePort: 30701 }], endpoints: [web], forwarding: 'dsr' },
    { clusterIP: '10.96.0.32', ports: [{ port: 80, proto: 'TCP', targetPort: 8080, nodePort: 30702 }], loadBalancerIPs: ['10.0.100.70'], endpoints: [] },
    { clusterIP: '10.96.0.33', ports: [{ port: 80, proto: 'TCP', targetPort: 8080, nodePort: 30703 }], loadBalancerIPs: ['10.0.100.71'], sourceRanges: ['10.0.10.0/24'], endpoints: [web] },
  ]);
  await c.net.routeLoadBalancerIP('10.0.100.70', [c.net.node(2)]);
  pins = c.nodes[1]!.pinDir; // node-2: its NodePort flows are SNATed to node-1's pod
  for (let i = 0; i < 3; i++) await c.client.execOk(['curl', '-sS', '--max-time', '3', '-o', '/dev/null', 'http://10.0.30.22:30700/']);
});
afterAll(async () => {
  await c?.close();
});

describeWith(['root', 'netns', 'bpffs'], 'ferry CLI on live pins', () => {
  it('service list: one row per frontend with its backends, as a table and as JSON', () => {
    const t = ferry('service', 'list', '--pin-dir', pins);
    expect(t.status, t.stderr).toBe(0);
    expect(t.stdout).toMatch(/^ID +SERVICE +FRONTEND +TYPE +FLAGS +BACKENDS$/m);
    expect(t.stdout).toMatch(/10\.0\.30\.22:30700\/tcp +NodePort +- +\d+ 10\.244\.1\.11:8080 \(active\)/);
    const j = JSON.parse(ferry('service', 'list', '--pin-dir', pins, '-o', 'json').stdout) as Array<{ frontend: string; type: string; backends: { address: string }[] }>;
    expect(j.find((r) => r.frontend === '10.96.0.30:80/tcp')).toMatchObject({ type: 'ClusterIP', backends: [{ address: '10.244.1.11:8080' }] });
  });

  it('map list and map dump decode every map', () => {
    const list = JSON.parse(ferry('map', 'list', '--pin-dir', pins, '-o', 'json').stdout) as Array<{ name: string; entries: number; capacity: number }>;
    expect(list.map((m) => m.name)).toContain('lb4_services');
    expect(list.find((m) => m.name === 'ct4')!.entries).toBe(3);
    const backends = ferry('map', 'dump', 'lb4_backends', '--pin-dir', pins);
    expect(backends.stdout).toMatch(/^ID +ADDRESS +PORT +PROTO +FLAGS$/m);
    expect(backends.stdout).toMatch(/10\.244\.1\.11 +8080 +tcp/);
    const stats = JSON.parse(ferry('map', 'dump', 'ferry_stats', '--pin-dir', pins, '-o', 'json').stdout) as Array<{ key: string; packets: number }>;
    expect(stats.find((s) => s.key === 'STAT_FWD_REMOTE')!.packets).toBeGreaterThan(0);
    expect(ferry('map', 'dump', 'lb4_services', '--pin-dir', pins, '-o', 'hex').stdout.trim().split('\n').every((l) => /^[0-9a-f]{24}$/.test(l))).toBe(true);
    expect(ferry('map', 'dump', 'nope', '--pin-dir', pins).stderr).toMatch(/no map "nope" \(maps: lb4_services/);
  });

  it('ct list, filtered by Service and backend; nat list shows the SNAT ports', () => {
    const all = JSON.parse(ferry('ct', 'list', '--pin-dir', pins, '-o', 'json').stdout) as Array<{ flow: string; backend: string; nat: string; flags: string }>;
    expect(all).toHaveLength(3);
    for (const f of all) expect(f).toMatchObject({ backend: '10.244.1.11:8080', nat: expect.stringMatching(/^10\.0\.30\.22:\d+$/), flags: expect.stringContaining('snat') });
    expect(JSON.parse(ferry('ct', 'list', '--pin-dir', pins, '--service', '10.0.30.22:30700', '-o', 'json').stdout)).toHaveLength(3);
    expect(JSON.parse(ferry('ct', 'list', '--pin-dir', pins, '--backend', '10.244.9.9', '-o', 'json').stdout)).toHaveLength(0);
    expect(ferry('ct', 'list', '--pin-dir', pins).stdout).toMatch(/10\.0\.10\.2:\d+ → 10\.0\.30\.22:30700\/tcp +10\.244\.1\.11:8080/);
    expect(ferry('nat', 'list', '--pin-dir', pins).stdout).toMatch(/10\.244\.1\.11 +8080 +10\.0\.30\.22 +\d+ +tcp +10\.0\.10\.2 +\d+ +10\.0\.30\.22 +30700 +snat/);
  });

  it('status summarises maps, counters and drops', () => {
    const s = JSON.parse(ferry('status', '--pin-dir', pins, '-o', 'json').stdout) as { agent: string; frontends: number; flows: number; forwarded: Array<{ key: string }> };
    expect(s).toMatchObject({ agent: 'not reachable', flows: 3 });
    expect(s.frontends).toBeGreaterThan(2);
    expect(s.forwarded.map((f) => f.key)).toContain('STAT_FWD_REMOTE');
    expect(ferry('status', '--pin-dir', pins).stdout).toMatch(/^frontends: \d+ +backends: 1 +flows: 3$/m);
  });

  it('ct flush asks for --yes, then empties conntrack and NAT', () => {
    const refused = ferry('ct', 'flush', '--pin-dir', pins);
    expect(refused.status).not.toBe(0);
    expect(refused.stderr).toMatch(/add --yes to confirm/);
    expect(ferry('ct', 'flush', '--pin-dir', pins, '--yes').stdout).toBe('deleted 3 conntrack and 3 NAT entries\n');
    expect(JSON.parse(ferry('ct', 'list', '--pin-dir', pins, '-o', 'json').stdout)).toEqual([]);
  });

  it('explain agrees with real traffic: local, remote (SNAT), DSR, no endpoints, unknown port', async () => {
    const ex = (dst: string, node: number, from = 'external') => {
      const r = ferry('explain', '10.0.10.2:45000', dst, '--from', from, '--pin-dir', c.nodes[node - 1]!.pinDir, '--netns', c.nodes[node - 1]!.host.netns, '-o', 'json');
      if (r.status !== 0) throw new Error(r.stderr);
      return JSON.parse(r.stdout) as { lines: string[]; verdict: string; backend?: string };
    };
    const real = async (url: string) => {
      const r = await c.client.exec(['curl', '-sS', '--max-time', '2', url]);
      return { code: r.code, remote: /RemoteAddr: ([\d.]+)/.exec(r.stdout)?.[1], host: /Hostname: (\S+)/.exec(r.stdout)?.[1] };
    };
    const local = ex('10.0.30.21:30700/tcp', 1);
    expect(local.lines.join('\n')).toMatch(/backend on this node \(DNAT only/);
    expect(local.backend).toBe(`${web.ip}:8080`);
    expect(await real('http://10.0.30.21:30700/')).toMatchObject({ code: 0, host: 'web', remote: '10.0.10.2' });
    const remote = ex('10.0.30.22:30700/tcp', 2);
    expect(remote.lines.join('\n')).toMatch(/another node with SNAT/);
    expect(remote.lines.join('\n')).toMatch(/packet out: 10\.0\.30\.22:\d+ → 10\.244\.1\.11:8080/);
    expect(await real('http://10.0.30.22:30700/')).toMatchObject({ code: 0, host: 'web', remote: '10.0.30.22' });
    const dsr = ex('10.0.30.22:30701/tcp', 2);
    expect(dsr.lines.join('\n')).toMatch(/by DSR/);
    expect(dsr.lines.join('\n')).toMatch(/IPv4 option 9e08/);
    expect(await real('http://10.0.30.22:30701/')).toMatchObject({ code: 0, host: 'web', remote: '10.0.10.2' });
    const none = ex('10.0.30.22:30702/tcp', 2);
    expect(none.lines.join('\n')).toMatch(/ICMP port unreachable/);
    expect((await real('http://10.0.30.22:30702/')).code).toBe(7);
    const unknown = ex('10.0.100.70:81/tcp', 2);
    expect(unknown.lines.join('\n')).toMatch(/dropped, reason unknown_port/);
    expect((await real('http://10.0.100.70:81/')).code).toBe(28);
    // From a pod: the socket hooks' decision.
    expect(ex('10.96.0.30:80/tcp', 2, 'pod').lines.join('\n')).toMatch(/backends: 10\.244\.1\.11:8080/);
    // loadBalancerSourceRanges at the socket hooks: the host's source (--src) is in them; no
    // pod namespace with that address is recorded (no agent here fills lb4_netns_sources).
    expect(ex('10.0.100.71:80/tcp', 2, 'host').verdict).toBe('rewritten to a backend');
    const pod = ex('10.0.100.71:80/tcp', 2, 'pod');
    expect(pod.verdict).toBe('denied');
    expect(pod.lines.join('\n')).toMatch(/no network namespace with address 10\.0\.10\.2 is recorded .*EPERM/);
    // And the live maps were only read: no flow from the synthetic packets.
    expect(JSON.parse(ferry('ct', 'list', '--pin-dir', pins, '-o', 'json').stdout).filter((f: { flow: string }) => f.flow.includes(':45000 '))).toEqual([]);
    // A CLI newer than its agent: a map the agent did not make is not among its pins.
    rmSync(join(c.nodes[1]!.pinDir, 'ferry_handover'));
    expect(ex('10.0.30.22:30700/tcp', 2).lines.join('\n')).toMatch(/another node with SNAT/);
  });

  it('monitor shows drops with their reason and traces of translations, and stops on Ctrl-C', async () => {
    const child = spawn(process.execPath, [join(REPO_ROOT, 'bin', 'ferry.js'), 'monitor', '--type', 'drop,trace', '--pin-dir', pins, '-o', 'json'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const flagsOn = () => JSON.parse(ferry('map', 'dump', 'ferry_monitor', '--pin-dir', pins, '-o', 'json').stdout)[0].flags as number;
    for (let i = 0; i < 100 && flagsOn() !== 3; i++) await new Promise((r) => setTimeout(r, 50));
    // One at a time: a second monitor would take some of the first one's events.
    const second = ferry('monitor', '--pin-dir', pins, '--count', '1');
    expect(second.status).not.toBe(0);
    expect(second.stderr).toMatch(new RegExp(`another monitor \\(pid ${child.pid}\\) is reading the events`));
    await c.client.exec(['curl', '-sS', '--max-time', '1', 'http://10.0.100.70:81/']); // unknown port: dropped
    await c.client.exec(['curl', '-sS', '--max-time', '2', '-o', '/dev/null', 'http://10.0.30.22:30700/']); // SNAT: traced
    for (let i = 0; i < 40 && !(out.includes('"drop"') && out.includes('"trace"')); i++) await new Promise((r) => setTimeout(r, 50));
    process.kill(child.pid!, 'SIGINT');
    await new Promise((r) => child.once('exit', r));
    const events = out.trim().split('\n').map((l) => JSON.parse(l) as { type: string; reason: number; saddr: string; daddr: string; dport: number; outDaddr: string; outDport: number });
    expect(events.find((e) => e.type === 'drop')).toMatchObject({ saddr: '10.0.10.2', daddr: '10.0.100.70', dport: 81, reason: 1 });
    expect(events.find((e) => e.type === 'trace' && e.dport === 30700)).toMatchObject({ daddr: '10.0.30.22', outDaddr: '10.244.1.11', outDport: 8080 });
    expect(flagsOn()).toBe(0); // events off again once the monitor is gone
  });

  it('says clearly when the pins are not there', () => {
    const r = ferry('service', 'list', '--pin-dir', '/sys/fs/bpf/nope-ferry');
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/no such file or directory/);
    const notBpffs = ferry('map', 'list', '--pin-dir', '/tmp');
    expect(notBpffs.stderr).toMatch(/not on a bpf filesystem \(mount -t bpf bpf \/sys\/fs\/bpf/);
  });
});
