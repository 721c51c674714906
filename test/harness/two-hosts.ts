// The smallest testbed: a client and a server, their eth0s linked by a veth pair, made
// afresh for each test of the file that asks for it and destroyed after it.
import { afterEach, beforeEach } from 'vitest';
import { Testbed, type Host } from '../../src/sandbox/netns/testbed.js';

export interface TwoHosts {
  tb: Testbed;
  /** 10.0.10.2 */
  client: Host;
  /** 10.0.10.1 */
  server: Host;
}

/** The hosts of the current test (read them inside a test, not at load). */
export function twoHostsPerTest(): TwoHosts {
  const hosts = {} as TwoHosts;
  beforeEach(async () => {
    const tb = await Testbed.create();
    const client = await tb.addHost('client');
    const server = await tb.addHost('server');
    await tb.link({ host: client, ifname: 'eth0', address: '10.0.10.2/24' }, { host: server, ifname: 'eth0', address: '10.0.10.1/24' });
    Object.assign(hosts, { tb, client, server });
  });
  afterEach(async () => {
    await hosts.tb.destroy();
  });
  return hosts;
}
