// ferry's tc programs in the kernel's tcx lists (src/ebpf/link-tcx.ts, src/datapath/tc-hooks.ts):
// what a program passes on (TC_ACT_UNSPEC) reaches the one behind it and then a clsact
// filter, real pings counted; an agent's restart takes its predecessor's place in one step
// and in the same position; an upgrade's chain keeps the previous programs behind until
// its end; a node moves between clsact and tcx with nothing of the other way left.
import { mkdirSync, rmSync } from 'node:fs';
import { release } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { u32Codec } from '../../src/ebpf/codec.js';
import { attachTc, tcFilterProgramId } from '../../src/ebpf/link-tc.js';
import { attachTcx, tcxProgramIds, tcxSupported } from '../../src/ebpf/link-tcx.js';
import { programNameById } from '../../src/ebpf/link-xdp.js';
import { BpfObject } from '../../src/ebpf/object.js';
import { Datapath, defaultObjectsDir } from '../../src/datapath/loader.js';
import { chainPreviousPrograms } from '../../src/datapath/handover-chain.js';
import { attachTcHooks, tcAttachMode, type TcAttachMode } from '../../src/datapath/tc-hooks.js';
import { attachedPrograms } from '../../src/datapath/attachments.js';
import { inNetns } from '../../src/sys/netns.js';
import { counterCodec } from '../bpf/codecs.js';
import { bpfObject } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { twoHostsPerTest } from '../harness/two-hosts.js';

