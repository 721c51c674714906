// 200 malformed Services, 200 malformed EndpointSlices and 200 malformed agent config
// files, generated (a seeded random field of a valid object set to a hostile value: the
// wrong type, out of range, not an address, too long), among valid ones. Nothing throws;
// every malformed object is refused with an error naming the field; every valid Service
// is still programmed whole; every bad config file is a FERRY_CONFIG error naming its key.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/agent/config.js';
import { FerryError } from '../../src/errors.js';
import { desiredState, nodeView } from '../../src/model/desired.js';
import { rng } from '../harness/rng.js';

const SEED = Number(process.env.FERRY_DIFF_SEED ?? 20261201);
const NODE: V1Node = { metadata: { name: 'node-1' }, status: { addresses: [{ type: 'InternalIP', address: '10.0.30.21' }] } };

const service = (i: number): V1Service => ({
  metadata: { name: `svc-${i}`, namespace: 'default' },
  spec: {
    type: 'LoadBalancer', clusterIP: `10.96.${i >> 8}.${i & 255}`, externalIPs: [`10.0.200.${i & 255}`],
    ports: [{ name: 'http', port: 80, nodePort: 30000 + i, protocol: 'TCP' }, { name: 'dns', port: 53, nodePort: 31000 + i, protocol: 'UDP' }],
    loadBalancerSourceRanges: ['10.0.10.0/24'], sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 600 } },
  },
  status: { loadBalancer: { ingress: [{ ip: `10.0.100.${i & 255}` }] } },
});
const slice = (i: number): V1EndpointSlice => ({
  metadata: { name: `svc-${i}-a`, namespace: 'default', labels: { 'kubernetes.io/service-name': `svc-${i}` } },
  addressType: 'IPv4',
  ports: [{ name: 'http', port: 8080, protocol: 'TCP' }, { name: 'dns', port: 5353, protocol: 'UDP' }],
  endpoints: [{ addresses: [`10.244.1.${(i % 250) + 1}`], nodeName: 'node-1', conditions: { ready: true } }],
});

/** A path into the object, a hostile value, and what the error must name. */
type Mutation = [path: string, value: unknown, names: RegExp];
const SERVICE_MUTATIONS: Mutation[] = [
  ['metadata.name', '', /metadata\.name/], ['metadata.name', 'UPPER_case', /metadata\.name/], ['metadata.name', 'x'.repeat(64), /metadata\.name/], ['metadata.name', 42, /metadata\.name/],
  ['metadata.namespace', undefined, /metadata\.namespace/], ['metadata.namespace', ['a'], /metadata\.namespace/],
  ['spec', 'nope', /spec/], ['spec', [1, 2], /spec/], ['spec', null, /spec/],
  ['spec.ports', 'http', /spec\.ports/], ['spec.ports', { port: 80 }, /spec\.ports/], ['spec.ports.0', 7, /spec\.ports\[0\]/], ['spec.ports.0', null, /spec\.ports\[0\]/],
  ['spec.ports.0.port', 0, /spec\.ports\[0\]\.port/], ['spec.ports.0.port', 70000, /spec\.ports\[0\]\.port/], ['spec.ports.0.port', '80', /spec\.ports\[0\]\.port/], ['spec.ports.0.port', 1.5, /spec\.ports\[0\]\.port/], ['spec.ports.0.port', -1, /spec\.ports\[0\]\.port/],
  ['spec.ports.0.protocol', 'ICMP', /spec\.ports\[0\]\.protocol/], ['spec.ports.0.protocol', 6, /spec\.ports\[0\]\.protocol/],
  ['spec.ports.0.nodePort', 70000, /spec\.ports\[0\]\.nodePort/], ['spec.ports.0.nodePort', -5, /spec\.ports\[0\]\.nodePort/],
  ['spec.ports.1', { name: 'again', port: 80, protocol: 'TCP' }, /spec\.ports\[1\]: port 80\/TCP is listed twice/], ['spec.ports.1.name', undefined, /spec\.ports\[1\] has no name/], ['spec.ports.1.name', 5, /spec\.ports\[1\]\.name/],
  ['spec.clusterIP', 'x', /cluster IP/], ['spec.clusterIP', '999.1.1.1', /cluster IP/], ['spec.clusterIP', 12345, /cluster IP/], ['spec.clusterIPs', '10.96.0.1', /spec\.clusterIPs/],
  ['spec.externalIPs', '10.0.200.1', /spec\.externalIPs/], ['spec.externalIPs.0', 'a.b.c.d', /externalIP/], ['spec.externalIPs.0', 5, /externalIP/],
  ['spec.loadBalancerSourceRanges.0', '10.0.0.0/99', /loadBalancerSourceRanges/], ['spec.loadBalancerSourceRanges.0', 'x', /loadBalancerSourceRanges/], ['spec.loadBalancerSourceRanges.0', 10, /loadBalancerSourceRanges/], ['spec.loadBalancerSourceRanges', 'all', /loadBalancerSourceRanges/],
  ['spec.sessionAffinityConfig.clientIP.timeoutSeconds', 0, /timeoutSeconds/], ['spec.sessionAffinityConfig.clientIP.timeoutSeconds', 86401, /timeoutSeconds/], ['spec.sessionAffinityConfig.clientIP.timeoutSeconds', 'long', /timeoutSeconds/],
  ['spec.healthCheckNodePort', 99999, /healthCheckNodePort/],
  ['status.loadBalancer.ingress', 'x', /ingress/], ['status.loadBalancer.ingress.0', 3, /ingress/], ['status.loadBalancer.ingress.0.ip', 'not-an-ip', /ingress ip/],
  ['spec.ports', Array.from({ length: 1025 }, (_, p) => ({ name: `p${p}`, port: p + 1 })), /1025 ports/],
];
const SLICE_MUTATIONS: Mutation[] = [
  ['metadata.name', undefined, /metadata\.name/],
  ['ports', 'x', /ports/], ['ports.0', 'x', /ports\[0\]/], ['ports.0.port', 0, /ports\[0\]\.port/], ['ports.0.port', 'http', /ports\[0\]\.port/], ['ports.0.protocol', 'ICMP', /ports\[0\]\.protocol/], ['ports.0.protocol', 17, /ports\[0\]\.protocol/],
  ['endpoints', 'x', /endpoints/], ['endpoints.0', 'x', /endpoints\[0\]/], ['endpoints.0.addresses', '10.244.1.5', /endpoints\[0\]/], ['endpoints.0.addresses.0', '10.244.1.999', /endpoints\[0\]\.addresses\[0\]/], ['endpoints.0.addresses.0', 5, /endpoints\[0\]\.addresses\[0\]/],
  ['endpoints.0.conditions', 'ready', /endpoints\[0\]\.conditions/],
  ['ports', Array.from({ length: 1025 }, (_, p) => ({ name: `p${p}`, port: p + 1 })), /1025 ports/],
];

