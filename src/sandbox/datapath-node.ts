// One node of the datapath tests: a namespace with an external device, routes to the
// client network and to another node's pods (static neighbours, so FIB answers are fixed),
// the datapath loaded with its maps pinned in a per-run bpffs directory.
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { counterTotal, resetCounters } from '../datapath/counters.js';
import { clearConntrack } from '../datapath/ct-gc.js';
import { DEFAULT_MAP_SIZES, Datapath, XDP_PROGRAM, defaultObjectsDir, loadXdpObject, type DatapathConfig } from '../datapath/loader.js';
import type { BpfObject } from '../ebpf/object.js';
import { TcVerdict, XdpVerdict, type FixtureTarget, type TcProgram } from './packet-fixture.js';
import { ServiceWriter } from '../datapath/writer.js';
import { NodeAddressWriter } from '../datapath/node-addresses.js';
import { ifindexOf } from '../ebpf/link-tc.js';
import type { Program } from '../ebpf/object.js';
import { testRun, type TestRunResult } from '../ebpf/test-run.js';
import { Testbed, type Host } from './netns/testbed.js';
import { inNetns } from '../sys/netns.js';
import { netnsCookie } from '../sys/socket.js';
import { skbContext, xdpContext } from '../ebpf/skb-context.js';

export const NODE_IP = '10.0.30.21';
export const OTHER_NODE_IP = '10.0.30.22';
export const ROUTER_IP = '10.0.30.1';
export const ROUTER_MAC = '02:00:00:00:30:01';
export const OTHER_NODE_MAC = '02:00:00:00:30:22';
/** The packet builder's default destination MAC, so that a frame built with eth() is addressed to this node. */
export const NODE_MAC = '02:00:00:00:00:02';
export const CLIENT_IP = '10.0.10.2';
/** The node's IPv6 address on the same link, and its neighbours' (IPv6 fixtures, lib/snat6.h). */
export const NODE_IP6 = 'fd00:30::21';
export const ROUTER_IP6 = 'fd00:30::1';
export const OTHER_NODE_IP6 = 'fd00:30::22';
export const REMOTE_POD_CIDR6 = 'fd00:244:2::/64';
/** The node's flow-hash seed (fixtures that name a hashed choice compute it with this). */
export const NODE_HASH_SEED = 0x5eed;
export const LOCAL_POD_CIDR = '10.244.1.0/24';
export const REMOTE_POD_CIDR = '10.244.2.0/24';

export interface DatapathNode extends FixtureTarget {
  tb: Testbed;
  host: Host;
  dp: Datapath;
  writer: ServiceWriter;
  /** The cluster's node addresses (this node's and the other's by default). */
  nodes: NodeAddressWriter;
  ifindex: number;
  pinDir: string;
  /**
   * A packet through the node's hooks: with XDP (cfg.acceleration), tc_ingress packets go
   * through xdp_ingress first and reach tc only if it passes them, as on a device; the
   * verdict is then tc's, or XDP's in tc's terms (TX: REDIRECT, DROP: SHOT).
   */
  run(prog: TcProgram, data: Buffer, repeat?: number): TestRunResult;
  /** With XDP: the verdict xdp_ingress gave the last tc_ingress packet (XdpVerdict). */
  lastXdpVerdict(): number | undefined;
  program(name: string): Program;
  /** Empty conntrack and NAT, and zero the counters. */
  flushState(): void;
  close(): Promise<void>;
}

/**
 * `prepare` runs before the datapath loads, with the pin directory and the node's
 * namespace: to leave there what an earlier agent would have (an upgrade test).
 */
