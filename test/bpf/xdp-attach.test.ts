// Where the agent attaches XDP, by the acceleration setting: native on a driver that has it
// (veth), an error under `native` on one that has not (macvlan, or a bridge on a kernel
// without macvlan), nothing there under `best-effort` unless the agent allows generic XDP
// (a device named in xdpDevices); `none`, or the agent leaving a device to tc (a tunnel), takes off an XDP
// program an earlier agent left; uninstall too.
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { Datapath, defaultObjectsDir, type Acceleration } from '../../src/datapath/loader.js';
import { uninstall } from '../../src/datapath/uninstall.js';
import { NO_DRIVER_XDP } from '../../src/datapath/xdp-devices.js';
import { programNameById, xdpAttached } from '../../src/ebpf/link-xdp.js';
import { ErrorCode, FerryError } from '../../src/errors.js';
import { Testbed, type Host } from '../../src/sandbox/netns/testbed.js';
import { inNetns } from '../../src/sys/netns.js';
import { describeWith } from '../harness/requirements.js';

let tb: Testbed;
let host: Host;
let pinDir: string;
const open: Datapath[] = [];

beforeEach(async () => {
  tb = await Testbed.create();
  host = await tb.addHost('node');
  const peer = await tb.addHost('peer');
  await tb.link({ host, ifname: 'eth0', address: '10.0.30.21/24' }, { host: peer, ifname: 'eth0' });
  // An Ethernet device whose driver has no native XDP: whichever this kernel has.
  const made = await host.exec(['ip', 'link', 'add', 'nonative0', 'link', 'eth0', 'type', 'macvlan', 'mode', 'bridge']);
  if (made.code !== 0) await host.ip('link', 'add', 'nonative0', 'type', 'bridge');
  await host.ip('link', 'set', 'nonative0', 'up');
  pinDir = join('/sys/fs/bpf', `${tb.prefix}-xdp`);
  mkdirSync(pinDir);
});
afterEach(async () => {
  for (const d of open.splice(0)) inNetns(host.netns, () => d.close());
  if (pinDir) rmSync(pinDir, { recursive: true, force: true });
  await tb?.destroy();
});

const load = (acceleration: Acceleration) => {
  const d = Datapath.load({ objectsDir: defaultObjectsDir(), pinDir, snatIPv4: '10.0.30.21', acceleration });
  open.push(d);
  return d;
};
const attached = (dev: string) => inNetns(host.netns, () => {
  const x = xdpAttached(dev);
  return x && { mode: x.mode, program: programNameById(x.id) };
});

/** The agent exits: its datapath stays in place, this process lets it go. */
const exitAgent = (d: Datapath): void => {
  inNetns(host.netns, () => d.release());
  open.splice(open.indexOf(d), 1);
};
/** A VXLAN tunnel over eth0, and a datapath (best-effort) with XDP on both: native on eth0, generic on the tunnel. */
const xdpOnNicAndTunnel = async (): Promise<Datapath> => {
  await host.ip('link', 'add', 'tun0', 'type', 'vxlan', 'id', '7', 'dstport', '4789', 'local', '10.0.30.21', 'dev', 'eth0');
  await host.ip('link', 'set', 'tun0', 'up');
  const d = load('best-effort');
  inNetns(host.netns, () => {
    d.attachDevice('eth0');
    d.attachDevice('tun0', { genericFallback: true });
  });
  return d;
};

