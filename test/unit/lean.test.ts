// What the agent's caches keep of an EndpointSlice: the fields ferry reads, conditions
// shared by shape, and the same frontends out of the model as from the full object.
import { describe, expect, it } from 'vitest';
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { leanSlice } from '../../src/k8s/lean.js';
import { serviceFrontends } from '../../src/model/service.js';
import { validateEndpointSlice } from '../../src/model/validate.js';

const slice = (endpoints: object[]): V1EndpointSlice => JSON.parse(JSON.stringify({
  metadata: { name: 'web-x', namespace: 'default', labels: { 'kubernetes.io/service-name': 'web' } },
  addressType: 'IPv4',
  ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
  endpoints,
}));

describe('lean EndpointSlices', () => {
  it('shares one frozen conditions object per shape, across slices', () => {
    const a = leanSlice(slice([{ addresses: ['10.244.1.5'], conditions: { ready: true } }, { addresses: ['10.244.1.6'], conditions: { ready: true } }]));
    const b = leanSlice(slice([{ addresses: ['10.244.2.5'], conditions: { ready: true } }, { addresses: ['10.244.2.6'], conditions: { ready: false, serving: true, terminating: true } }]));
    const [c1, c2, c3, c4] = [...a.endpoints, ...b.endpoints].map((e) => e.conditions);
    expect(c1).toBe(c2);
    expect(c1).toBe(c3);
    expect(Object.isFrozen(c1)).toBe(true);
    expect(c1).toEqual({ ready: true });
    expect(c4).toEqual({ ready: false, serving: true, terminating: true });
    expect(c4).not.toBe(c1);
  });

  it('keeps conditions it cannot share as they came: other fields, values that are not booleans', () => {
    const odd = slice([{ addresses: ['10.244.1.5'], conditions: { ready: 'yes' } }, { addresses: ['10.244.1.6'], conditions: { ready: true, extra: 1 } }, { addresses: ['10.244.1.7'], conditions: [] }]);
    const lean = leanSlice(odd);
    for (let i = 0; i < 3; i++) expect(lean.endpoints[i]!.conditions).toBe(odd.endpoints[i]!.conditions);
    // Still refused as the API server would not have let it through.
    expect(validateEndpointSlice(lean)).toMatchObject({ ok: false, error: expect.stringMatching(/endpoints\[2\]\.conditions .* is not an object/) });
  });

  it('keeps zone and hints only when there are any, and the model reads the same frontends', () => {
    const full = slice([
      { addresses: ['10.244.1.5'], nodeName: 'node-1', conditions: { ready: true }, targetRef: { kind: 'Pod', name: 'p' } },
      { addresses: ['10.244.2.5'], nodeName: 'node-2', zone: 'b', hints: { forZones: [{ name: 'b' }] }, conditions: { ready: false, serving: true, terminating: true } },
      { addresses: ['10.244.3.5'], nodeName: 'node-3' },
    ]);
    const lean = leanSlice(full);
    expect(Object.keys(lean.endpoints[0]!)).toEqual(['addresses', 'conditions', 'nodeName']);
    expect(lean.endpoints[1]).toMatchObject({ zone: 'b', hints: { forZones: [{ name: 'b' }] } });
    const svc = { metadata: { name: 'web', namespace: 'default' }, spec: { clusterIP: '10.96.0.10', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] } };
    const node = { name: 'node-1', zone: 'a', addresses: ['10.0.30.21'] };
    expect(serviceFrontends(svc, [lean], node)).toEqual(serviceFrontends(svc, [full], node));
  });
});
