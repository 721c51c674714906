// BGP through FRR, pure: what a node announces for a table of peer, advertisement and ETP
// cases, rendered and compared with golden files (test/fixtures/frr/*.conf, rewritten with
// UPDATE_GOLDEN=1), each checked by FRR's own parser (vtysh -C); hostile values rejected;
// and the commands that move a configuration from one state to another.
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { bgpAnnouncers, bgpNodeConfig, canonicalCommunities, parseBgpAdvertisement, parseBgpPeer, type BgpInput } from '../../src/announce/bgp.js';
import { addressRows } from '../../src/ipam/lb-view.js';
import { EMPTY_FRR, frrCommands, frrText, parseRunning, renderFrr } from '../../src/announce/frr-config.js';
import { REPO_ROOT } from '../harness/paths.js';

const GOLDEN = join(REPO_ROOT, 'test', 'fixtures', 'frr');
const node = (name: string, ip: string, labels: Record<string, string> = {}): V1Node => ({ metadata: { name, labels }, status: { addresses: [{ type: 'InternalIP', address: ip }] } });
const NODE = node('node-1', '10.0.30.21', { rack: 'a' });
const lb = (name: string, ip: string, o: { etp?: 'Local'; labels?: Record<string, string> } = {}): V1Service => ({
  metadata: { name, namespace: 'default', labels: o.labels }, spec: { type: 'LoadBalancer', externalTrafficPolicy: o.etp ?? 'Cluster', ports: [{ port: 80 }] }, status: { loadBalancer: { ingress: [{ ip }] } },
});
const slice = (svc: string, nodeName: string, ready = true): V1EndpointSlice => ({ metadata: { name: `${svc}-x`, namespace: 'default', labels: { 'kubernetes.io/service-name': svc } }, addressType: 'IPv4', endpoints: [{ addresses: ['10.244.1.5'], nodeName, conditions: { ready } }] });
const peer = (name: string, spec: Record<string, unknown>) => parseBgpPeer({ metadata: { name }, spec: { peerAddress: '10.0.30.1', peerASN: 64513, myASN: 64512, ...spec } });
const ad = (name: string, spec: Record<string, unknown> = {}) => parseBgpAdvertisement({ metadata: { name }, spec });
const input = (o: Partial<BgpInput>): BgpInput => ({ node: NODE, nodes: [NODE], services: [], slices: [], peers: [peer('router', {})], advertisements: [ad('all')], passwords: new Map(), datapathHealthy: true, ...o });

const CASES: Array<[string, Partial<BgpInput>]> = [
  ['one-peer', { services: [lb('web', '10.0.100.1'), lb('dns', '10.0.100.2')] }],
  ['graceful-restart', { peers: [peer('router', { gracefulRestart: true })], services: [lb('web', '10.0.100.1')] }],
  ['bfd-password-multihop', {
    peers: [peer('core', { peerAddress: '192.168.1.1', peerASN: 65000, bfd: { receiveIntervalMs: 100, transmitIntervalMs: 100, detectMultiplier: 3 }, passwordSecretRef: { name: 'bgp', key: 'password' }, ebgpMultihop: 4, gracefulRestart: false, holdTimeSeconds: 30, keepaliveTimeSeconds: 10 })],
    passwords: new Map([['core', 's3cr3t!']]),
    services: [lb('web', '10.0.100.1')],
  }],
  ['two-peers-attributes', {
    peers: [peer('isp-a', { peerAddress: '10.0.30.1' }), peer('isp-b', { peerAddress: '10.0.30.2', peerASN: 64514 })],
    advertisements: [ad('public', { communities: ['64512:100', 'no-export'], peers: ['isp-a'], serviceSelector: { matchLabels: { exposure: 'public' } } }), ad('internal', { localPref: 200 })],
    services: [lb('web', '10.0.100.1', { labels: { exposure: 'public' } }), lb('admin', '10.0.100.9')],
  }],
  ['etp-local', {
    services: [lb('here', '10.0.100.1', { etp: 'Local' }), lb('elsewhere', '10.0.100.2', { etp: 'Local' }), lb('not-ready', '10.0.100.3', { etp: 'Local' })],
    slices: [slice('here', 'node-1'), slice('elsewhere', 'node-2'), slice('not-ready', 'node-1', false)],
  }],
  ['datapath-unhealthy', { services: [lb('web', '10.0.100.1')], datapathHealthy: false }],
];

const vtyshCheck = (file: string) => spawnSync('vtysh', ['-C', '-f', file], { encoding: 'utf8' });