const hosts = twoHostsPerTest();
const objects: Array<{ close(): void }> = [];
const pinDirs: string[] = [];
afterEach(() => {
  for (const o of objects.splice(0).reverse()) o.close();
  for (const d of pinDirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const load = (name: string, constants: Record<string, number> = {}): BpfObject => {
  const obj = BpfObject.open(bpfObject(`tests/${name}`));
  for (const [k, v] of Object.entries(constants)) obj.setConstant(k, v);
  obj.load();
  objects.push(obj);
  return obj;
};
const pings = (obj: BpfObject): bigint => obj.map('pkt_counter', u32Codec, counterCodec).lookupPerCpu(0)!.reduce((a, v) => a + v.packets, 0n);
const ping = (n: number) => hosts.client.execOk(['ping', '-c', String(n), '-i', '0.2', '-W', '2', '10.0.10.1']);
const onServer = <T>(fn: () => T): T => inNetns(hosts.server.netns, fn);
/** The names in eth0's tcx list of a direction, in the order they run. */
const tcxNames = (direction: 'ingress' | 'egress' = 'ingress') => onServer(() => tcxProgramIds('eth0', direction).map(programNameById));

/** A datapath of the server's (its own pins): what an agent loads. */
const datapath = (tcAttach: TcAttachMode): Datapath => {
  const pinDir = join('/sys/fs/bpf', `${hosts.tb.prefix}-tcx-${pinDirs.length}`);
  mkdirSync(pinDir);
  pinDirs.push(pinDir);
  const d = Datapath.load({ objectsDir: defaultObjectsDir(), pinDir, snatIPv4: '10.0.10.1', tcAttach });
  objects.push({ close: () => onServer(() => d.release()) }); // as an agent exits: the programs stay attached
  return d;
};

describeWith(['root', 'netns', 'bpffs'], 'tcx: ferry first in the kernel\'s tc program lists', () => {
  it('the kernel has tcx (Linux 6.6+), and auto chooses it; clsact is chosen only when asked', () => {
    const [major, minor] = (/^(\d+)\.(\d+)/.exec(release()) ?? []).slice(1).map(Number);
    expect(tcxSupported()).toBe(major! > 6 || (major === 6 && minor! >= 6));
    expect(tcAttachMode('auto')).toBe(tcxSupported() ? 'tcx' : 'clsact');
    expect(tcAttachMode('clsact')).toBe('clsact');
  });

  it('what the first program passes on reaches the one behind it, then a clsact filter; one taken off sees nothing more', async () => {
    const previous = load('pkt_counter', { match_protocol: 1 }); // counts ICMP, then TC_ACT_OK: the end of the line
    const legacy = load('pkt_counter', { match_protocol: 1 });
    const next = load('pass_on');
    const behind = onServer(() => (['ingress', 'egress'] as const).map((direction) => attachTcx(previous.program('count_packets'), { ifname: 'eth0', direction, position: 'last' })));
    onServer(() => attachTc(legacy.program('count_packets'), { ifname: 'eth0', direction: 'ingress' }).disown());
    const first = onServer(() => (['ingress', 'egress'] as const).map((direction) => attachTcx(next.program('pass_on'), { ifname: 'eth0', direction, position: 'first' })));
    expect(tcxNames()).toEqual(['pass_on', 'count_packets']);
    await ping(3);
    expect(pings(previous)).toBe(6n); // 3 requests in, 3 replies out, each passed on by the first
    expect(pings(legacy)).toBe(0n); // the tcx list ended them

    for (const l of behind) l.close();
    expect(tcxNames()).toEqual(['pass_on']);
    await ping(2);
    expect(pings(previous)).toBe(6n);
    expect(pings(legacy)).toBe(2n); // what the tcx list passes on reaches the clsact filter
    for (const l of first) l.close();
    expect(tcxNames()).toEqual([]);
  });

  it('a restart takes the previous agent\'s place in one step, in its position; another user\'s program stays where it was', () => {
    const foreign = load('pass_on');
    onServer(() => attachTcx(foreign.program('pass_on'), { ifname: 'eth0', direction: 'ingress' }).disown());
    const a = datapath('tcx');
    onServer(() => a.attachDevice('eth0'));
    expect(tcxNames()).toEqual(['tc_ingress', 'pass_on']);
    expect(tcxNames('egress')).toEqual(['tc_egress']);
    const aId = onServer(() => tcxProgramIds('eth0', 'ingress')[0]);

    const b = datapath('tcx');
    onServer(() => b.attachDevice('eth0'));
    const ids = onServer(() => tcxProgramIds('eth0', 'ingress'));
    expect(ids).toHaveLength(2);
    expect(ids[0]).not.toBe(aId);
    expect(tcxNames()).toEqual(['tc_ingress', 'pass_on']);
    // `ferry status` lists them as such.
    expect(attachedPrograms(hosts.server.netns).filter((p) => p.where.endsWith(' eth0')).map((p) => `${p.where}: ${p.program}`).sort()).toEqual(['tcx egress eth0: tc_egress', 'tcx ingress eth0: tc_ingress']);
  });

  it("an upgrade's chain keeps the previous programs behind the new ones until its end", () => {
    const a = datapath('tcx');
    onServer(() => a.attachDevice('eth0'));
    const aIds = onServer(() => [tcxProgramIds('eth0', 'ingress')[0], tcxProgramIds('eth0', 'egress')[0]]);
    // A switch that fails before the new programs go in leaves the previous ones serving.
    for (const l of onServer(() => chainPreviousPrograms(['eth0'], 'tcx')).links) l.close();
    expect(onServer(() => [tcxProgramIds('eth0', 'ingress'), tcxProgramIds('eth0', 'egress')])).toEqual([[aIds[0]], [aIds[1]]]);

    const chain = onServer(() => chainPreviousPrograms(['eth0'], 'tcx'));
    expect(chain.reason).toBeUndefined();
    expect(chain.links).toHaveLength(2);
    const b = datapath('tcx');
    const links = onServer(() => attachTcHooks({ ingress: b.tc.program('tc_ingress'), egress: b.tc.program('tc_egress') }, 'eth0', 'tcx', true));
    const ingress = onServer(() => tcxProgramIds('eth0', 'ingress'));
    expect(ingress).toHaveLength(2);
    expect(ingress[1]).toBe(aIds[0]); // the previous one runs behind
    expect(onServer(() => tcxProgramIds('eth0', 'egress'))[1]).toBe(aIds[1]);

    for (const l of chain.links) l.close(); // the switch's end
    expect(onServer(() => tcxProgramIds('eth0', 'ingress'))).toEqual([ingress[0]]);
    expect(tcxNames('egress')).toEqual(['tc_egress']);
    for (const l of links) l.disown();
  });

  it("an upgrade from a clsact build: its filter runs after the new tcx programs until the switch's end", () => {
    const a = datapath('clsact');
    onServer(() => a.attachDevice('eth0'));
    const aId = onServer(() => tcFilterProgramId('eth0', 'ingress'));
    const chain = onServer(() => chainPreviousPrograms(['eth0'], 'tcx'));
    expect(chain.links.map((l) => l.where)).toEqual(['tc ingress eth0', 'tc egress eth0']);
    const b = datapath('tcx');
    const links = onServer(() => attachTcHooks({ ingress: b.tc.program('tc_ingress'), egress: b.tc.program('tc_egress') }, 'eth0', 'tcx', true));
    expect(tcxNames()).toEqual(['tc_ingress']);
    expect(onServer(() => tcFilterProgramId('eth0', 'ingress'))).toBe(aId); // still behind
    for (const l of chain.links) l.close();
    expect(onServer(() => [tcFilterProgramId('eth0', 'ingress'), tcFilterProgramId('eth0', 'egress')])).toEqual([undefined, undefined]);
    expect([tcxNames(), tcxNames('egress')]).toEqual([['tc_ingress'], ['tc_egress']]);
    for (const l of links) l.disown();
  });

  it('a node moves from clsact to tcx and back with nothing of the other way left', () => {
    const a = datapath('clsact');
    onServer(() => a.attachDevice('eth0'));
    expect(onServer(() => programNameById(tcFilterProgramId('eth0', 'ingress')!))).toBe('tc_ingress');
    expect(tcxNames()).toEqual([]);

    const b = datapath('tcx');
    onServer(() => b.attachDevice('eth0'));
    expect(onServer(() => [tcFilterProgramId('eth0', 'ingress'), tcFilterProgramId('eth0', 'egress')])).toEqual([undefined, undefined]);
    expect([tcxNames(), tcxNames('egress')]).toEqual([['tc_ingress'], ['tc_egress']]);

    const c = datapath('clsact');
    onServer(() => c.attachDevice('eth0'));
    expect([tcxNames(), tcxNames('egress')]).toEqual([[], []]);
    expect(onServer(() => programNameById(tcFilterProgramId('eth0', 'egress')!))).toBe('tc_egress');
  });
});
