// ferry's FRR configuration against a real FRR (the one scripts/setup.sh installs): a
// node's configuration applied as commands into the running daemons, read back from the
// running configuration with nothing left to do, the routes seen by a peer router; growth
// to 1000 addresses and back, a peer's attributes and its removal. Apply times printed.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { V1Node, V1Service } from '@kubernetes/client-node';
import { bgpNodeConfig, parseBgpAdvertisement, parseBgpPeer, type BgpInput } from '../../src/announce/bgp.js';
import { EMPTY_FRR, frrCommands, parseRunning, renderFrr, resendShared, type FrrConfig } from '../../src/announce/frr-config.js';
import { startFrr, type FrrInstance } from '../../src/sandbox/frr.js';
import { Testbed } from '../../src/sandbox/netns/testbed.js';
import { describeWith } from '../harness/requirements.js';
import { eventually } from '../harness/wait.js';

let tb: Testbed;
let router: FrrInstance;
let node: FrrInstance;
const NODE: V1Node = { metadata: { name: 'node-1', labels: {} }, status: { addresses: [{ type: 'InternalIP', address: '10.0.30.21' }] } };
const lb = (i: number): V1Service => ({ metadata: { name: `s${i}`, namespace: 'default' }, spec: { type: 'LoadBalancer', ports: [{ port: 80 }] }, status: { loadBalancer: { ingress: [{ ip: `10.0.${100 + (i >> 8)}.${i & 255}` }] } } });
const peers = [parseBgpPeer({ metadata: { name: 'router' }, spec: { peerAddress: '10.0.30.1', peerASN: 64513, myASN: 64512, bfd: { receiveIntervalMs: 300, transmitIntervalMs: 300, detectMultiplier: 3 } } })];
const desired = (n: number, o: Partial<BgpInput> = {}) => renderFrr(bgpNodeConfig({ node: NODE, nodes: [NODE], services: Array.from({ length: n }, (_, i) => lb(i + 1)), slices: [], peers, advertisements: [parseBgpAdvertisement({ metadata: { name: 'all' }, spec: { communities: ['64512:7'] } })], passwords: new Map(), datapathHealthy: true, ...o })!);

const running = async () => parseRunning(await node.vtysh.show('show running-config'));
/** Apply what turns FRR's running configuration into `to`; the time it took. */
async function applyTo(to: FrrConfig): Promise<number> {
  const cmds = frrCommands(await running(), to);
  const t0 = performance.now();
  if (cmds) await node.vtysh.apply(cmds);
  return performance.now() - t0;
}
const learned = async () => (await router.vtysh.showJson<{ routes?: Record<string, unknown> }>('show ip bgp json')).routes ?? {};

beforeAll(async () => {
  tb = await Testbed.create();
  const r = await tb.addHost('router', { router: true });
  const n = await tb.addHost('node-1');
  await tb.link({ host: r, ifname: 'nodes', address: '10.0.30.1/24' }, { host: n, ifname: 'eth0', address: '10.0.30.21/24' });
  router = await startFrr(tb, r, ['router bgp 64513', ' bgp router-id 10.0.30.1', ' no bgp ebgp-requires-policy', ' neighbor NODES peer-group', ' neighbor NODES remote-as 64512', ' neighbor NODES timers connect 2', ' bgp listen range 10.0.30.0/24 peer-group NODES', ''].join('\n'));
  node = await startFrr(tb, n, '');
}, 60_000);
afterAll(async () => {
  await node?.stop();
  await router?.stop();
  await tb?.destroy();
}, 30_000);