describeWith(['root', 'bpffs', 'netns'], 'XDP attachment by acceleration', () => {
  it('native: veth runs it in its driver; a device without native XDP is an error, and leaves nothing behind', () => {
    const d = load('native');
    inNetns(host.netns, () => d.attachDevice('eth0'));
    expect(d.xdpModes()).toEqual({ eth0: 'native' });
    expect(attached('eth0')).toEqual({ mode: 'native', program: 'xdp_ingress' });
    let err: unknown;
    try {
      inNetns(host.netns, () => d.attachDevice('nonative0'));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(FerryError);
    expect((err as FerryError).code).toBe(ErrorCode.XdpUnsupported);
    expect((err as FerryError).message).toMatch(/has no native XDP.*best-effort/);
    expect(d.attachedDevices()).toEqual(['eth0']);
    expect(attached('nonative0')).toBeUndefined();
    const kind = d.tcMode === 'tcx' ? 'tcx' : 'tc';
    expect(uninstall({ pinDir, netns: host.netns }).tcFilters.sort()).toEqual([`${kind} egress eth0`, `${kind} ingress eth0`]);
  });

  it('best-effort: native where the driver can; elsewhere nothing (as Cilium), or generic XDP where the agent allows it', () => {
    const d = load('best-effort');
    inNetns(host.netns, () => {
      d.attachDevice('eth0');
      d.attachDevice('nonative0');
    });
    expect(d.xdpModes()).toEqual({ eth0: 'native', nonative0: 'off' });
    expect(d.xdpDevices().nonative0).toEqual({ mode: 'off', redirectTarget: false, reason: NO_DRIVER_XDP });
    expect(attached('nonative0')).toBeUndefined();
    exitAgent(d); // the next agent has nonative0 named in xdpDevices
    const named = load('best-effort');
    inNetns(host.netns, () => named.attachDevice('nonative0', { genericFallback: true }));
    expect(named.xdpModes()).toEqual({ nonative0: 'generic' });
    expect(attached('nonative0')).toEqual({ mode: 'generic', program: 'xdp_ingress' });
  });

  it('a restart re-attaches beneath a device stacked on another that carries XDP (a VXLAN tunnel over eth0)', async () => {
    // The kernel refuses XDP on a device while a device over it has XDP (EEXIST): at a
    // restart the tunnel still had the previous agent's program when eth0 got its turn.
    const first = await xdpOnNicAndTunnel();
    expect(first.xdpModes()).toEqual({ eth0: 'native', tun0: 'generic' });
    const before = inNetns(host.netns, () => [xdpAttached('eth0')!.id, xdpAttached('tun0')!.id]);
    inNetns(host.netns, () => first.release());
    open.splice(open.indexOf(first), 1);
    const second = load('best-effort');
    inNetns(host.netns, () => {
      second.attachDevice('eth0');
      second.attachDevice('tun0', { genericFallback: true });
    });
    expect(second.xdpModes()).toEqual({ eth0: 'native', tun0: 'generic' });
    expect(attached('eth0')).toEqual({ mode: 'native', program: 'xdp_ingress' });
    expect(attached('tun0')).toEqual({ mode: 'generic', program: 'xdp_ingress' });
    const after = inNetns(host.netns, () => [xdpAttached('eth0')!.id, xdpAttached('tun0')!.id]);
    expect(after[0]).not.toBe(before[0]);
    expect(after[1]).not.toBe(before[1]);
    // In the other order (the tunnel first, then eth0), the program this process just put on
    // the tunnel comes off for eth0's attach and goes back.
    inNetns(host.netns, () => second.release());
    open.splice(open.indexOf(second), 1);
    const third = load('best-effort');
    inNetns(host.netns, () => third.attachDevice('tun0', { genericFallback: true }));
    const tunnelProgram = inNetns(host.netns, () => xdpAttached('tun0')!.id);
    expect(tunnelProgram).not.toBe(after[1]);
    inNetns(host.netns, () => third.attachDevice('eth0'));
    expect(attached('eth0')).toEqual({ mode: 'native', program: 'xdp_ingress' });
    expect(inNetns(host.netns, () => xdpAttached('tun0'))).toEqual({ mode: 'generic', id: tunnelProgram });
    // A change of mode beneath it too (the bench's switch: off, then generic).
    inNetns(host.netns, () => third.setXdp('eth0', 'generic'));
    expect(attached('eth0')).toEqual({ mode: 'generic', program: 'xdp_ingress' });
    expect(inNetns(host.netns, () => xdpAttached('tun0'))).toEqual({ mode: 'generic', id: tunnelProgram });
  });

  it('a device the agent leaves to tc gets no XDP whatever the acceleration, and loses what a previous agent put there', async () => {
    const first = await xdpOnNicAndTunnel();
    expect(attached('tun0')).toEqual({ mode: 'generic', program: 'xdp_ingress' });
    exitAgent(first);
    const second = load('best-effort');
    inNetns(host.netns, () => {
      second.attachDevice('eth0');
      second.attachDevice('tun0', { leaveOff: 'a vxlan tunnel' });
    });
    expect(attached('tun0')).toBeUndefined();
    expect(attached('eth0')).toEqual({ mode: 'native', program: 'xdp_ingress' });
    expect(second.xdpModes()).toEqual({ eth0: 'native', tun0: 'off' });
    expect(second.xdpDevices().tun0).toEqual({ mode: 'off', redirectTarget: false, reason: 'a vxlan tunnel' });
    // Its tc programs are there: what arrives on it is still ferry's.
    expect(second.attachedDevices()).toEqual(['eth0', 'tun0']);
    // Under native a device left to tc is no error (the tunnel has no driver XDP: attached, it would be).
    exitAgent(second);
    const native = load('native');
    inNetns(host.netns, () => {
      native.attachDevice('eth0');
      native.attachDevice('tun0', { leaveOff: 'a vxlan tunnel' });
    });
    expect(native.xdpModes()).toEqual({ eth0: 'native', tun0: 'off' });
    // Under none the reason is not kept: no device has XDP, none is left out of it.
    const third = load('none');
    inNetns(host.netns, () => third.attachDevice('tun0', { leaveOff: 'a vxlan tunnel' }));
    expect(third.xdpModes()).toEqual({});
  });

  it('a restart replaces the program in place; none takes it off; uninstall finds what is left', () => {
    const first = load('native');
    inNetns(host.netns, () => first.attachDevice('eth0'));
    const id = inNetns(host.netns, () => xdpAttached('eth0')!.id);
    inNetns(host.netns, () => first.release()); // the agent exits: the datapath stays
    open.splice(open.indexOf(first), 1);
    expect(attached('eth0')).toEqual({ mode: 'native', program: 'xdp_ingress' });
    const second = load('native');
    inNetns(host.netns, () => second.attachDevice('eth0'));
    expect(inNetns(host.netns, () => xdpAttached('eth0')!.id)).not.toBe(id);
    inNetns(host.netns, () => second.release());
    open.splice(open.indexOf(second), 1);
    const third = load('none');
    inNetns(host.netns, () => third.attachDevice('eth0'));
    expect(attached('eth0')).toBeUndefined();
    inNetns(host.netns, () => third.release());
    open.splice(open.indexOf(third), 1);
    const fourth = load('best-effort');
    inNetns(host.netns, () => fourth.attachDevice('eth0'));
    inNetns(host.netns, () => fourth.release());
    open.splice(open.indexOf(fourth), 1);
    const r = uninstall({ pinDir, netns: host.netns });
    expect(r.xdpPrograms).toEqual(['xdp/native eth0']);
    expect(r.left).toEqual([]);
    expect(attached('eth0')).toBeUndefined();
  });
});
