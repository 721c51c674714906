// An upgrade's switch across layouts: the previous build's tc programs are attached again
// behind ferry's filter, so that what the new programs pass on (TC_ACT_UNSPEC) reaches them,
// and taken away after the last copy. Real filters on a namespace's device, real pings.
import { expect, it } from 'vitest';
import { u32Codec } from '../../src/ebpf/codec.js';
import { attachTc, tcFilterProgramId } from '../../src/ebpf/link-tc.js';
import { BpfObject } from '../../src/ebpf/object.js';
import { HANDOVER_TC, chainPreviousPrograms, removeChain } from '../../src/datapath/handover-chain.js';
import { inNetns } from '../../src/sys/netns.js';
import { counterCodec } from '../bpf/codecs.js';
import { bpfObject } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { twoHostsPerTest } from '../harness/two-hosts.js';

const hosts = twoHostsPerTest();

const load = (name: string, constants: Record<string, number> = {}): BpfObject => {
  const obj = BpfObject.open(bpfObject(`tests/${name}`));
  for (const [k, v] of Object.entries(constants)) obj.setConstant(k, v);
  obj.load();
  return obj;
};
const pings = (obj: BpfObject): bigint => obj.map('pkt_counter', u32Codec, counterCodec).lookupPerCpu(0)!.reduce((a, v) => a + v.packets, 0n);
const ping = (n: number) => hosts.client.execOk(['ping', '-c', String(n), '-i', '0.2', '-W', '2', '10.0.10.1']);

describeWith(['root', 'netns', 'cgroup2'], "an upgrade's switch: the previous programs chained behind the new ones", () => {
  it('what the new program passes on reaches the previous one behind it, until the chain is taken away', async () => {
    // The previous build's filter (counting ICMP, on both hooks), then the new one that passes everything on.
    const previous = load('pkt_counter', { match_protocol: 1 });
    const next = load('pass_on');
    try {
      inNetns(hosts.server.netns, () => {
        attachTc(previous.program('count_packets'), { ifname: 'eth0', direction: 'ingress' }).disown();
        attachTc(previous.program('count_packets'), { ifname: 'eth0', direction: 'egress' }).disown();
      });
      const chain = inNetns(hosts.server.netns, () => chainPreviousPrograms(['eth0']));
      expect(chain.reason).toBeUndefined();
      expect(chain.links.length).toBe(2);
      const previousId = inNetns(hosts.server.netns, () => tcFilterProgramId('eth0', 'ingress'))!;
      expect(inNetns(hosts.server.netns, () => [tcFilterProgramId('eth0', 'ingress', HANDOVER_TC), tcFilterProgramId('eth0', 'egress', HANDOVER_TC)])).toEqual([previousId, previousId]);

      inNetns(hosts.server.netns, () => {
        attachTc(next.program('pass_on'), { ifname: 'eth0', direction: 'ingress' }).disown();
        attachTc(next.program('pass_on'), { ifname: 'eth0', direction: 'egress' }).disown();
      });
      await ping(3);
      expect(pings(previous)).toBe(6n); // 3 requests in, 3 replies out, each passed on by the new filter

      for (const l of chain.links) l.close();
      await ping(2);
      expect(pings(previous)).toBe(6n);
      expect(await hosts.server.execOk(['tc', 'filter', 'show', 'dev', 'eth0', 'ingress'])).toContain('pass_on');
      expect(await hosts.server.execOk(['tc', 'filter', 'show', 'dev', 'eth0', 'ingress'])).not.toContain('count_packets');
    } finally {
      previous.close();
      next.close();
    }
  });

  it('all or nothing: with a device that has no previous program nothing is chained, and a left-over chain is removed', async () => {
    const previous = load('pkt_counter', { match_protocol: 1 });
    try {
      await hosts.tb.link({ host: hosts.client, ifname: 'eth1', address: '10.0.11.2/24' }, { host: hosts.server, ifname: 'eth1', address: '10.0.11.1/24' });
      inNetns(hosts.server.netns, () => {
        attachTc(previous.program('count_packets'), { ifname: 'eth0', direction: 'ingress' }).disown();
        attachTc(previous.program('count_packets'), { ifname: 'eth0', direction: 'egress' }).disown();
      });
      const chain = inNetns(hosts.server.netns, () => chainPreviousPrograms(['eth0', 'eth1']));
      expect(chain.links).toEqual([]);
      expect(chain.reason).toBe('no previous tc ingress program on eth1');
      expect(inNetns(hosts.server.netns, () => tcFilterProgramId('eth0', 'ingress', HANDOVER_TC))).toBeUndefined(); // eth0's taken back

      // An agent that died in its switch left its chain: the next one removes it.
      inNetns(hosts.server.netns, () => chainPreviousPrograms(['eth0']).links.forEach((l) => l.disown()));
      expect(inNetns(hosts.server.netns, () => tcFilterProgramId('eth0', 'egress', HANDOVER_TC))).toBeDefined();
      inNetns(hosts.server.netns, () => removeChain('eth0'));
      expect(inNetns(hosts.server.netns, () => [tcFilterProgramId('eth0', 'ingress', HANDOVER_TC), tcFilterProgramId('eth0', 'egress', HANDOVER_TC)])).toEqual([undefined, undefined]);
    } finally {
      previous.close();
    }
  });
});
