// A new SNAT binding asks the host's sockets about a port only if the host may have bound
// it (host_ports): the post_bind hooks mark every bind in the host's namespace once the
// socket hooks are attached, the agent marks the sockets already open and the ephemeral
// range where it overlaps the SNAT range. Each node here has one SNAT port, so a flow is
// forwarded (the port taken) or dropped (the port the host's).
import { closeSync } from 'node:fs';
import { afterEach, expect, it } from 'vitest';
import { HostPortsSlot } from '../../src/datapath/layouts.js';
import { buildPacket, eth, ipv4, ipv6, tcp, udp } from '../../src/packet/build.js';
import { TcVerdict } from '../../src/sandbox/packet-fixture.js';
import { CLIENT_IP, NODE_IP, NODE_IP6, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import type { Proc } from '../../src/sandbox/netns/testbed.js';
import { listeningSocketInNetns } from '../../src/sys/socket.js';
import { describeWith } from '../harness/requirements.js';

const REMOTE_POD = '10.244.2.5';
const REMOTE_POD6 = 'fd00:244:2::5';
const CLIENT6 = 'fd00:10::2';
const PORT = 20000;
const open: Array<{ close(): Promise<void> | void }> = [];
afterEach(async () => {
  for (const x of open.splice(0).reverse()) await x.close();
});

/** A node whose only SNAT port is PORT, with a NodePort to a remote pod; hooks attached unless `hooks: false`. */
async function node(o: { hooks?: boolean; before?: (n: DatapathNode) => Promise<void> | void } = {}): Promise<DatapathNode> {
  const n = await datapathNode({ snatPortMin: PORT, snatPortMax: PORT });
  open.push(n);
  n.writer.apply([
    { address: NODE_IP, port: 30081, proto: 'TCP', kind: 'NodePort', backends: [{ address: REMOTE_POD, port: 8080, local: false }] },
    { address: NODE_IP6, port: 30081, proto: 'TCP', kind: 'NodePort', backends: [{ address: REMOTE_POD6, port: 8080, local: false }] },
    { address: NODE_IP6, port: 30081, proto: 'UDP', kind: 'NodePort', backends: [{ address: REMOTE_POD6, port: 5353, local: false }] },
  ]);
  await o.before?.(n);
  if (o.hooks !== false) n.dp.attachCgroup({ path: n.host.cgroup, expect: 'subtree' }, { hostNetns: n.host.netns });
  return n;
}

const syn6 = (n: DatapathNode, sport = 40001) => n.run('tc_ingress', buildPacket([eth(), ipv6({ src: CLIENT6, dst: NODE_IP6 }), tcp({ sport, dport: 30081, flags: 'S', seq: 100 })])).retval;
const datagram6 = (n: DatapathNode, sport = 40001) => n.run('tc_ingress', buildPacket([eth(), ipv6({ src: CLIENT6, dst: NODE_IP6 }), udp({ sport, dport: 30081 })])).retval;
const syn = (n: DatapathNode, sport = 40001) => n.run('tc_ingress', buildPacket([eth(), ipv4({ src: CLIENT_IP, dst: NODE_IP }), tcp({ sport, dport: 30081, flags: 'S', seq: 100 })])).retval;

/** A process of the node (its cgroup and namespace) bound to PORT until the test ends. */
async function hostProcessBinds(n: DatapathNode, script: string): Promise<void> {
  const p: Proc = n.host.spawn([process.execPath, '-e', script]);
  open.push({ close: () => p.stop() });
  for (let i = 0; i < 100 && !p.output().includes('bound'); i++) await new Promise((r) => setTimeout(r, 50));
  expect(p.output()).toContain('bound');
}

/** A socket the test process holds in the node's namespace: outside its cgroup, so no hook sees its bind. */
function unseenListener(n: DatapathNode): void {
  const fd = listeningSocketInNetns(n.host.netns, NODE_IP, PORT);
  open.push({ close: () => closeSync(fd) });
}

const setEphemeral = async (n: DatapathNode, range: string): Promise<void> => void (await n.host.execOk(['sysctl', '-qw', `net.ipv4.ip_local_port_range=${range}`]));

describeWith(['root', 'bpffs', 'netns', 'cgroup2'], 'host ports', () => {
  it('a port a host process binds (TCP, or IPv6 dual-stack) after the hooks are attached is never taken', async () => {
    const n = await node();
    expect(n.dp.hostPorts!.status()).toMatchObject({ trusted: true });
    expect(syn(n)).toBe(TcVerdict.REDIRECT); // free before
    n.flushState();
    await hostProcessBinds(n, `require('net').createServer().listen(${PORT}, '::', () => console.log('bound'))`);
    expect(syn(n, 40002)).toBe(TcVerdict.SHOT);
    expect(n.dp.maps.nat4.entries()).toEqual([]);
  });

  it('IPv6: a port a host process holds is never taken for an IPv6 SNAT flow (TCP and UDP), an unmarked one is taken without asking', async () => {
    const n = await node();
    unseenListener(n); // IPv4 only: its port stays free for IPv6 flows, unmarked or asked
    expect(syn6(n)).toBe(TcVerdict.REDIRECT);
    expect(n.dp.maps.nat6.entries().map(([k]) => k.dport)).toEqual([PORT]);
    n.flushState();
    await hostProcessBinds(n, `const s = require('dgram').createSocket({ type: 'udp6', ipv6Only: true }); s.bind(${PORT}, '::', () => require('net').createServer().listen({ port: ${PORT}, host: '::', ipv6Only: true }, () => console.log('bound')))`);
    expect(syn6(n, 40002)).toBe(TcVerdict.SHOT); // the listener's
    expect(datagram6(n, 40003)).toBe(TcVerdict.SHOT); // the UDP socket's
    expect(n.dp.maps.nat6.entries()).toEqual([]);
    n.dp.maps.host_ports.update(HostPortsSlot.HOST_PORTS_TRUSTED, 0n);
    expect(syn6(n, 40004)).toBe(TcVerdict.SHOT); // asked about every port: still the host's
  });

  it('a UDP bind is marked by the hook', async () => {
    const n = await node();
    const before = n.dp.hostPorts!.status().marked;
    await hostProcessBinds(n, `require('dgram').createSocket('udp4').bind(${PORT}, '${NODE_IP}', () => console.log('bound'))`);
    expect(n.dp.hostPorts!.status().marked).toBe(before + 1);
    expect((n.dp.maps.host_ports.lookup(PORT >> 6)! >> BigInt(PORT & 63)) & 1n).toBe(1n); // the hooks' bitmap
  });

  it('an unmarked port is taken without asking the host; an untrusted map asks about every port', async () => {
    const n = await node();
    unseenListener(n); // what no real host has: a bind the hooks did not see
    expect(syn(n)).toBe(TcVerdict.REDIRECT);
    expect(n.dp.maps.nat4.entries().map(([k]) => k.dport)).toEqual([PORT]);
    n.flushState();
    n.dp.maps.host_ports.update(HostPortsSlot.HOST_PORTS_TRUSTED, 0n);
    expect(syn(n)).toBe(TcVerdict.SHOT); // the host's sockets asked: the listener holds it
  });

  it('without the socket hooks every port is asked about', async () => {
    const n = await node({ hooks: false });
    unseenListener(n);
    expect(syn(n)).toBe(TcVerdict.SHOT);
  });

  it('sockets open before the hooks are attached are marked when they are', async () => {
    const n = await node({ before: (x) => unseenListener(x) });
    expect(n.dp.hostPorts!.status().marked).toBeGreaterThanOrEqual(1);
    expect(syn(n)).toBe(TcVerdict.SHOT);
  });

  it('the ephemeral range where it overlaps the SNAT range is marked, at start and when it moves there later', async () => {
    const a = await node({ before: (x) => setEphemeral(x, `${PORT - 10} ${PORT + 10}`) });
    expect(a.dp.hostPorts!.status()).toMatchObject({ marked: 1, ephemeral: { min: PORT - 10, max: PORT + 10 } });
    unseenListener(a); // stands for a socket that got the port from connect() or listen() without a bind
    expect(syn(a)).toBe(TcVerdict.SHOT);

    const b = await node();
    expect(b.dp.hostPorts!.status().marked).toBe(0);
    await setEphemeral(b, `${PORT} ${PORT + 100}`);
    b.dp.hostPorts!.recheck();
    expect(b.dp.hostPorts!.status().marked).toBe(1);
  });
});
