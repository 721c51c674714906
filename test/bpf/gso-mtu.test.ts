// A GSO packet (a sender's TSO segments carried whole over a veth, as GRO hands a NIC's
// merged segments to tc) whose segments are too big for the device its route leaves by:
// the kernel's forwarding answers fragmentation-needed, and so must tc, or the segments are
// lost at the narrow hop and the sender hears of its MTU only when it retransmits one
// segment alone, a timeout later. Here a real TCP transfer goes client -> node-1's
// NodePort (eth0) -> a remote backend through eth1, a hop of MTU 1400 that carries only
// what fits (GSO off, so segments are cut before they leave, as a NIC's wire carries
// them; the veth then drops those larger than its peer's MTU). The backend offers
// MSS 1460 (advmss), as one whose own network is wider than the hop between would; the
// client, 1500 bytes wide, sends 1500-byte segments until told the path's MTU.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeWith } from '../harness/requirements.js';
import { CLIENT_IP, NODE_IP, REMOTE_POD_CIDR, ROUTER_IP, ROUTER_MAC, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { REMOTE_POD, TC_SERVICES } from '../../src/sandbox/fixtures/tc.js';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import { inNetns } from '../../src/sys/netns.js';

const BACKEND_HOP = '10.0.40.2';
const HOP_MTU = 1400;
const BYTES = 4 << 20;

const server = `require('net').createServer((s) => { let n = 0; s.on('data', (d) => (n += d.length)); s.on('end', () => s.end(String(n))); }).listen(8080, '${REMOTE_POD}', () => console.log('listening'))`;
const client = `const s = require('net').connect({ host: '${NODE_IP}', port: 30081, localAddress: '${CLIENT_IP}' }, () => s.end(Buffer.alloc(${BYTES}, 97)));
let got = ''; s.on('data', (d) => (got += d)); s.on('end', () => console.log('received ' + got)); s.on('error', (e) => console.log('error ' + e.message));`;

/** What a host's eth0 dropped as it arrived: a veth drops a frame larger than its MTU. */
const rxDropped = async (h: Host): Promise<number> =>
  (JSON.parse(await h.execOk(['ip', '-j', '-s', 'link', 'show', 'eth0'])) as Array<{ stats64: { rx: { dropped: number } } }>)[0]!.stats64.rx.dropped;

describeWith(['root', 'bpffs', 'netns'], 'a GSO packet too big for the device its route leaves by', () => {
  let node: DatapathNode;
  let backend: Host;
  let clientHost: Host;

  beforeAll(async () => {
    node = await datapathNode();
    node.writer.apply(TC_SERVICES);
    backend = await node.tb.addHost('backend');
    await node.tb.link({ host: node.host, ifname: 'eth1', address: '10.0.40.1/24' }, { host: backend, ifname: 'eth0', address: `${BACKEND_HOP}/24` });
    await node.host.ip('route', 'replace', REMOTE_POD_CIDR, 'via', BACKEND_HOP, 'dev', 'eth1');
    await node.host.ip('link', 'set', 'eth1', 'mtu', String(HOP_MTU));
    await node.host.execOk(['ethtool', '-K', 'eth1', 'tso', 'off', 'gso', 'off']);
    await backend.ip('link', 'set', 'eth0', 'mtu', String(HOP_MTU));
    await backend.ip('addr', 'add', `${REMOTE_POD}/32`, 'dev', 'lo');
    await backend.ip('route', 'replace', 'default', 'via', '10.0.40.1', 'advmss', '1460');
    // The node's eth0 peer plays the router (the node's neighbour entry names its MAC) and
    // the client behind it.
    clientHost = node.tb.host('peer');
    await clientHost.ip('link', 'set', 'eth0', 'address', ROUTER_MAC);
    await clientHost.ip('addr', 'add', `${ROUTER_IP}/24`, 'dev', 'eth0');
    await clientHost.ip('addr', 'add', `${CLIENT_IP}/32`, 'dev', 'lo');
    inNetns(node.host.netns, () => (node.dp.attachDevice('eth0'), node.dp.attachDevice('eth1')));
  });
  afterAll(async () => {
    await node?.close();
  });

  it('a transfer whose segments do not fit: fragmentation needed with the hop MTU, and the client, told, gets every byte through', async () => {
    node.flushState();
    const lostBefore = await rxDropped(backend);
    const srv = backend.spawn([process.execPath, '-e', server]);
    for (let i = 0; i < 100 && !srv.output().includes('listening'); i++) await new Promise((r) => setTimeout(r, 50));
    expect(srv.output()).toContain('listening');
    const r = await clientHost.exec([process.execPath, '-e', client], { timeoutMs: 20_000 });
    expect(r.stdout.trim(), `the client's view (stderr: ${r.stderr})`).toBe(`received ${BYTES}`);
    expect(node.counter('STAT_ICMP_FRAG_NEEDED'), 'fragmentation-needed sent').toBeGreaterThan(0n);
    // Without the check the first GSO packet's segments are lost at the hop, and the client
    // hears of the MTU only when it retransmits one segment alone, a timeout later.
    expect((await rxDropped(backend)) - lostBefore, 'segments lost at the narrow hop').toBe(0);
    const route = await clientHost.ip('route', 'get', NODE_IP, 'from', CLIENT_IP);
    expect(route, 'the client learnt the path MTU').toContain(`mtu ${HOP_MTU}`);
    await srv.stop();
  });
});