function mutate<T>(obj: T, path: string, value: unknown): T {
  const copy = JSON.parse(JSON.stringify(obj)) as Record<string, unknown>;
  const keys = path.split('.');
  let at: Record<string, unknown> = copy;
  for (const k of keys.slice(0, -1)) at = at[k] as Record<string, unknown>;
  if (value === undefined) delete at[keys[keys.length - 1]!];
  else at[keys[keys.length - 1]!] = value;
  return copy as T;
}

describe('generated malformed objects', () => {
  it('200 malformed Services and 200 malformed EndpointSlices among 100 valid ones: each refused with its field named, every valid one programmed', () => {
    const r = rng(SEED);
    const services: V1Service[] = [];
    const slices: V1EndpointSlice[] = [];
    const expected = new Map<string, { names: RegExp; what: string }>(); // kind#index → what the error must name, and the mutation
    for (let i = 0; i < 100; i++) {
      services.push(service(i));
      slices.push(slice(i));
    }
    for (let i = 100; i < 300; i++) {
      const [path, value, names] = SERVICE_MUTATIONS[Math.floor(r() * SERVICE_MUTATIONS.length)]!;
      const bad = mutate(service(i), path, value);
      // A mangled name still identifies the object in the rejection list by its index.
      services.push(bad);
      slices.push(slice(i));
      expected.set(`Service#${i}`, { names, what: `${path} = ${JSON.stringify(value)?.slice(0, 60)}` });
    }
    for (let i = 300; i < 500; i++) {
      const [path, value, names] = SLICE_MUTATIONS[Math.floor(r() * SLICE_MUTATIONS.length)]!;
      services.push(service(i));
      slices.push(mutate(slice(i), path, value));
      expected.set(`EndpointSlice#${i}`, { names, what: `${path} = ${JSON.stringify(value)?.slice(0, 60)}` });
    }
    let d!: ReturnType<typeof desiredState>;
    expect(() => (d = desiredState(services, slices, nodeView(NODE))), `seed ${SEED}`).not.toThrow();
    // Every valid Service: its ClusterIP, both NodePorts, LB IP and externalIP, with its backend.
    const programmed = new Set(d.frontends.filter((f) => f.backends.length > 0).map((f) => f.service));
    for (let i = 0; i < 100; i++) for (const port of ['http', 'dns']) expect(programmed.has(`default/svc-${i}:${port}`), `svc-${i}:${port}`).toBe(true);
    // Services with a malformed slice keep the rest of their endpoints (none here): still programmed, without backends.
    for (let i = 300; i < 500; i++) expect(d.frontends.some((f) => f.service === `default/svc-${i}:http`), `svc-${i} frontends`).toBe(true);
    // Every malformed object is refused, and the error names what is wrong.
    for (let i = 100; i < 300; i++) {
      const rej = d.rejected.find((x) => x.kind === 'Service' && services.indexOf(services[i]!) === i && (x.name === String(services[i]!.metadata?.name ?? '') && x.namespace === String(services[i]!.metadata?.namespace ?? '')));
      const e = expected.get(`Service#${i}`)!;
      expect(rej, `Service #${i}: ${e.what} (seed ${SEED})`).toBeDefined();
      expect(rej!.error, `Service #${i}: ${e.what}`).toMatch(e.names);
      expect(rej!.error.length).toBeLessThan(300);
      expect(d.frontends.some((f) => f.service?.startsWith(`default/svc-${i}:`)), `Service #${i} programmed anyway`).toBe(false);
    }
    for (let i = 300; i < 500; i++) {
      const rej = d.rejected.find((x) => x.kind === 'EndpointSlice' && x.name === String(slices[i]!.metadata?.name ?? ''));
      const e = expected.get(`EndpointSlice#${i}`)!;
      expect(rej, `EndpointSlice #${i}: ${e.what} (seed ${SEED})`).toBeDefined();
      expect(rej!.error, `EndpointSlice #${i}: ${e.what}`).toMatch(e.names);
    }
  });

  it('200 malformed agent config files: each a FERRY_CONFIG error naming its key, none a crash', () => {
    const r = rng(SEED + 1);
    const dir = mkdtempSync(join(tmpdir(), 'ferry-badcfg-'));
    const KEYS: Array<[string, unknown[]]> = [
      ['syncPeriodSeconds', [0, -1, 'often', 1.5, 1e9, null, [30], { s: 1 }]],
      ['fullSyncPeriodSeconds', [1, 'hourly', -3600]],
      ['minSyncPeriodMs', [-1, 'soon', 60001]],
      ['devices', [5, [5], [''], ['a'.repeat(100)], { eth0: true }]],
      ['forwardingMode', ['fast', 1, ['dsr']]],
      ['snatIPv4', ['10.0.0', 'x', 12]],
      ['snatIPv6', ['fd00::1::2', '10.0.0.1', 6, ['fd00::1']]],
      ['hashSeed', [-1, 2 ** 33, 'seed']],
      ['mapSizes', ['big', 5, { services: 1 }, { services: 'many' }, { nope: 1024 }, { conntrack: 2 ** 30 }]],
      ['maglevTableSize', [4, 100, 'prime', -7]],
      ['snatPortMin', [80, 70000, 'low']],
      ['healthzBindAddress', [5, 'nowhere:port', ':99999']],
      ['logLevel', ['loud', 3]],
      ['nodePortAddresses', ['10.0.0.0/8', [5], ['x/y'], ['fe80::1%eth0']]],
      ['unknownKey', [1]],
    ];
    for (let n = 0; n < 200; n++) {
      const [key, values] = KEYS[Math.floor(r() * KEYS.length)]!;
      const value = values[Math.floor(r() * values.length)];
      const file = join(dir, `bad-${n}.yaml`);
      writeFileSync(file, stringify({ nodeName: 'node-1', [key]: value }));
      let err: unknown;
      try {
        loadConfig({ file, env: {} });
      } catch (e) {
        err = e;
      }
      expect(err, `${key}: ${JSON.stringify(value)} (seed ${SEED + 1})`).toBeInstanceOf(FerryError);
      expect((err as FerryError).code).toBe('FERRY_CONFIG');
      expect((err as FerryError).message, `${key}: ${JSON.stringify(value)}`).toContain(key === 'unknownKey' ? 'unknownKey' : key);
    }
    // And a file that is not YAML at all, or not a mapping.
    for (const text of ['{{{', '- a\n- b\n', '42']) {
      writeFileSync(join(dir, 'x.yaml'), text);
      expect(() => loadConfig({ file: join(dir, 'x.yaml'), env: {} })).toThrow(FerryError);
    }
  });
});
