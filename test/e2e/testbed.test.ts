// The namespace testbed itself: routing through a router, the test network rules, and
// removal of everything it made, also after its owner was killed.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { expect, it } from 'vitest';
import { exec } from '../../src/sys/exec.js';
import { cleanupTestbeds } from '../../src/sandbox/netns/cleanup.js';
import { recordPath } from '../../src/sandbox/netns/registry.js';
import { L2Switch, type SwitchKind } from '../../src/sandbox/netns/switch.js';
import { RouteLog } from '../../src/sandbox/route-log.js';
import { movedCounters, readNetCounters } from '../../src/sandbox/reliability/net-counters.js';
import { Testbed } from '../../src/sandbox/netns/testbed.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';

const namespaces = async () => (await exec('ip', ['netns', 'list'])).stdout;

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'network-namespace testbed', () => {
  it('routes between hosts through a router, and removes everything on destroy', async () => {
    const tb = await Testbed.create();
    const router = await tb.addHost('router', { router: true });
    const client = await tb.addHost('client');
    const node = await tb.addHost('node-1');
    await tb.link({ host: client, ifname: 'eth0', address: '10.0.10.2/24' }, { host: router, ifname: 'clients', address: '10.0.10.1/24' });
    await tb.link({ host: node, ifname: 'eth0', address: '10.0.30.21/24' }, { host: router, ifname: 'nodes', address: '10.0.30.1/24' });
    await tb.route(client, 'default', '10.0.10.1');
    await tb.route(node, '10.0.10.0/24', '10.0.30.1');
    await client.execOk(['ping', '-c', '1', '-W', '2', '10.0.30.21']);
    expect(await node.address('eth0')).toBe('10.0.30.21');

    // Rules: a router never gets a default route.
    await expect(tb.route(router, 'default', '10.0.30.21')).rejects.toThrow(/routers get no default route/);

    const sleeper = node.spawn(['sleep', '600']);
    expect(tb.runningPids()).toContain(sleeper.pid);
    expect(existsSync(node.cgroup)).toBe(true);
    await tb.destroy();
    expect(await namespaces()).not.toContain(tb.prefix);
    expect(existsSync(node.cgroup)).toBe(false);
    expect(existsSync(recordPath(tb.prefix))).toBe(false);
    expect(await sleeper.exited).not.toBe(0);
  });

  it('logs every route change of a host, a multipath route on one line, with the time it was made', async () => {
    const tb = await Testbed.create();
    try {
      const router = await tb.addHost('router', { router: true });
      const node = await tb.addHost('node-1');
      const log = RouteLog.start(router);
      await new Promise((r) => setTimeout(r, 200)); // ip monitor subscribed
      const t0 = Date.now();
      await tb.link({ host: node, ifname: 'eth0', address: '10.0.30.21/24' }, { host: router, ifname: 'nodes', address: '10.0.30.1/24' });
      await tb.multipathRoute(router, '10.0.100.1/32', ['10.0.30.21', '10.0.30.22']);
      await router.ip('route', 'del', '10.0.100.1/32');
      const t1 = Date.now();
      for (let i = 0; i < 50 && log.changes().length < 3; i++) await new Promise((r) => setTimeout(r, 20));
      const steps = log.changes().map((c) => c.step);
      // The link's connected route, then the ECMP route and its removal; no local or broadcast routes.
      expect(steps).toEqual([
        expect.stringMatching(/^router: route 10\.0\.30\.0\/24 dev nodes proto kernel/),
        expect.stringMatching(/^router: route 10\.0\.100\.1 nexthop via 10\.0\.30\.21 dev nodes .*nexthop via 10\.0\.30\.22 dev nodes/),
        expect.stringMatching(/^router: route Deleted 10\.0\.100\.1 /),
      ]);
      for (const c of log.changes()) {
        expect(c.at).toBeGreaterThanOrEqual(t0 - 5);
        expect(c.at).toBeLessThanOrEqual(t1 + 5);
      }
      await log.stop();
    } finally {
      await tb.destroy();
    }
  });

  it('keeps each TCP flow on one ECMP next hop through its SYN retransmissions, as a router across a wire would', async () => {
    const tb = await Testbed.create();
    try {
      const router = await tb.addHost('router', { router: true });
      const client = await tb.addHost('client');
      await tb.link({ host: client, ifname: 'eth0', address: '10.0.10.2/24' }, { host: router, ifname: 'clients', address: '10.0.10.1/24' });
      await tb.route(client, 'default', '10.0.10.1');
      // Two next hops that answer nothing and note each SYN's client port.
      const sinks = [];
      for (const i of [1, 2]) {
        const sink = await tb.addHost(`node-${i}`);
        await tb.link({ host: sink, ifname: 'eth0', address: `10.0.3${i}.2/24` }, { host: router, ifname: `nodes${i}`, address: `10.0.3${i}.1/24` });
        await sink.execOk(['nft', '-f', '-'], {
          input: 'table ip t {\n set ports { type inet_service; flags dynamic; }\n chain pre { type filter hook prerouting priority 0; tcp dport 80 tcp flags & syn == syn counter add @ports { tcp sport } drop; }\n}\n',
        });
        sinks.push(sink);
      }
      await tb.multipathRoute(router, '10.0.100.1/32', ['10.0.31.2', '10.0.32.2']);
      // A SYN and its first retransmission (1 s later) for each of 16 connections.
      await Promise.all(Array.from({ length: 16 }, () => client.exec(['timeout', '2', 'bash', '-c', 'exec 3<>/dev/tcp/10.0.100.1/80'])));
      type Listed = { nftables: { set?: { elem?: number[] }; rule?: { expr: { counter?: { packets: number } }[] } }[] };
      const seen = await Promise.all(
        sinks.map(async (s) => {
          const listed = JSON.parse(await s.execOk(['nft', '-j', 'list', 'table', 'ip', 't'])) as Listed;
          const syns = listed.nftables.flatMap((o) => o.rule?.expr ?? []).find((e) => e.counter)?.counter?.packets ?? 0;
          return { ports: new Set(listed.nftables.find((o) => o.set)?.set?.elem ?? []), syns };
        }),
      );
      expect(seen[0]!.syns + seen[1]!.syns).toBeGreaterThanOrEqual(32); // each SYN sent again
      const ports = seen.map((s) => s.ports);
      expect([...ports[0]!].filter((p) => ports[1]!.has(p))).toEqual([]); // no connection on both
      expect(ports[0]!.size + ports[1]!.size).toBe(16);
      // Spread by port: both next hops used (all 16 on one: 1 in 32768).
      expect(ports[0]!.size).toBeGreaterThan(0);
      expect(ports[1]!.size).toBeGreaterThan(0);
    } finally {
      await tb.destroy();
    }
  });

  it("reads a host's kernel counters: a router without a route for a packet counts it and answers net unreachable", async () => {
    const tb = await Testbed.create();
    try {
      const router = await tb.addHost('router', { router: true });
      const node = await tb.addHost('node-1');
      await tb.link({ host: node, ifname: 'eth0', address: '10.0.30.21/24' }, { host: router, ifname: 'nodes', address: '10.0.30.1/24' });
      await tb.route(node, 'default', '10.0.30.1');
      const before = await readNetCounters([router, node]);
      // The router has no default route: 10.0.200.1 is nowhere (and never leaves the testbed).
      const ping = await node.exec(['ping', '-c', '1', '-W', '2', '10.0.200.1']);
      expect(ping.stdout).toMatch(/Destination Net Unreachable/);
      const moved = movedCounters(before, await readNetCounters([router, node]));
      expect(moved).toEqual([expect.stringMatching(/^router: .*Icmp\.OutDestUnreachs \+1.*IpExt\.InNoRoutes \+1/)]);
    } finally {
      await tb.destroy();
    }
  });

  it('cleans up after an owner that was killed', async () => {
    // A child process builds a testbed with a long-lived process, then dies by SIGKILL.
    const script = `
      import { mkdirSync } from 'node:fs';
      import { Testbed } from ${JSON.stringify(resolve(REPO_ROOT, 'dist/sandbox/netns/testbed.js'))};
      import { createMap, MapType } from ${JSON.stringify(resolve(REPO_ROOT, 'dist/ebpf/map.js'))};
      import { u32Codec } from ${JSON.stringify(resolve(REPO_ROOT, 'dist/ebpf/codec.js'))};
      const tb = await Testbed.create();
      const h = await tb.addHost('victim');
      h.spawn(['sleep', '600']);
      // A node's pinned maps, as the datapath tests leave them (<prefix>-<node>).
      mkdirSync('/sys/fs/bpf/' + tb.prefix + '-victim');
      const m = createMap({ type: MapType.Array, name: 'left', key: u32Codec, value: u32Codec, maxEntries: 1 });
      m.pin('/sys/fs/bpf/' + tb.prefix + '-victim/left');
      m.close();
      process.stdout.write(tb.prefix + '\\n');
      setInterval(() => {}, 1000);
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    const prefix = await new Promise<string>((res) => child.stdout.once('data', (d: Buffer) => res(d.toString().trim())));
    expect(await namespaces()).toContain(`${prefix}-victim`);
    process.kill(child.pid!, 'SIGKILL');
    await new Promise((r) => child.once('exit', r));

    const report = await cleanupTestbeds();
    expect(report.testbeds).toContain(prefix);
    expect(await namespaces()).not.toContain(prefix);
    expect(existsSync(recordPath(prefix))).toBe(false);
    // Its own pins among those removed (a run that died earlier on this machine may have left more).
    expect(report.strayPins).toContain(`/sys/fs/bpf/${prefix}-victim`);
    expect(existsSync(`/sys/fs/bpf/${prefix}-victim`)).toBe(false);
  });

  it('rejects names that break the per-run prefix rule', async () => {
    await expect(Testbed.create({ prefix: 'prod' })).rejects.toThrow(/must start with "fy"/);
    const tb = await Testbed.create();
    try {
      await expect(tb.addHost('Bad_Name')).rejects.toThrow(/use \[a-z0-9-\]/);
      const a = await tb.addHost('a');
      const b = await tb.addHost('b');
      await expect(tb.link({ host: a, ifname: 'a-very-long-interface-name' }, { host: b, ifname: 'eth0' })).rejects.toThrow(/at most 15 characters/);
    } finally {
      await tb.destroy();
    }
  });

  for (const kind of ['bridge', 'macvlan'] as SwitchKind[]) {
    it(`a ${kind} switch is one broadcast domain: ARP between members, each its own MAC; a member can be cut off and put back`, async () => {
      const tb = await Testbed.create();
      try {
        const sw = await L2Switch.create(tb, 'switch', kind);
        expect(sw.kind).toBe(kind);
        const hosts = [];
        for (let i = 1; i <= 3; i++) {
          const h = await tb.addHost(`m${i}`);
          await sw.attach(h, 'eth0', { address: `10.0.30.${i}/24` });
          hosts.push(h);
        }
        const [a, b, c] = hosts as [typeof hosts[0], typeof hosts[0], typeof hosts[0]];
        // arping broadcasts a request: only a real broadcast domain delivers it.
        for (const [from, to] of [[a, '10.0.30.2'], [a, '10.0.30.3'], [c, '10.0.30.2']] as const) {
          await from.execOk(['arping', '-c', '1', '-w', '2', '-I', 'eth0', to]);
        }
        const macs = await Promise.all(hosts.map(async (h) => /link\/ether (\S+)/.exec(await h.ip('link', 'show', 'eth0'))![1]));
        expect(new Set(macs).size).toBe(3);
        await sw.setConnected(b, false);
        expect((await a.exec(['ping', '-c', '1', '-W', '1', '10.0.30.2'])).code).not.toBe(0);
        await sw.setConnected(b, true);
        if (kind === 'macvlan') await b.ip('addr', 'replace', '10.0.30.2/24', 'dev', 'eth0');
        await a.execOk(['ping', '-c', '1', '-W', '2', '10.0.30.2']);
      } finally {
        await tb.destroy();
      }
    });
  }
});
