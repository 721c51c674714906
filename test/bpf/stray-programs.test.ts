// An agent that starts with fewer devices than the one before it (a device taken out of
// `devices`, or no longer carrying the node's addresses) takes ferry's programs off the
// others: tc filters and XDP outlive their agent, and left there they would go on serving
// Services on a device the operator took away (src/datapath/stray-programs.ts). Another
// user's filter at ferry's handle and priority (or program in the tcx list) is not ferry's
// to remove. Both ways of attaching: tcx and clsact (src/datapath/tc-hooks.ts).
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { Datapath, defaultObjectsDir } from '../../src/datapath/loader.js';
import { chainPreviousPrograms, HANDOVER_TC } from '../../src/datapath/handover-chain.js';
import { BpfObject } from '../../src/ebpf/object.js';
import { attachTc, tcFilterProgramId, type TcDirection } from '../../src/ebpf/link-tc.js';
import { attachTcx, tcxProgramIds } from '../../src/ebpf/link-tcx.js';
import type { TcAttachMode } from '../../src/datapath/tc-hooks.js';
import { programNameById, xdpAttached } from '../../src/ebpf/link-xdp.js';
import { Testbed, type Host } from '../../src/sandbox/netns/testbed.js';
import { inNetns } from '../../src/sys/netns.js';
import { bpfObject } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';

let tb: Testbed;
let host: Host;
let pinDir: string;
const open: Datapath[] = [];
const foreign: BpfObject[] = [];

beforeEach(async () => {
  tb = await Testbed.create();
  host = await tb.addHost('node');
  const peer = await tb.addHost('peer');
  await tb.link({ host, ifname: 'eth0', address: '10.0.31.21/24' }, { host: peer, ifname: 'eth0' });
  await tb.link({ host, ifname: 'eth1', address: '10.0.32.21/24' }, { host: peer, ifname: 'eth1' });
  await tb.link({ host, ifname: 'eth2', address: '10.0.33.21/24' }, { host: peer, ifname: 'eth2' });
  pinDir = join('/sys/fs/bpf', `${tb.prefix}-stray`);
  mkdirSync(pinDir);
});
afterEach(async () => {
  for (const d of open.splice(0)) inNetns(host.netns, () => d.close());
  for (const o of foreign.splice(0)) o.close();
  if (pinDir) rmSync(pinDir, { recursive: true, force: true });
  await tb?.destroy(); // the devices go, and whatever is left on them
});

const load = (tcAttach: TcAttachMode, dir = pinDir) => {
  const d = Datapath.load({ objectsDir: defaultObjectsDir(), pinDir: dir, snatIPv4: '10.0.31.21', acceleration: 'native', tcAttach });
  open.push(d);
  return d;
};
/** The agent exits: its programs stay where they are. */
const exit = (d: Datapath) => {
  inNetns(host.netns, () => d.release());
  open.splice(open.indexOf(d), 1);
};
/** The program names on a device: tc at ferry's place and the upgrade chain's (tcx: the first two of its list), and XDP. */
const programsOn = (dev: string, mode: TcAttachMode) => inNetns(host.netns, () => {
  const at = (direction: TcDirection, place?: typeof HANDOVER_TC) => {
    const id = mode === 'tcx' ? tcxProgramIds(dev, direction)[place ? 1 : 0] : tcFilterProgramId(dev, direction, place);
    return id ? programNameById(id) : undefined;
  };
  const x = xdpAttached(dev);
  return { ingress: at('ingress'), egress: at('egress'), chainIngress: at('ingress', HANDOVER_TC), chainEgress: at('egress', HANDOVER_TC), xdp: x ? programNameById(x.id) : undefined };
});
const NONE = { ingress: undefined, egress: undefined, chainIngress: undefined, chainEgress: undefined, xdp: undefined };
const FERRY = { ingress: 'tc_ingress', egress: 'tc_egress', chainIngress: undefined, chainEgress: undefined, xdp: 'xdp_ingress' };

for (const mode of ['tcx', 'clsact'] as const) describeWith(['root', 'bpffs', 'netns'], `ferry programs on devices the agent no longer serves (${mode})`, () => {
  it('a restart with fewer devices takes ferry off the others, upgrade chain included, and leaves a foreign filter be', () => {
    const first = load(mode);
    inNetns(host.netns, () => first.attachDevices(['eth0', 'eth1'], ['eth0', 'eth1']));
    expect(first.tcMode).toBe(mode);
    // An agent that died in an upgrade's switch leaves the previous programs chained on eth1
    // (tcx: another build's programs behind its own in the list).
    if (mode === 'clsact') {
      const chain = inNetns(host.netns, () => chainPreviousPrograms(['eth1']));
      expect(chain.links).toHaveLength(2);
      for (const l of chain.links) l.disown();
    } else {
      mkdirSync(`${pinDir}-previous`);
      const previous = load(mode, `${pinDir}-previous`);
      for (const direction of ['ingress', 'egress'] as const) inNetns(host.netns, () => attachTcx(previous.tc.program(`tc_${direction}`), { ifname: 'eth1', direction, position: 'last' }).disown());
      exit(previous);
      rmSync(`${pinDir}-previous`, { recursive: true, force: true });
    }
    // Another user's tc program at ferry's handle and priority on eth2 (tcx: first in its list).
    const other = BpfObject.open(bpfObject('tests/vlan_tag'));
    other.load();
    foreign.push(other);
    inNetns(host.netns, () => (mode === 'tcx' ? attachTcx : attachTc)(other.program('vlan_tag'), { ifname: 'eth2', direction: 'ingress' }).disown());
    exit(first);
    expect(programsOn('eth1', mode)).toEqual({ ...FERRY, chainIngress: 'tc_ingress', chainEgress: 'tc_egress' });

    const second = load(mode);
    const report = inNetns(host.netns, () => second.attachDevices(['eth0']));
    expect(report.failed).toEqual([]);
    const kind = mode === 'tcx' ? 'tcx' : 'tc';
    expect(report.removed.sort()).toEqual([`${kind} egress eth1`, `${kind} egress eth1 (upgrade chain)`, `${kind} ingress eth1`, `${kind} ingress eth1 (upgrade chain)`, 'xdp/native eth1']);
    expect(programsOn('eth1', mode)).toEqual(NONE);
    expect(programsOn('eth0', mode)).toEqual(FERRY);
    expect(programsOn('eth2', mode)).toEqual({ ...NONE, ingress: 'vlan_tag' });
    expect(second.attachedDevices()).toEqual(['eth0']);

    // Nothing left to take off: the next start finds none.
    exit(second);
    const third = load(mode);
    expect(inNetns(host.netns, () => third.attachDevices(['eth0']))).toEqual({ removed: [], failed: [] });
  });

  it('a device that cannot be looked at is reported, and the others are still cleaned', () => {
    const first = load(mode);
    inNetns(host.netns, () => first.attachDevices(['eth0', 'eth1'], ['eth0', 'eth1']));
    exit(first);
    const second = load(mode);
    const report = inNetns(host.netns, () => second.attachDevices(['eth0'], ['gone0', 'eth1']));
    expect(report.failed).toHaveLength(1);
    expect(report.failed[0]).toMatch(/^gone0: .*no such device/);
    expect(report.removed.sort()).toEqual([`${mode === 'tcx' ? 'tcx' : 'tc'} egress eth1`, `${mode === 'tcx' ? 'tcx' : 'tc'} ingress eth1`, 'xdp/native eth1']);
  });
});
