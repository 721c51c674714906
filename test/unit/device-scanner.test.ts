// The device scanner on a fake node: a VLAN of a ferry device that is not one itself is
// reported once (its tagged traffic passes ferry's programs on the trunk untouched), again
// after it was served or gone and comes back, and never while it is served; /status and
// `ferry status` list it while it lasts.
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { DeviceScanner } from '../../src/agent/device-scanner.js';
import { vlansLine } from '../../src/cli/inspect-commands.js';
import type { LinkInfo } from '../../src/sys/links.js';

const link = (name: string, o: Partial<LinkInfo> = {}): LinkInfo => ({ name, ifindex: name.length, up: true, loopback: false, addresses: [], ...o });

function node(attachedAtStart: string[], wanted = { devices: ['eth0'], xdpDevices: [] as string[] }) {
  const attached = [...attachedAtStart];
  const xdpLeftOff = new Map<string, string | undefined>();
  const xdpGeneric = new Map<string, boolean | undefined>();
  const lines: Array<{ msg: string; device?: string; vlan?: number }> = [];
  const sink = new Writable({ write: (chunk, _enc, done) => (lines.push(JSON.parse(String(chunk))), done()) });
  let links: LinkInfo[] = [];
  const datapath = {
    attachDevice: (d: string, xdp: { leaveOff?: string; genericFallback?: boolean }) => void (attached.push(d), xdpLeftOff.set(d, xdp.leaveOff), xdpGeneric.set(d, xdp.genericFallback)),
    attachedDevices: () => [...attached],
    forgetDevice: (d: string) => void attached.splice(attached.indexOf(d), 1),
    refreshXdpTargets: () => false,
    refreshSnatDevices: () => false,
    snatDeviceList: () => [],
  };
  const scanner = new DeviceScanner(datapath as unknown as ConstructorParameters<typeof DeviceScanner>[0], wanted, [], pino(sink), () => undefined, { links: () => links, defaultRouteDevices: () => [] });
  const vlanWarnings = () => lines.filter((l) => l.msg.startsWith('a VLAN of a ferry device')).map((l) => `${l.device}:${l.vlan}`);
  return { scanner, attached, xdpLeftOff, xdpGeneric, setLinks: (l: LinkInfo[]) => (links = l), vlanWarnings };
}

describe('device scanner: VLANs of ferry devices', () => {
  it('says once that a VLAN of an attached device is not served, again when it returns', () => {
    const n = node(['eth0']);
    const eth0 = link('eth0');
    const v100 = link('eth0.100', { vlan: { parent: 'eth0', id: 100 } });
    n.setLinks([eth0, v100]);
    n.scanner.scan();
    n.scanner.scan();
    expect(n.vlanWarnings()).toEqual(['eth0.100:100']);
    expect(n.scanner.vlansNotServed()).toEqual([{ device: 'eth0.100', vlan: 100, parent: 'eth0' }]); // /status, `ferry status`
    expect(vlansLine(n.scanner.vlansNotServed())).toBe("not served (their tagged frames pass ferry's programs untouched; name them in devices): eth0.100 (VLAN 100 of eth0)");
    n.setLinks([eth0]); // the VLAN deleted, then made again
    n.scanner.scan();
    expect(n.scanner.vlansNotServed()).toEqual([]);
    n.setLinks([eth0, v100]);
    n.scanner.scan();
    expect(n.vlanWarnings()).toEqual(['eth0.100:100', 'eth0.100:100']);
  });

  it('says nothing of a VLAN that is one of ferry devices', () => {
    const n = node(['eth0', 'eth0.100']);
    n.setLinks([link('eth0'), link('eth0.100', { vlan: { parent: 'eth0', id: 100 } })]);
    n.scanner.scan();
    expect(n.vlanWarnings()).toEqual([]);
    expect(n.scanner.vlansNotServed()).toEqual([]);
  });

  it('a device that appears later gets XDP as xdpDevices says: by default a tunnel is left to tc', () => {
    for (const [xdpDevices, expected] of [[[], /^a vxlan tunnel/], [['eth0', 'flannel.1'], undefined]] as const) {
      const n = node(['eth0'], { devices: ['eth0', 'flannel.1'], xdpDevices: [...xdpDevices] });
      n.setLinks([link('eth0')]); // the tunnel not made yet: nothing attached, nothing forgotten
      n.scanner.scan();
      expect(n.attached).toEqual(['eth0']);
      n.setLinks([link('eth0'), link('flannel.1', { kind: 'vxlan' })]);
      n.scanner.scan();
      expect(n.attached).toEqual(['eth0', 'flannel.1']);
      if (expected) expect(n.xdpLeftOff.get('flannel.1')).toMatch(expected);
      else expect([n.xdpLeftOff.get('flannel.1'), n.xdpGeneric.get('flannel.1')]).toEqual([undefined, true]); // named: generic XDP allowed
    }
  });
});
