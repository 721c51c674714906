// The sandbox's node routes, which `ferry sandbox link up` restores after a macvlan member's
// link took them along: the other nodes' pods across the switch, or through the tunnel.
import { describe, expect, it } from 'vitest';
import { nodeRouteArgs } from '../../src/sandbox/network.js';

const nodes = [{ ip: '10.0.30.21', podCidr: '10.244.1.0/24' }, { ip: '10.0.30.22', podCidr: '10.244.2.0/24' }, { ip: '10.0.30.23', podCidr: '10.244.3.0/24' }];

describe('sandbox node routes', () => {
  it('routed: another node\'s pods via that node\'s address', () => {
    expect(nodeRouteArgs(nodes[0]!, nodes)).toEqual([
      ['route', 'replace', 'default', 'via', '10.0.30.1'],
      ['route', 'replace', '10.244.2.0/24', 'via', '10.0.30.22'],
      ['route', 'replace', '10.244.3.0/24', 'via', '10.0.30.23'],
    ]);
  });

  it('vxlan: another node\'s pods via its tunnel address, onlink through flannel.1 (Flannel\'s routes)', () => {
    expect(nodeRouteArgs(nodes[1]!, nodes, 'vxlan')).toEqual([
      ['route', 'replace', 'default', 'via', '10.0.30.1'],
      ['route', 'replace', '10.244.1.0/24', 'via', '10.244.1.0', 'dev', 'flannel.1', 'onlink'],
      ['route', 'replace', '10.244.3.0/24', 'via', '10.244.3.0', 'dev', 'flannel.1', 'onlink'],
    ]);
  });
});
