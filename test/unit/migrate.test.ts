// `ferry migrate`: MetalLB and Cilium pools and annotations become ferry's, keeping every
// address (edges, ranges, selectors), and what ferry cannot express is a warning.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { migrate } from '../../src/ipam/migrate.js';
import { allocate } from '../../src/ipam/allocator.js';
import { parsePool } from '../../src/ipam/pool.js';
import { poolInput } from '../../src/ipam/pool-resource.js';
import { REPO_ROOT } from '../harness/paths.js';

const fixture = (name: string): unknown[] => parseAllDocuments(readFileSync(join(REPO_ROOT, 'test', 'fixtures', 'migrate', name), 'utf8')).map((d) => d.toJSON());
const byName = (docs: Array<Record<string, any>>, kind: string, name: string) => docs.find((d) => d.kind === kind && d.metadata.name === name)!;

describe('ferry migrate', () => {
  it('MetalLB: pools with the same addresses (.0 and .255 included unless avoidBuggyIPs), namespaces and selectors; annotations, both prefixes', () => {
    const m = migrate(fixture('metallb.yaml'));
    const production = byName(m.docs, 'LoadBalancerIPPool', 'production');
    expect(production).toMatchObject({ apiVersion: 'ferry.dev/v1alpha1', spec: { blocks: [{ cidr: '10.0.110.0/24' }, { start: '10.0.111.10', stop: '10.0.111.20' }], allowFirstLastIPs: true } });
    expect(parsePool(poolInput(production)).total).toBe(256 + 11); // MetalLB handed out .0 and .255: so does the ferry pool
    expect(byName(m.docs, 'LoadBalancerIPPool', 'team-db').spec).toEqual({
      blocks: [{ cidr: '10.0.112.0/28' }], allowFirstLastIPs: false, autoAssign: false, priority: 10,
      serviceSelector: { matchLabels: { tier: 'database' }, matchExpressions: [{ key: 'ferry.dev/service-namespace', operator: 'In', values: ['db', 'db-staging'] }] },
    });
    const tcp = byName(m.docs, 'Service', 'dns-tcp');
    expect(tcp.metadata.annotations).toEqual({ 'metallb.io/allow-shared-ip': 'dns', 'metallb.io/loadBalancerIPs': '10.0.110.53', 'ferry.dev/sharing-key': 'dns', 'ferry.dev/load-balancer-ips': '10.0.110.53' });
    expect(tcp.metadata.resourceVersion).toBeUndefined(); // server fields off, so kubectl apply takes it
    expect(tcp.status).toBeUndefined();
    expect(tcp.spec.ports).toEqual([{ port: 53, protocol: 'TCP' }]); // the whole spec, so an apply removes nothing
    expect(byName(m.docs, 'Service', 'dns-udp').metadata.annotations['ferry.dev/sharing-key']).toBe('dns');
    expect(m.docs.find((d) => (d.metadata as { name: string }).name === 'plain')).toBeUndefined(); // nothing to change
    expect(m.warnings).toEqual([
      'L2Advertisement l2: not migrated; write ferry\'s own (L2AnnouncementPolicy, or BGPPeer and BGPAdvertisement of ferry.dev: README "L2 announcements" and "BGP")',
    ]);
  });

  it('MetalLB namespaceSelectors: the first becomes the pool\'s namespaceSelector', () => {
    const m = migrate([{ apiVersion: 'metallb.io/v1beta1', kind: 'IPAddressPool', metadata: { name: 'p' }, spec: { addresses: ['10.0.0.0/24'], serviceAllocation: { namespaceSelectors: [{ matchLabels: { team: 'x' } }], serviceSelectors: [{ matchLabels: { tier: 'web' } }] } } }]);
    expect(m.docs[0]!.spec).toMatchObject({ namespaceSelector: { matchLabels: { team: 'x' } }, serviceSelector: { matchLabels: { tier: 'web' } } });
    expect(m.warnings).toEqual([]);
  });

  it('MetalLB lists are kept whole: several serviceSelectors or namespaceSelectors, namespaces or namespaceSelectors (any of them)', () => {
    const metallb = (name: string, cidr: string, serviceAllocation: object) => ({ apiVersion: 'metallb.io/v1beta1', kind: 'IPAddressPool', metadata: { name }, spec: { addresses: [cidr], serviceAllocation } });
    const m = migrate([
      metallb('web', '10.0.1.0/24', { namespaces: ['a'], serviceSelectors: [{ matchLabels: { tier: 'web' } }, { matchLabels: { tier: 'api' } }] }),
      metallb('either', '10.0.2.0/24', { namespaces: ['shop'], namespaceSelectors: [{ matchLabels: { team: 'x' } }] }),
      metallb('teams', '10.0.3.0/24', { namespaceSelectors: [{ matchLabels: { team: 'x' } }, { matchLabels: { team: 'y' } }] }),
    ]);
    expect(m.warnings).toEqual([]);
    const spec = (name: string) => byName(m.docs, 'LoadBalancerIPPool', name).spec;
    expect(spec('web')).toMatchObject({ serviceSelector: { matchExpressions: [{ key: 'ferry.dev/service-namespace', operator: 'In', values: ['a'] }] }, serviceSelectors: [{ matchLabels: { tier: 'web' } }, { matchLabels: { tier: 'api' } }] });
    expect(spec('either')).toMatchObject({ namespaceSelectors: [{ matchLabels: { team: 'x' } }, { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: ['shop'] }] }] });
    expect(spec('either').serviceSelector).toBeUndefined();
    expect(spec('teams')).toMatchObject({ namespaceSelectors: [{ matchLabels: { team: 'x' } }, { matchLabels: { team: 'y' } }] });
    // The ferry pools take the Services MetalLB's would.
    const pools = ['web', 'either', 'teams'].map((n) => poolInput(byName(m.docs, 'LoadBalancerIPPool', n)));
    const service = (ns: string, name: string, labels: Record<string, string>, nsLabels: Record<string, string> = {}, created = '2026-02-01T00:00:00Z') => ({
      key: `${ns}/${name}`, namespace: ns, created, labels: { 'ferry.dev/service-namespace': ns, 'ferry.dev/service-name': name, ...labels },
      namespaceLabels: { 'kubernetes.io/metadata.name': ns, ...nsLabels }, requestedIPs: [], ports: ['TCP/80'], etpLocal: false, selector: 'app=x', current: [],
    });
    const r = allocate(pools, [
      service('a', 'api', { tier: 'api' }, {}, '2026-02-01T00:00:01Z'),
      service('b', 'api', { tier: 'api' }, {}, '2026-02-01T00:00:02Z'), // not in namespace a: 'web' does not take it; nor the others
      service('shop', 'cart', {}, {}, '2026-02-01T00:00:03Z'),
      service('z', 'y', {}, { team: 'y' }, '2026-02-01T00:00:04Z'),
    ]);
    expect(r.services.get('a/api')?.ips).toEqual(['10.0.1.0']);
    expect(r.services.get('b/api')?.ips).toEqual([]);
    expect(r.services.get('shop/cart')?.ips).toEqual(['10.0.2.0']);
    expect(r.services.get('z/y')?.ips).toEqual(['10.0.3.0']);
  });

  it('Cilium: blocks (single-address ranges, IPv6 kept), pseudo-labels renamed, allowFirstLastIPs "No" as exact ranges; annotations', () => {
    const m = migrate(fixture('cilium.yaml'));
    expect(byName(m.docs, 'LoadBalancerIPPool', 'blue').spec).toEqual({
      blocks: [{ cidr: '10.0.120.0/24' }, { start: '10.0.121.5', stop: '10.0.121.9' }, { start: '10.0.121.100', stop: '10.0.121.100' }, { cidr: '2001:db8:120::/64' }],
      allowFirstLastIPs: true,
      serviceSelector: { matchLabels: { 'ferry.dev/service-namespace': 'web' } },
    });
    const edge = byName(m.docs, 'LoadBalancerIPPool', 'edge');
    // Cilium keeps back the /28's first and last only (.0 and .15), and a /32 whole.
    expect(edge.spec).toEqual({ blocks: [{ start: '10.0.122.1', stop: '10.0.122.14' }, { cidr: '10.0.123.7/32' }], allowFirstLastIPs: true, disabled: true });
    expect(parsePool(poolInput(edge)).total).toBe(15);
    expect(byName(m.docs, 'Service', 'shop').metadata.annotations).toMatchObject({ 'ferry.dev/load-balancer-ips': '10.0.120.80', 'ferry.dev/sharing-key': 'shop' });
    expect(m.warnings).toEqual(['Service web/shop: lbipam.cilium.io/sharing-cross-namespace is not supported; ferry shares an address within one namespace only']);
  });

  it.each<[string, unknown[], string]>([
    ['a MetalLB priority that is no int32', [{ apiVersion: 'metallb.io/v1beta1', kind: 'IPAddressPool', metadata: { name: 'p' }, spec: { addresses: ['10.0.0.0/24'], serviceAllocation: { priority: 'first' } } }], 'IPAddressPool p: priority "first" is not an integer from 0 to 2147483647; not kept'],
    ['a foreign loadBalancerClass', [{ apiVersion: 'v1', kind: 'Service', metadata: { name: 's', namespace: 'n', annotations: { 'lbipam.cilium.io/ips': '10.0.0.1' } }, spec: { type: 'LoadBalancer', loadBalancerClass: 'io.cilium/l2-announcer' } }], 'Service n/s: loadBalancerClass io.cilium/l2-announcer is immutable and not ferry\'s; ferry will leave this Service alone (recreate it without a class, or with ferry.dev/lb)'],
    ['an annotation that disagrees with ferry\'s', [{ apiVersion: 'v1', kind: 'Service', metadata: { name: 's', namespace: 'n', annotations: { 'metallb.io/loadBalancerIPs': '10.0.0.1', 'ferry.dev/load-balancer-ips': '10.0.0.2' } }, spec: { type: 'LoadBalancer' } }], 'Service n/s: metallb.io/loadBalancerIPs=10.0.0.1 differs from ferry.dev/load-balancer-ips=10.0.0.2; kept ferry\'s'],
    ['something else', [{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'config' } }], 'ConfigMap config: not something ferry migrates; skipped'],
  ])('warns: %s', (_what, docs, warning) => {
    expect(migrate(docs).warnings).toContain(warning);
  });
});