describeWith(['root', 'netns'], 'ferry\'s configuration in a real FRR', () => {
  it('applies as commands, reads back with nothing left to do, and the router learns the routes with their community', async () => {
    const ten = desired(10);
    const ms = await applyTo(ten);
    expect(frrCommands(await running(), ten)).toBe('');
    const routes = await eventually(learned, (r) => Object.keys(r).length === 10, 20_000, 200);
    expect(Object.keys(routes).sort()).toContain('10.0.100.1/32');
    const detail = await router.vtysh.showJson<{ paths: Array<{ community?: { string: string } }> }>('show ip bgp 10.0.100.1/32 json');
    expect(detail.paths[0]!.community?.string).toBe('64512:7');
    process.stdout.write(`FRR apply, 10 addresses from none: ${ms.toFixed(0)} ms\n`);
  });

  it('grows to 1000 addresses and back to 10 by commands alone', async () => {
    const thousand = desired(1000);
    const up = await applyTo(thousand);
    expect(frrCommands(await running(), thousand)).toBe('');
    await eventually(learned, (r) => Object.keys(r).length === 1000, 30_000, 250);
    const down = await applyTo(desired(10));
    await eventually(learned, (r) => Object.keys(r).length === 10, 30_000, 250);
    process.stdout.write(`FRR apply, 10 → 1000 addresses: ${up.toFixed(0)} ms; 1000 → 10: ${down.toFixed(0)} ms\n`);
  });

  it('a node that must announce nothing (its datapath failing) withdraws everything but keeps the session', async () => {
    await applyTo(desired(10, { datapathHealthy: false }));
    await eventually(learned, (r) => Object.keys(r).length === 0, 20_000, 200);
    const summary = await router.vtysh.showJson<{ ipv4Unicast?: { peers?: Record<string, { state: string }> } }>('show bgp summary json');
    expect(Object.values(summary.ipv4Unicast?.peers ?? {}).map((p) => p.state)).toEqual(['Established']);
    // Healthy again: announced again (the route map's last entry turns from deny to permit in place).
    await applyTo(desired(10));
    await eventually(learned, (r) => Object.keys(r).length === 10, 20_000, 200);
  });

  it('the extremes the readers let through apply without an error and read back unchanged', async () => {
    // Each value at the edge of what parseBgpPeer/parseBgpAdvertisement accept: vtysh -C
    // (the unit tests' check) takes syntax only, so a value FRR refuses shows only here.
    const symbols = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~';
    const password = `${symbols}${'Zz9'.repeat(16)}`.slice(0, 80);
    const edge = parseBgpPeer({ metadata: { name: 'edge' }, spec: {
      peerAddress: '10.0.30.99', peerASN: 4294967295, myASN: 64512, holdTimeSeconds: 65535, keepaliveTimeSeconds: 21845, ebgpMultihop: 255, gracefulRestart: true,
      bfd: { receiveIntervalMs: 10, transmitIntervalMs: 60000, detectMultiplier: 255 }, passwordSecretRef: { name: 'edge', key: 'password' },
    } });
    const low = parseBgpPeer({ metadata: { name: 'low' }, spec: { peerAddress: '10.0.30.98', peerASN: 1, myASN: 64512, holdTimeSeconds: 3, keepaliveTimeSeconds: 1, ebgpMultihop: 2, bfd: { receiveIntervalMs: 60000, transmitIntervalMs: 10, detectMultiplier: 2 } } });
    const ads = [
      parseBgpAdvertisement({ metadata: { name: 'all' }, spec: { communities: ['64512:7'] } }),
      parseBgpAdvertisement({ metadata: { name: 'edge-attributes' }, spec: { communities: ['65535:65535', '0:0', 'no-export', 'no-advertise', 'local-AS'], localPref: 4294967295, peers: ['edge'] } }),
      parseBgpAdvertisement({ metadata: { name: 'low-attributes' }, spec: { localPref: 0, peers: ['low'] } }),
    ];
    for (const o of [edge, low, ...ads]) expect(o.errors, o.name).toEqual([]);
    const cfg = bgpNodeConfig({ node: NODE, nodes: [NODE], services: Array.from({ length: 3 }, (_, i) => lb(i + 1)), slices: [], peers: [...peers, edge, low], advertisements: ads, passwords: new Map([['edge', password]]), datapathHealthy: true })!;
    expect(cfg.problems).toEqual([]);
    const want = renderFrr(cfg);
    await applyTo(want); // throws on any line FRR refuses
    expect(frrCommands(await running(), want)).toBe('');
    await applyTo(desired(10));
    expect(await node.vtysh.show('show running-config')).not.toMatch(/10\.0\.30\.99|10\.0\.30\.98/);
  });

  it('a bgpd restarted empty lacks the route maps and prefix lists the read-back shows (zebra\'s copies): resendShared sends them again', async () => {
    const gold = { ...lb(3), metadata: { ...lb(3).metadata, labels: { tier: 'gold' } } };
    const ads = [parseBgpAdvertisement({ metadata: { name: 'all' }, spec: { communities: ['64512:7'] } }), parseBgpAdvertisement({ metadata: { name: 'gold' }, spec: { communities: ['64512:9'], serviceSelector: { matchLabels: { tier: 'gold' } } } })];
    const want = renderFrr(bgpNodeConfig({ node: NODE, nodes: [NODE], services: [lb(1), lb(2), gold], slices: [], peers, advertisements: ads, passwords: new Map(), datapathHealthy: true })!);
    expect(want.prefixLists.length).toBeGreaterThan(0);
    await applyTo(want);
    await eventually(learned, (r) => Object.keys(r).length === 3, 20_000, 200);
    // Sent again to a FRR that holds them all: taken without a complaint, nothing changes.
    await node.vtysh.apply(frrCommands(resendShared(await running(), want), want));
    expect(frrCommands(await running(), want)).toBe('');
    await node.restart('bgpd');
    const back = await running();
    expect(back.bgp).toBeUndefined();
    expect([back.prefixLists.length, back.routeMaps.size]).toEqual([want.prefixLists.length, want.routeMaps.size]); // from zebra
    // Each daemon keeps its own route maps: bgpd's section of `show route-map` has none of ferry's now.
    const bgpdMaps = async () => /BGP:\n([\s\S]*?)(?:\n[A-Z]+:\n|$)/.exec(await node.vtysh.show('show route-map'))?.[1] ?? '';
    expect(await bgpdMaps()).not.toMatch(/ferry-out-router/);
    await node.vtysh.apply(frrCommands(resendShared(back, want), want));
    expect(await bgpdMaps()).toMatch(/ferry-out-router/);
    await eventually(learned, (r) => Object.keys(r).length === 3, 30_000, 200);
    expect(frrCommands(await running(), want)).toBe('');
  });

  it('everything ferry owns can be removed, and nothing else is touched', async () => {
    await node.vtysh.apply('ip prefix-list someone-else permit 192.0.2.0/24\n');
    await applyTo(desired(3));
    await applyTo(EMPTY_FRR);
    const after = await node.vtysh.show('show running-config');
    expect(after).not.toMatch(/router bgp|ferry-/);
    expect(after).toMatch(/ip prefix-list someone-else seq \d+ permit 192\.0\.2\.0\/24/);
  });
});
