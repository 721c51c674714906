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
import { rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLIENT_IP, NODE_IP, REMOTE_POD_CIDR, clientBehindRouter, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { REMOTE_POD, TC_SERVICES } from '../../src/sandbox/fixtures/tc.js';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import { startWorkloads } from '../../src/sandbox/workloads/spawn.js';
import { inNetns } from '../../src/sys/netns.js';

const BACKEND_HOP = '10.0.40.2';
const HOP_MTU = 1400;
const BYTES = 4 << 20;

/** The body the client sends (the whoami workload counts what it receives). */
const BODY = join(tmpdir(), `ferry-gso-mtu-${process.pid}.bin`);

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
    clientHost = await clientBehindRouter(node);
    writeFileSync(BODY, Buffer.alloc(BYTES, 0x61));
    inNetns(node.host.netns, () => (node.dp.attachDevice('eth0'), node.dp.attachDevice('eth1')));
  });
  afterAll(async () => {
    rmSync(BODY, { force: true });
    await node?.close();
  });

  it('a transfer whose segments do not fit: fragmentation needed with the hop MTU, and the client, told, gets every byte through', async () => {
    node.flushState();
    const lostBefore = await rxDropped(backend);
    const [srv] = await startWorkloads(backend, [{ kind: 'whoami', port: 8080, name: 'backend' }]);
    const r = await clientHost.exec(['curl', '-sS', '--max-time', '15', '--interface', CLIENT_IP, '--data-binary', `@${BODY}`, `http://${NODE_IP}:30081/`], { timeoutMs: 20_000 });
    expect(r.stdout, `the backend's count (curl exit ${r.code}: ${r.stderr})`).toContain(`Received: ${BYTES}\n`);
    expect(node.counter('STAT_ICMP_FRAG_NEEDED'), 'fragmentation-needed sent').toBeGreaterThan(0n);
    // Without the check the first GSO packet's segments are lost at the hop, and the client
    // hears of the MTU only when it retransmits one segment alone, a timeout later.
    expect((await rxDropped(backend)) - lostBefore, 'segments lost at the narrow hop').toBe(0);
    const route = await clientHost.ip('route', 'get', NODE_IP, 'from', CLIENT_IP);
    expect(route, 'the client learnt the path MTU').toContain(`mtu ${HOP_MTU}`);
    await srv!.stop();
  });
});
