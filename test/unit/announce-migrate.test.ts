// `ferry migrate` for announcements: MetalLB's L2Advertisement, BGPPeer (with its
// BFDProfile) and BGPAdvertisement (with Community aliases), and Cilium's L2 policy, become
// ferry's objects that ferry's own readers accept; what ferry cannot express is a warning.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { announcementMigrator, goDurationSeconds } from '../../src/announce/migrate.js';
import { parseBgpAdvertisement, parseBgpPeer } from '../../src/announce/bgp.js';
import { parseL2Policy } from '../../src/announce/policy.js';
import { migrate } from '../../src/ipam/migrate.js';
import { TestApiServer } from '../../src/sandbox/apiserver/server.js';
import { REPO_ROOT } from '../harness/paths.js';

const fixture = (name: string): unknown[] => parseAllDocuments(readFileSync(join(REPO_ROOT, 'test', 'fixtures', 'migrate', name), 'utf8')).map((d) => d.toJSON());
type Doc = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string }; spec: Record<string, any> };
const byName = (docs: unknown[], kind: string, name: string) => (docs as Doc[]).find((d) => d.kind === kind && d.metadata.name === name)!;

describe('ferry migrate: announcements', () => {
  const m = migrate(fixture('metallb-announcements.yaml'), announcementMigrator);

  it('an L2Advertisement becomes a policy for every LoadBalancer Service: exact interface names, the first nodeSelector', () => {
    const lan = byName(m.docs, 'L2AnnouncementPolicy', 'lan');
    expect(lan).toMatchObject({ apiVersion: 'ferry.dev/v1alpha1', metadata: { name: 'lan' } });
    expect(lan.metadata.namespace).toBeUndefined(); // ferry's are cluster-scoped
    expect(lan.spec).toEqual({ nodeSelector: { matchLabels: { 'kubernetes.io/hostname': 'node-1' } }, interfaces: ['eth0', 'bond0\\.100'] });
    const p = parseL2Policy(lan);
    expect(p.errors).toEqual([]);
    expect(p.interfaces.map((r) => ['bond0.100', 'bond0x100', 'eth0', 'eth01'].filter((n) => r.test(n)))).toEqual([['eth0'], ['bond0.100']]);
    expect(p.loadBalancerIPs).toBe(true);
  });

  it('a BGPPeer keeps its session: durations, BFD from its profile, multihop, the password Secret by name', () => {
    const tor = byName(m.docs, 'BGPPeer', 'tor');
    expect(tor.spec).toEqual({
      peerAddress: '10.0.30.1', peerASN: 64500, myASN: 64512, nodeSelector: { matchLabels: { rack: 'a' } },
      holdTimeSeconds: 90, keepaliveTimeSeconds: 30, ebgpMultihop: 255,
      passwordSecretRef: { name: 'tor-password', key: 'password' },
      bfd: { receiveIntervalMs: 100, transmitIntervalMs: 150, detectMultiplier: 5 },
    });
    expect(parseBgpPeer(tor).errors).toEqual([]);
    const spine = byName(m.docs, 'BGPPeer', 'spine');
    expect(spine.spec).toMatchObject({ holdTimeSeconds: 30, keepaliveTimeSeconds: 10 });
    expect(parseBgpPeer(spine).errors).toEqual([]);
  });

  it('a BGPAdvertisement keeps localPref, peers and communities (aliases resolved)', () => {
    const up = byName(m.docs, 'BGPAdvertisement', 'upstream');
    expect(up.spec).toEqual({ localPref: 200, communities: ['65000:100', '65000:200'], peers: ['tor'] });
    expect(parseBgpAdvertisement(up).errors).toEqual([]);
    expect(m.docs.filter((d) => ['BFDProfile', 'Community'].includes((d as Doc).kind))).toEqual([]);
  });

  it('says what it could not keep', () => {
    expect(m.warnings).toEqual([
      "L2Advertisement lan: limited to some pools (ipAddressPools/ipAddressPoolSelectors); ferry's selects Services, so this one announces every LoadBalancer Service's address — add a serviceSelector to narrow it",
      'L2Advertisement lan: 2 nodeSelectors (any of them) cannot be one ferry nodeSelector; kept the first — label the nodes alike',
      "BGPPeer tor: the password Secret metallb-system/tor-password is read from ferry's namespace: copy it there (key \"password\")",
      'BGPPeer spine: peerPort not supported by ferry; left out',
      'BGPAdvertisement upstream: large community large:1:2:3 is not supported; left out',
    ]);
  });

  it('a made object ferry\'s reader would refuse is a warning, and an inline password is not copied', () => {
    const r = migrate([{ apiVersion: 'metallb.io/v1beta2', kind: 'BGPPeer', metadata: { name: 'Bad_Name' }, spec: { myASN: 1, peerASN: 2, peerAddress: 'fd00::1', password: 'secret', holdTime: 'soon' } }], announcementMigrator);
    expect(JSON.stringify(r.docs)).not.toContain('secret');
    expect(r.warnings).toEqual([
      'BGPPeer Bad_Name: holdTime "soon" is not a duration; ferry\'s default (9 s) applies',
      "BGPPeer Bad_Name: an inline password is not carried over (it would land in this output); put it in a Secret in ferry's namespace and set passwordSecretRef",
      "BGPPeer Bad_Name: name \"Bad_Name\": lower case letters, digits, - and . only (ferry's agent would ignore this object; fix it after migrating)",
      "BGPPeer Bad_Name: peerAddress \"fd00::1\": a unicast IPv4 address (ferry's agent would ignore this object; fix it after migrating)",
    ]);
  });

  it('Cilium\'s L2 policy: its flags default to off, pseudo-labels renamed, patterns found anywhere in a name', () => {
    const r = migrate([{ apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumL2AnnouncementPolicy', metadata: { name: 'c' }, spec: { externalIPs: true, interfaces: ['^eth[0-9]+', 'ens'], serviceSelector: { matchLabels: { 'io.kubernetes.service.namespace': 'web' } }, nodeSelector: { matchExpressions: [{ key: 'node-role.kubernetes.io/control-plane', operator: 'DoesNotExist' }] } } }], announcementMigrator);
    expect(r.warnings).toEqual([]);
    const c = byName(r.docs, 'L2AnnouncementPolicy', 'c');
    expect(c.spec).toMatchObject({ loadBalancerIPs: false, externalIPs: true, serviceSelector: { matchLabels: { 'ferry.dev/service-namespace': 'web' } } });
    const p = parseL2Policy(c);
    expect(['eth0', 'eth12', 'veth0', 'ens3', 'enp1s0'].filter((n) => p.interfaces.some((re) => re.test(n)))).toEqual(['eth0', 'eth12', 'ens3']);
  });

  it('a node override, and any announcement object without the translator, are named as not migrated', () => {
    const override = { apiVersion: 'cilium.io/v2', kind: 'CiliumBGPNodeConfigOverride', metadata: { name: 'node-1' } };
    expect(migrate([override], announcementMigrator).warnings).toEqual([expect.stringMatching(/^CiliumBGPNodeConfigOverride node-1: not migrated; write ferry's own/)]);
    expect(migrate(fixture('metallb-announcements.yaml')).docs).toEqual([]);
    const policy = { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumBGPPeeringPolicy', metadata: { name: 'p' } };
    expect(migrate([policy]).warnings).toEqual([expect.stringMatching(/^CiliumBGPPeeringPolicy p: not migrated/)]);
  });

  describe('Cilium\'s BGP control plane', () => {
    const c = migrate(fixture('cilium-bgp.yaml'), announcementMigrator);
    const peers = (c.docs as Doc[]).filter((d) => d.kind === 'BGPPeer');
    const adverts = (c.docs as Doc[]).filter((d) => d.kind === 'BGPAdvertisement');

    it('a peering policy\'s neighbors become peers with Cilium\'s timers written out; IPv6 ones are left out', () => {
      expect(peers.map((p) => p.metadata.name)).toEqual(['rack0-10.0.40.1', 'rack0-10.0.40.2', 'rack0-10.0.41.1', 'tor-tor-1', 'tor-tor-2']);
      expect(byName(peers, 'BGPPeer', 'rack0-10.0.40.1').spec).toEqual({ peerAddress: '10.0.40.1', peerASN: 64500, myASN: 64512, holdTimeSeconds: 90, keepaliveTimeSeconds: 30, nodeSelector: { matchLabels: { rack: 'rack0' } }, ebgpMultihop: 4, gracefulRestart: true });
      expect(byName(peers, 'BGPPeer', 'rack0-10.0.40.2').spec).toMatchObject({ holdTimeSeconds: 30, keepaliveTimeSeconds: 10, passwordSecretRef: { name: 'bgp-auth', key: 'password' } });
      expect(byName(peers, 'BGPPeer', 'rack0-10.0.40.2').spec).not.toHaveProperty('ebgpMultihop');
      expect(c.warnings).toContainEqual(expect.stringMatching(/neighbors\[2\]: IPv6 peer fd00::1 not migrated/));
      expect(c.warnings).toContainEqual(expect.stringMatching(/virtualRouters\[0\]: exportPodCIDR/));
      expect(c.warnings).toContainEqual(expect.stringMatching(/password Secret bgp-auth is read from ferry's namespace/));
    });

    it('a virtual router\'s Service selector becomes one advertisement per set of path attributes, to its own neighbors; none selected, none made', () => {
      const withAttrs = byName(adverts, 'BGPAdvertisement', 'rack0-0');
      expect(withAttrs.spec).toEqual({
        serviceSelector: { matchExpressions: [{ key: 'ferry.dev/service-namespace', operator: 'NotIn', values: ['kube-system'] }] },
        loadBalancerIPs: true, externalIPs: false, peers: ['rack0-10.0.40.1'],
        // The 32-bit decimal form as ASN:value; the well-known name as FRR spells it.
        communities: ['64500:100', '65000:100', 'no-export'], localPref: 150,
      });
      expect(byName(adverts, 'BGPAdvertisement', 'rack0-0-2').spec).toMatchObject({ peers: ['rack0-10.0.40.2'] });
      expect(byName(adverts, 'BGPAdvertisement', 'rack0-0-2').spec).not.toHaveProperty('communities');
      expect(adverts.some((a) => a.metadata.name.startsWith('rack0-1'))).toBe(false);
      expect(c.warnings).toContainEqual(expect.stringMatching(/virtualRouters\[1\]: no Service selector, so Cilium announces no Service; nothing made/));
      expect(c.warnings).toContainEqual(expect.stringMatching(/neighbors\[0\]: path attributes for some pools left out/));
    });

    it('cluster config peers take their peer config; advertisements go to the peers whose ipv4 family selects them', () => {
      expect(byName(peers, 'BGPPeer', 'tor-tor-1').spec).toEqual({ peerAddress: '10.0.50.1', peerASN: 65001, myASN: 65000, holdTimeSeconds: 9, keepaliveTimeSeconds: 3, ebgpMultihop: 2, nodeSelector: { matchLabels: { bgp: 'on' } } });
      expect(byName(peers, 'BGPPeer', 'tor-tor-2').spec).toMatchObject({ holdTimeSeconds: 90, keepaliveTimeSeconds: 30 });
      expect(c.warnings).toContainEqual(expect.stringMatching(/peer tor-2: CiliumBGPPeerConfig missing-config is not in the input/));
      expect(byName(adverts, 'BGPAdvertisement', 'services-0').spec).toEqual({ serviceSelector: { matchLabels: { bgp: 'yes' } }, loadBalancerIPs: true, externalIPs: false, peers: ['tor-tor-1'], communities: ['65000:1'], localPref: 120 });
      expect(adverts.map((a) => a.metadata.name)).toEqual(['rack0-0', 'rack0-0-2', 'services-0']);
      for (const w of [/advertisements\[0\]: ClusterIPs are not announced/, /large communities are not supported/, /advertisements\[1\]: PodCIDR is not announced/, /CiliumBGPAdvertisement v6-only: no migrated peer's ipv4 family selects it/]) expect(c.warnings).toContainEqual(expect.stringMatching(w));
    });

    it('every object made is one the agents accept', () => {
      for (const p of peers) expect(parseBgpPeer(p).errors, p.metadata.name).toEqual([]);
      for (const a of adverts) expect(parseBgpAdvertisement(a).errors, a.metadata.name).toEqual([]);
      expect(c.warnings.filter((w) => /would ignore/.test(w))).toEqual([]);
    });
  });

  it('what it makes passes ferry\'s CRD schemas as it is (no field pruned, none refused)', async () => {
    const server = new TestApiServer();
    await server.start();
    try {
      const post = async (path: string, body: unknown) => {
        const r = await fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
        return { status: r.status, json: (await r.json()) as Record<string, any> };
      };
      for (const n of ['l2announcementpolicies', 'bgppeers', 'bgpadvertisements']) {
        expect((await post('/apis/apiextensions.k8s.io/v1/customresourcedefinitions', parse(readFileSync(join(REPO_ROOT, 'deploy', 'crds', `${n}.yaml`), 'utf8')))).status).toBe(201);
      }
      const cilium = migrate([{ apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumL2AnnouncementPolicy', metadata: { name: 'c' }, spec: { interfaces: ['^eth'], serviceSelector: { matchLabels: { a: 'b' } } } }], announcementMigrator).docs;
      for (const d of [...m.docs, ...cilium, ...migrate(fixture('cilium-bgp.yaml'), announcementMigrator).docs] as Doc[]) {
        const r = await post(`/apis/ferry.dev/v1alpha1/${({ L2AnnouncementPolicy: 'l2announcementpolicies', BGPPeer: 'bgppeers', BGPAdvertisement: 'bgpadvertisements' } as Record<string, string>)[d.kind]}`, d);
        expect(r.status, `${d.kind} ${d.metadata.name}: ${JSON.stringify(r.json)}`).toBe(201);
        expect(r.json.spec, `${d.kind} ${d.metadata.name}`).toMatchObject(d.spec);
      }
      // The schema refuses a community FRR would refuse (each part at most 65535).
      const community = async (name: string, c: string) => (await post('/apis/ferry.dev/v1alpha1/bgpadvertisements', { apiVersion: 'ferry.dev/v1alpha1', kind: 'BGPAdvertisement', metadata: { name }, spec: { communities: [c] } })).status;
      expect([await community('c1', '65535:65535'), await community('c2', '99999:1'), await community('c3', '65536:0')]).toEqual([201, 422, 422]);
    } finally {
      await server.stop();
    }
  });

  it('reads Go durations', () => {
    expect([goDurationSeconds('90s'), goDurationSeconds('1m30s'), goDurationSeconds('2h'), goDurationSeconds('1500ms'), goDurationSeconds('3m')]).toEqual([90, 90, 7200, 1, 180]);
    for (const bad of ['', 'soon', '90', 1, '1.5s']) expect(goDurationSeconds(bad)).toBeUndefined();
  });
});