export async function datapathNode(cfg: Partial<DatapathConfig> = {}, prepare?: (pinDir: string, host: Host) => Promise<void>): Promise<DatapathNode> {
  const tb = await Testbed.create();
  let dp: Datapath | undefined;
  let xdp: BpfObject | undefined;
  const pinDir = join('/sys/fs/bpf', `${tb.prefix}-node`);
  try {
    const host = await tb.addHost('node');
    const peer = await tb.addHost('peer');
    await tb.link({ host, ifname: 'eth0', address: `${NODE_IP}/24` }, { host: peer, ifname: 'eth0' });
    await host.ip('link', 'set', 'eth0', 'address', NODE_MAC);
    await host.ip('neigh', 'replace', ROUTER_IP, 'lladdr', ROUTER_MAC, 'dev', 'eth0', 'nud', 'permanent');
    await host.ip('neigh', 'replace', OTHER_NODE_IP, 'lladdr', OTHER_NODE_MAC, 'dev', 'eth0', 'nud', 'permanent');
    await tb.route(host, '10.0.10.0/24', ROUTER_IP);
    await tb.route(host, '10.0.100.0/24', ROUTER_IP);
    await tb.route(host, REMOTE_POD_CIDR, OTHER_NODE_IP);
    await host.execOk(['sysctl', '-qw', 'net.ipv4.ip_forward=1']);
    await host.execOk(['sysctl', '-qw', 'net.ipv6.conf.all.forwarding=1']);
    await host.ip('-6', 'addr', 'add', `${NODE_IP6}/64`, 'dev', 'eth0', 'nodad');
    await host.ip('-6', 'neigh', 'replace', ROUTER_IP6, 'lladdr', ROUTER_MAC, 'dev', 'eth0', 'nud', 'permanent');
    await host.ip('-6', 'neigh', 'replace', OTHER_NODE_IP6, 'lladdr', OTHER_NODE_MAC, 'dev', 'eth0', 'nud', 'permanent');
    await host.ip('-6', 'route', 'replace', 'fd00:10::/64', 'via', ROUTER_IP6);
    await host.ip('-6', 'route', 'replace', REMOTE_POD_CIDR6, 'via', OTHER_NODE_IP6);
    mkdirSync(pinDir);
    await prepare?.(pinDir, host);
    dp = Datapath.load({ objectsDir: defaultObjectsDir(), pinDir, snatIPv4: NODE_IP, snatIPv6: NODE_IP6, hashSeed: NODE_HASH_SEED, hostNetnsCookie: netnsCookie(host.netns), ...cfg });
    const d = dp;
    const writer = new ServiceWriter(d.maps, { maglevTableSize: d.maglevTableSize });
    const nodes = new NodeAddressWriter(d.maps.node4_addrs);
    nodes.apply([NODE_IP, OTHER_NODE_IP]);
    const ifindex = inNetns(host.netns, () => ifindexOf('eth0'));
    const ctx = skbContext({ ifindex });
    if (cfg.acceleration && cfg.acceleration !== 'none') xdp = loadXdpObject({ ...d.config, acceleration: cfg.acceleration }, { ...DEFAULT_MAP_SIZES, ...cfg.mapSizes }, NODE_MAC);
    const x = xdp;
    let lastXdp: number | undefined;
    const runTc = (prog: TcProgram, data: Buffer, repeat?: number) => inNetns(host.netns, () => testRun(d.tc.program(prog), { data, ctx, repeat }));
    const run = (prog: TcProgram, data: Buffer, repeat?: number): TestRunResult => {
      if (!x || prog !== 'tc_ingress') return runTc(prog, data, repeat);
      const r = inNetns(host.netns, () => testRun(x.program(XDP_PROGRAM), { data, ctx: xdpContext(ifindex, data.length), repeat }));
      lastXdp = r.retval;
      if (r.retval === XdpVerdict.PASS) return runTc(prog, r.data, repeat);
      const asTc = r.retval === XdpVerdict.TX || r.retval === XdpVerdict.REDIRECT ? TcVerdict.REDIRECT : r.retval === XdpVerdict.DROP ? TcVerdict.SHOT : -100 - r.retval;
      return { ...r, retval: asTc };
    };
    return {
      tb, host, dp: d, writer, nodes, ifindex, pinDir,
      program: (name) => (name === XDP_PROGRAM && x ? x.program(name) : d.tc.program(name)),
      run,
      lastXdpVerdict: () => lastXdp,
      counter: (name) => counterTotal(d.maps, name).packets,
      flushState: () => {
        clearConntrack(d.maps);
        resetCounters(d.maps);
      },
      close: async () => {
        x?.close();
        d.close();
        rmSync(pinDir, { recursive: true, force: true });
        await tb.destroy();
      },
    };
  } catch (e) {
    xdp?.close();
    dp?.close();
    rmSync(pinDir, { recursive: true, force: true });
    await tb.destroy();
    throw e;
  }
}

/**
 * The node's eth0 peer made the router the node's neighbour entry names (ROUTER_MAC,
 * ROUTER_IP), with CLIENT_IP behind it on its loopback: a real client for live traffic
 * through the node (its sockets bind CLIENT_IP). Returns that host.
 */
export async function clientBehindRouter(node: DatapathNode): Promise<Host> {
  const peer = node.tb.host('peer');
  await peer.ip('link', 'set', 'eth0', 'address', ROUTER_MAC);
  await peer.ip('addr', 'add', `${ROUTER_IP}/24`, 'dev', 'eth0');
  await peer.ip('addr', 'add', `${CLIENT_IP}/32`, 'dev', 'lo');
  return peer;
}

/** Sum a per-CPU counter. */
export function total(dp: Datapath, map: 'ferry_stats' | 'ferry_drops', index: number): bigint {
  return (dp.maps[map].lookupPerCpu(index) ?? []).reduce((a, v) => a + v.packets, 0n);
}