describe('FRR configuration (golden files)', () => {
  for (const [name, o] of CASES) {
    it(`${name}: rendered as the golden file, and FRR's parser takes it`, () => {
      const cfg = bgpNodeConfig(input(o))!;
      expect(cfg.problems).toEqual([]);
      const text = frrText(renderFrr(cfg));
      const file = join(GOLDEN, `${name}.conf`);
      if (process.env.UPDATE_GOLDEN) writeFileSync(file, text);
      expect(text).toBe(readFileSync(file, 'utf8'));
      const check = vtyshCheck(file);
      expect(check.error, 'vtysh is missing: scripts/setup.sh installs frr').toBeUndefined();
      expect(check.status, `${check.stdout}${check.stderr}`).toBe(0);
    });
  }

  it('FRR\'s parser would have caught a bad line (so the check above means something)', () => {
    const bad = join(GOLDEN, '..', '..', '..', 'build', 'bad-frr.conf');
    writeFileSync(bad, 'router bgp 64512\n neighbor 10.0.30.1 remote-as 64513\n neighbor 10.0.30.1 timers sometimes\n');
    expect(vtyshCheck(bad).status).not.toBe(0);
  });
});

describe('what a node announces', () => {
  it('no peer selects the node: BGP is off there', () => {
    expect(bgpNodeConfig(input({ peers: [peer('router', { nodeSelector: { matchLabels: { rack: 'b' } } })] }))).toBeUndefined();
  });

  it('ETP=Local: only Services with a ready endpoint here', () => {
    expect(bgpNodeConfig(input(CASES.find(([n]) => n === 'etp-local')![1]))!.prefixes.map((p) => p.prefix)).toEqual(['10.0.100.1/32']);
  });

  it('an advertisement that does not select the node announces nothing from it', () => {
    expect(bgpNodeConfig(input({ services: [lb('web', '10.0.100.1')], advertisements: [ad('rack-b', { nodeSelector: { matchLabels: { rack: 'b' } } })] }))!.prefixes).toEqual([]);
  });

  it('a Service the datapath could not program is not announced from here', () => {
    expect(bgpNodeConfig(input({ services: [lb('web', '10.0.100.1'), lb('big', '10.0.100.2')], unprogrammed: new Set(['default/big']) }))!.prefixes.map((p) => p.prefix)).toEqual(['10.0.100.1/32']);
  });

  it.each<[string, Record<string, unknown>, RegExp]>([
    ['a peer address that is not IPv4', { peerAddress: '10.0.30.1\n router bgp 1' }, /peerAddress/],
    ['a peer address that is not unicast', { peerAddress: '224.0.0.5' }, /peerAddress "224\.0\.0\.5": a unicast/],
    ['a loopback peer address', { peerAddress: '127.0.0.1' }, /peerAddress/],
    ['an ASN out of range', { peerASN: 2 ** 33 }, /peerASN/],
    ['keepalive above a third of the hold time', { holdTimeSeconds: 9, keepaliveTimeSeconds: 5 }, /keepalive/],
    ['a BFD multiplier of 1', { bfd: { detectMultiplier: 1 } }, /bfd/],
  ])('a hostile or broken BGPPeer (%s) is left out, and says why', (_what, spec, re) => {
    const cfg = bgpNodeConfig(input({ peers: [peer('bad', spec), peer('router', {})] }))!;
    expect(cfg.problems.join(' ')).toMatch(re);
    expect(cfg.peers.map((p) => p.name)).toEqual(['router']);
    expect(cfg.peerProblems).toEqual([]); // the object's own error: the operator's Accepted condition says it
  });

  it('a valid peer this node leaves out (a missing password, another myASN) is a peer problem, for an Event on it', () => {
    const cfg = bgpNodeConfig(input({ peers: [peer('router', {}), peer('other-asn', { peerAddress: '10.0.30.2', myASN: 64600 }), peer('locked', { peerAddress: '10.0.30.3', passwordSecretRef: { name: 'bgp', key: 'pw' } })], passwords: new Map() }))!;
    expect(cfg.peers.map((p) => p.name)).toEqual(['router']);
    expect(cfg.peerProblems.map((p) => `${p.peer} ${p.reason}`)).toEqual(['other-asn ASNConflict', 'locked PasswordMissing']);
    expect(cfg.peerProblems[1]!.message).toMatch(/Secret bgp, key pw\) is missing/);
  });

  it('communities are rendered as FRR reads them back: once each, in numeric order, well-known values by name', () => {
    expect(canonicalCommunities(['10:1', '9:1', 'no-export', '0:0', '65535:65281', '65535:65535', '9:1', '65535:0'])).toEqual(['internet', '9:1', '10:1', 'graceful-shutdown', 'no-export', '65535:65535']);
    const cfg = bgpNodeConfig(input({ services: [lb('web', '10.0.100.1')], advertisements: [ad('a', { communities: ['10:1', 'local-AS'] }), ad('b', { communities: ['9:1', '10:1'] })] }))!;
    expect(cfg.prefixes[0]!.to[0]!.communities).toEqual(['9:1', '10:1', 'local-AS']);
  });

  it('a peer at this node\'s own address is left out here (FRR refuses "the local system" as neighbor), and said', () => {
    const cfg = bgpNodeConfig(input({ peers: [peer('router', {}), peer('self', { peerAddress: '10.0.30.21' })] }))!;
    expect(cfg.peers.map((p) => p.name)).toEqual(['router']);
    expect(cfg.peerProblems).toEqual([{ peer: 'self', reason: 'LocalAddress', message: 'peerAddress 10.0.30.21 is this node\'s own address: left out' }]);
  });

  it.each<[string, Record<string, unknown>]>([
    ['a community that would break the line', { communities: ['64512:1\nrouter bgp 1'] }],
    ['a peer name that is not a name', { peers: ['router; rm'] }],
    // FRR refuses it ("Malformed communities attribute"): every apply would fail on that line.
    ['a community part above 65535', { communities: ['99999:1'] }],
  ])('a hostile BGPAdvertisement (%s) announces nothing', (_what, spec) => {
    const cfg = bgpNodeConfig(input({ services: [lb('web', '10.0.100.1')], advertisements: [ad('bad', spec)] }))!;
    expect(cfg.prefixes).toEqual([]);
    expect(cfg.problems).toHaveLength(1);
  });

  it('a password that could break FRR\'s configuration is refused, and the peer left out', () => {
    const cfg = bgpNodeConfig(input({ peers: [peer('router', { passwordSecretRef: { name: 'bgp', key: 'pw' } })], passwords: new Map([['router', 'ok\n router bgp 1']]) }))!;
    expect(cfg.peers).toEqual([]);
    expect(cfg.problems.join(' ')).toMatch(/password .* not printable ASCII/);
  });
});

