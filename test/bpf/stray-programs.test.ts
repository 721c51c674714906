// An agent that starts with fewer devices than the one before it (a device taken out of
// `devices`, or no longer carrying the node's addresses) takes ferry's programs off the
// others: tc filters and XDP outlive their agent, and left there they would go on serving
// Services on a device the operator took away (src/datapath/stray-programs.ts). Another
// user's filter at ferry's handle and priority is not ferry's to remove.
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { Datapath, defaultObjectsDir } from '../../src/datapath/loader.js';
import { chainPreviousPrograms, HANDOVER_TC } from '../../src/datapath/handover-chain.js';
import { BpfObject } from '../../src/ebpf/object.js';
import { attachTc, tcFilterProgramId, type TcDirection } from '../../src/ebpf/link-tc.js';
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

const load = () => {
  const d = Datapath.load({ objectsDir: defaultObjectsDir(), pinDir, snatIPv4: '10.0.31.21', acceleration: 'native' });
  open.push(d);
  return d;
};
/** The agent exits: its programs stay where they are. */
const exit = (d: Datapath) => {
  inNetns(host.netns, () => d.release());
  open.splice(open.indexOf(d), 1);
};
/** The program names on a device: tc at ferry's place and the upgrade chain's, and XDP. */
const programsOn = (dev: string) => inNetns(host.netns, () => {
  const at = (direction: TcDirection, place?: typeof HANDOVER_TC) => {
    const id = tcFilterProgramId(dev, direction, place);
    return id ? programNameById(id) : undefined;
  };
  const x = xdpAttached(dev);
  return { ingress: at('ingress'), egress: at('egress'), chainIngress: at('ingress', HANDOVER_TC), chainEgress: at('egress', HANDOVER_TC), xdp: x ? programNameById(x.id) : undefined };
});
const NONE = { ingress: undefined, egress: undefined, chainIngress: undefined, chainEgress: undefined, xdp: undefined };
const FERRY = { ingress: 'tc_ingress', egress: 'tc_egress', chainIngress: undefined, chainEgress: undefined, xdp: 'xdp_ingress' };

describeWith(['root', 'bpffs', 'netns'], 'ferry programs on devices the agent no longer serves', () => {
  it('a restart with fewer devices takes ferry off the others, upgrade chain included, and leaves a foreign filter be', () => {
    const first = load();
    inNetns(host.netns, () => first.attachDevices(['eth0', 'eth1'], ['eth0', 'eth1']));
    // An agent that died in an upgrade's switch leaves the previous programs chained on eth1.
    const chain = inNetns(host.netns, () => chainPreviousPrograms(['eth1']));
    expect(chain.links).toHaveLength(2);
    for (const l of chain.links) l.disown();
    // Another user's tc program at ferry's handle and priority on eth2.
    const other = BpfObject.open(bpfObject('tests/vlan_tag'));
    other.load();
    foreign.push(other);
    inNetns(host.netns, () => attachTc(other.program('vlan_tag'), { ifname: 'eth2', direction: 'ingress' }).disown());
    exit(first);
    expect(programsOn('eth1')).toEqual({ ...FERRY, chainIngress: 'tc_ingress', chainEgress: 'tc_egress' });

    const second = load();
    const report = inNetns(host.netns, () => second.attachDevices(['eth0']));
    expect(report.failed).toEqual([]);
    expect(report.removed.sort()).toEqual(['tc egress eth1', 'tc egress eth1 (upgrade chain)', 'tc ingress eth1', 'tc ingress eth1 (upgrade chain)', 'xdp/native eth1']);
    expect(programsOn('eth1')).toEqual(NONE);
    expect(programsOn('eth0')).toEqual(FERRY);
    expect(programsOn('eth2')).toEqual({ ...NONE, ingress: 'vlan_tag' });
    expect(second.attachedDevices()).toEqual(['eth0']);

    // Nothing left to take off: the next start finds none.
    exit(second);
    const third = load();
    expect(inNetns(host.netns, () => third.attachDevices(['eth0']))).toEqual({ removed: [], failed: [] });
  });

  it('a device that cannot be looked at is reported, and the others are still cleaned', () => {
    const first = load();
    inNetns(host.netns, () => first.attachDevices(['eth0', 'eth1'], ['eth0', 'eth1']));
    exit(first);
    const second = load();
    const report = inNetns(host.netns, () => second.attachDevices(['eth0'], ['gone0', 'eth1']));
    expect(report.failed).toHaveLength(1);
    expect(report.failed[0]).toMatch(/^gone0: .*no such device/);
    expect(report.removed.sort()).toEqual(['tc egress eth1', 'tc ingress eth1', 'xdp/native eth1']);
  });
});
