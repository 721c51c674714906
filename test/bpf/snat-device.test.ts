// The address SNAT flows leave from follows the device their route leaves by, as
// kube-proxy's MASQUERADE takes the outgoing device's: node-1's eth1 stands for an overlay's
// tunnel device (its own address, 10.0.40.1, is not the node's), named among the devices.
// The backend host reaches the node's network by another device ("the underlay") and
// filters by strict rp_filter: a flow from the node's address arriving on its eth0 is
// dropped there, as a flannel node drops a node address arriving on its tunnel. From
// eth1's own address, its replies come back through eth1 and are restored there.
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { describeWith } from '../harness/requirements.js';
import { CLIENT_IP, NODE_IP, REMOTE_POD_CIDR, clientBehindRouter, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { REMOTE_POD, TC_SERVICES, fixture } from '../../src/sandbox/fixtures/tc.js';
import { TcVerdict } from '../../src/sandbox/packet-fixture.js';
import { buildPacket, eth, ipv4, tcp } from '../../src/packet/build.js';
import { testRun } from '../../src/ebpf/test-run.js';
import { skbContext } from '../../src/ebpf/skb-context.js';
import { ifindexOf } from '../../src/ebpf/link-tc.js';
import { hopEpochParts } from '../../src/datapath/hop-epoch.js';
import type { DeviceAddresses } from '../../src/datapath/snat-devices.js';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import { startWorkloads } from '../../src/sandbox/workloads/spawn.js';
import { readLinks } from '../../src/sys/links.js';
import { inNetns } from '../../src/sys/netns.js';

const TUNNEL_IP = '10.0.40.1';
const BACKEND_HOP = '10.0.40.2';


describeWith(['root', 'bpffs', 'netns'], 'the SNAT address of the device a flow leaves by', () => {
  let node: DatapathNode;
  let backend: Host;
  let clientHost: Host;
  let eth1: number;
  let eth1Mac: string;
  let backendMac: string;
  const inNode = <T>(f: () => T): T => inNetns(node.host.netns, f);
  /** The node's links as read now, or with eth1's address hidden (a device without one lends none). */
  const links = (withTunnelAddress: boolean): DeviceAddresses[] =>
    inNode(() => readLinks()).map((l) => (l.name === 'eth1' && !withTunnelAddress ? { ...l, addresses: [] } : l));
  const macOf = async (h: Host, dev: string): Promise<string> => (JSON.parse(await h.execOk(['ip', '-j', 'link', 'show', dev])) as Array<{ address: string }>)[0]!.address;
  const onEth1 = (data: Buffer) => inNode(() => testRun(node.program('tc_ingress'), { data, ctx: skbContext({ ifindex: eth1 }) }));
  const source = (out: Buffer): string => [...out.subarray(26, 30)].join('.');

  beforeAll(async () => {
    node = await datapathNode();
    node.writer.apply(TC_SERVICES);
    backend = await node.tb.addHost('backend');
    const underlay = await node.tb.addHost('underlay');
    await node.tb.link({ host: node.host, ifname: 'eth1', address: `${TUNNEL_IP}/24` }, { host: backend, ifname: 'eth0', address: `${BACKEND_HOP}/24` });
    await node.tb.link({ host: backend, ifname: 'eth1', address: '10.0.50.2/24' }, { host: underlay, ifname: 'eth0', address: '10.0.50.1/24' });
    backendMac = await macOf(backend, 'eth0');
    eth1Mac = await macOf(node.host, 'eth1');
    await node.host.ip('neigh', 'replace', BACKEND_HOP, 'lladdr', backendMac, 'dev', 'eth1', 'nud', 'permanent');
    await node.host.ip('route', 'replace', REMOTE_POD_CIDR, 'via', BACKEND_HOP, 'dev', 'eth1');
    await backend.ip('addr', 'add', `${REMOTE_POD}/32`, 'dev', 'lo');
    await backend.ip('route', 'replace', '10.0.30.0/24', 'via', '10.0.50.1', 'dev', 'eth1');
    await backend.ip('route', 'replace', '10.0.10.0/24', 'via', '10.0.50.1', 'dev', 'eth1');
    for (const k of ['all', 'eth0']) await backend.execOk(['sysctl', '-qw', `net.ipv4.conf.${k}.rp_filter=1`]);
    clientHost = await clientBehindRouter(node);
    eth1 = inNode(() => ifindexOf('eth1'));
    inNode(() => (node.dp.attachDevice('eth0'), node.dp.attachDevice('eth1')));
  });
  afterAll(async () => {
    await node?.close();
  });
  beforeEach(() => node.flushState());

  it('lists the attached devices with an address other than the node\'s, and flags the programs while any is listed', () => {
    expect(inNode(() => node.dp.refreshSnatDevices(links(true)))).toBe(true);
    expect(node.dp.snatDeviceList()).toEqual([{ name: 'eth1', ifindex: eth1, address: TUNNEL_IP }]);
    expect([...node.dp.maps.snat4_devices.entries()]).toEqual([[eth1, TUNNEL_IP]]);
    expect(hopEpochParts(node.dp.maps.ferry_hop_epoch.lookup(0)!.sinceNs).snatByDevice).toBe(true);
    expect(inNode(() => node.dp.refreshSnatDevices(links(true))), 'nothing changed').toBe(false);
    expect(inNode(() => node.dp.refreshSnatDevices(links(false)))).toBe(true);
    expect([...node.dp.maps.snat4_devices.keys()]).toEqual([]);
    expect(hopEpochParts(node.dp.maps.ferry_hop_epoch.lookup(0)!.sinceNs).snatByDevice).toBe(false);
  });

  it('a new flow routed out of a listed device leaves from its address; the reply arriving there is restored, arriving elsewhere it is no reply', () => {
    inNode(() => node.dp.refreshSnatDevices(links(true)));
    const r = node.run('tc_ingress', fixture('nodeport-remote').input);
    expect(r.retval).toBe(TcVerdict.REDIRECT);
    expect(source(r.data), 'SNAT source').toBe(TUNNEL_IP);
    const natPort = r.data.readUInt16BE(34);
    const reply = buildPacket([eth({ src: backendMac, dst: eth1Mac }), ipv4({ src: REMOTE_POD, dst: TUNNEL_IP, ttl: 64, id: 7 }), tcp({ sport: 8080, dport: natPort, flags: 'SA', seq: 5000, ack: 1001 })]);
    expect(node.run('tc_ingress', reply).retval, 'on eth0: not a reply').not.toBe(TcVerdict.REDIRECT);
    expect(node.counter('STAT_REPLY_REMOTE')).toBe(0n);
    const back = onEth1(reply);
    expect(back.retval).toBe(TcVerdict.REDIRECT);
    expect(source(back.data), 'from the frontend').toBe(NODE_IP);
    expect([...back.data.subarray(30, 34)].join('.'), 'to the client').toBe(CLIENT_IP);
    expect(node.counter('STAT_REPLY_REMOTE')).toBe(1n);
  });

  it('with no device listed, a new flow leaves from the node\'s address as before', () => {
    inNode(() => node.dp.refreshSnatDevices(links(false)));
    const r = node.run('tc_ingress', fixture('nodeport-remote').input);
    expect(r.retval).toBe(TcVerdict.REDIRECT);
    expect(source(r.data)).toBe(NODE_IP);
  });

  it('live: from the node\'s address the backend host\'s strict rp_filter drops the flow; from the device\'s, it is served', async () => {
    const [srv] = await startWorkloads(backend, [{ kind: 'whoami', port: 8080, name: 'backend' }]);
    /** What the backend saw as the client's address (whoami's RemoteAddr), or curl's timeout (exit 28). */
    const ask = () => clientHost.exec(['curl', '-sS', '--max-time', '3', '--interface', CLIENT_IP, `http://${NODE_IP}:30081/`], { timeoutMs: 10_000 });
    inNode(() => node.dp.refreshSnatDevices(links(false)));
    expect((await ask()).code, 'from the node\'s address: a timeout').toBe(28);
    node.flushState();
    inNode(() => node.dp.refreshSnatDevices(links(true)));
    const served = await ask();
    expect(served.stdout, `from eth1's address (curl exit ${served.code}: ${served.stderr})`).toContain(`RemoteAddr: ${TUNNEL_IP}:`);
    await srv!.stop();
  });
});