describe('who announces an address (ferry lb list)', () => {
  const nodes = [node('node-1', '10.0.30.21', { rack: 'a' }), node('node-2', '10.0.30.22', { rack: 'a' }), node('node-3', '10.0.30.23', { rack: 'b' }), node('node-4', '10.0.30.24', { rack: 'a', 'node.kubernetes.io/exclude-from-external-load-balancers': '' })];
  const services = [lb('web', '10.0.100.1'), lb('solo', '10.0.100.2', { etp: 'Local' }), lb('none', '10.0.100.3', { etp: 'Local' })];
  const slices = [slice('solo', 'node-2'), slice('none', 'node-1', false)];

  it('every node a peer selects (not excluded), ETP=Local only where a ready endpoint is; a password Secret counts as present', () => {
    const bgp = bgpAnnouncers({ nodes, services, slices, peers: [peer('router', { nodeSelector: { matchLabels: { rack: 'a' } }, passwordSecretRef: { name: 'bgp', key: 'pw' } })], advertisements: [ad('all')] });
    expect(Object.fromEntries(bgp)).toEqual({ '10.0.100.1': ['node-1', 'node-2'], '10.0.100.2': ['node-2'] });
  });

  it('no advertisement: nobody', () => {
    expect(bgpAnnouncers({ nodes, services, slices, peers: [peer('router', {})], advertisements: [] }).size).toBe(0);
  });

  it('the ANNOUNCED-BY column joins L2 owners and BGP speakers', () => {
    const bgp = bgpAnnouncers({ nodes, services, slices, peers: [peer('router', {})], advertisements: [ad('all')] });
    const claims = [{ node: 'node-3', addresses: ['10.0.100.3'], ageSeconds: 1, durationSeconds: 15 }];
    const rows = addressRows(services, [], claims, bgp).addresses;
    expect(rows.map((r) => [r.address, r.announcedBy])).toEqual([
      ['10.0.100.1', 'node-1, node-2, node-3 (bgp)'],
      ['10.0.100.2', 'node-2 (bgp)'],
      ['10.0.100.3', 'node-3 (l2)'],
    ]);
  });
});

describe('FRR commands from one state to another', () => {
  const at = (o: Partial<BgpInput>) => renderFrr(bgpNodeConfig(input(o))!);
  const ten = at({ services: Array.from({ length: 10 }, (_, i) => lb(`s${i}`, `10.0.100.${i + 1}`)) });

  it('nothing to do when nothing changed', () => {
    expect(frrCommands(ten, ten)).toBe('');
  });

  it('a new address: its network, nothing else (one advertisement for every peer needs no prefix list)', () => {
    const eleven = at({ services: Array.from({ length: 11 }, (_, i) => lb(`s${i}`, `10.0.100.${i + 1}`)) });
    expect(frrCommands(ten, eleven).trim().split('\n')).toEqual(['router bgp 64512', ' address-family ipv4 unicast', '  network 10.0.100.11/32', ' exit-address-family', 'exit']);
    expect(frrCommands(eleven, ten).trim().split('\n')).toEqual(['router bgp 64512', ' address-family ipv4 unicast', '  no network 10.0.100.11/32', ' exit-address-family', 'exit']);
  });

  it('an address for one peer only: an exception in a prefix list for the others, added before, removed after', () => {
    const two = (svcs: V1Service[]) => at({
      peers: [peer('a', {}), peer('b', { peerAddress: '10.0.30.2' })],
      advertisements: [ad('all', { serviceSelector: { matchLabels: { to: 'all' } } }), ad('only-a', { peers: ['a'], serviceSelector: { matchLabels: { to: 'a' } } })],
      services: svcs,
    });
    const both = [lb('x', '10.0.100.1', { labels: { to: 'all' } }), lb('y', '10.0.100.2', { labels: { to: 'all' } })];
    const before = two(both);
    const after = two([...both, lb('z', '10.0.100.3', { labels: { to: 'a' } })]);
    const cmds = frrCommands(before, after).trim().split('\n');
    const pl = cmds.findIndex((l) => /^ip prefix-list ferry-b-[0-9a-f]{8} permit 10\.0\.100\.3\/32$/.test(l));
    expect(pl).toBeGreaterThanOrEqual(0); // b must not get it
    expect(cmds).toContain('route-map ferry-out-b deny 10');
    expect(pl).toBeLessThan(cmds.indexOf('  network 10.0.100.3/32')); // the filter before the route
    const back = frrCommands(after, before).trim().split('\n');
    expect(back.indexOf('  no network 10.0.100.3/32')).toBeLessThan(back.findIndex((l) => l.startsWith('no ip prefix-list ferry-b-')));
  });

  it('a peer removed: its address-family lines go with it, its route map after', () => {
    const two = at({ peers: [peer('router', {}), peer('other', { peerAddress: '10.0.30.2' })] });
    const one = at({ peers: [peer('router', {})] });
    const cmds = frrCommands(two, one);
    expect(cmds).toContain(' no neighbor 10.0.30.2 remote-as 64513');
    expect(cmds).not.toContain('no neighbor 10.0.30.2 route-map');
    expect(cmds.indexOf('no route-map ferry-out-other deny 65535')).toBeGreaterThan(cmds.indexOf('no neighbor 10.0.30.2 remote-as'));
  });

  it('a route-map entry whose action changes is replaced in place, not removed after', () => {
    const none = at({ services: [] });
    const one = at({ services: [lb('web', '10.0.100.1')] });
    expect(frrCommands(none, one)).toContain('route-map ferry-out-router permit 65535');
    expect(frrCommands(none, one)).not.toContain('no route-map ferry-out-router deny 65535');
    expect(frrCommands(one, none)).not.toContain('no route-map ferry-out-router permit 65535');
  });

  it('everything goes: diff against the empty configuration', () => {
    expect(frrCommands(ten, EMPTY_FRR)).toMatch(/^no router bgp 64512$/m);
  });

  it('a BFD profile FRR writes back in its own line order is not applied again', () => {
    const cfg = renderFrr(bgpNodeConfig(input({ peers: [peer('router', { bfd: { receiveIntervalMs: 100, transmitIntervalMs: 200, detectMultiplier: 5 } })] }))!);
    // FRR 8.4's order: detect-multiplier, transmit-interval, receive-interval.
    const running = frrText(cfg).replace(/(  receive-interval 100)\n(  transmit-interval 200)\n(  detect-multiplier 5)/, '$3\n$2\n$1');
    expect(running).toMatch(/detect-multiplier 5\n {2}transmit-interval 200\n {2}receive-interval 100/);
    expect(frrCommands(parseRunning(running), cfg)).toBe('');
  });

  it('reads back what it rendered (FRR\'s running configuration has the same shape)', () => {
    const running = frrText(ten).replace(/^ip prefix-list (\S+) permit/gm, (_m, n: string) => `ip prefix-list ${n} seq 5 permit`);
    expect(frrCommands(parseRunning(running), ten)).toBe('');
  });
});

// FRR's version, for the record of what the golden files were checked against.
export const frrVersion = () => execFileSync('vtysh', ['--version'], { encoding: 'utf8' }).split('\n')[0];
