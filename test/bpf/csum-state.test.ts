// What the datapath reads of an skb's checksum state (ctx_l4_csum_whole and
// ctx_l4_csum_partial, bpf/lib/ctx.h): a checksum that is whole (CHECKSUM_NONE or UNNECESSARY)
// is updated in place without a helper call; a sender's partial one (CHECKSUM_PARTIAL: the
// field holds the pseudo header's sum) is left to bpf_l4_csum_replace, which knows it, and a
// change of ports leaves it as it is. Both kinds, from the kernel itself: a test run's
// skb and a raw frame off a veth are whole; a TCP socket's segment over a veth is partial.
import { expect, it } from 'vitest';
import { u32Codec, u64Codec } from '../../src/ebpf/codec.js';
import { attachTc, ifindexOf } from '../../src/ebpf/link-tc.js';
import { BpfObject } from '../../src/ebpf/object.js';
import { testRun } from '../../src/ebpf/test-run.js';
import { buildPacket, eth, ipv4, tcp } from '../../src/packet/build.js';
import { inNetns } from '../../src/sys/netns.js';
import { sendFramesOnce } from '../../src/sys/packet-socket.js';
import { bpfObject } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { twoHostsPerTest } from '../harness/two-hosts.js';

const hosts = twoHostsPerTest();
const settle = (ms: number) => new Promise((r) => setTimeout(r, ms));

describeWith(['root', 'netns'], "the skb's checksum state, as the datapath reads it", () => {
  it('whole for a test run and a raw frame, partial for a socket\'s TCP segment', async () => {
    const obj = BpfObject.open(bpfObject('tests/csum_state'));
    try {
      obj.load();
      const byState = obj.map('by_state', u32Codec, u64Codec);
      const counts = () => [0, 1, 2, 3].map((state) => Number(byState.lookup(state) ?? 0n)); // neither, whole, partial, both
      const serverMac = (JSON.parse(await hosts.server.execOk(['ip', '-j', 'link', 'show', 'eth0'])) as Array<{ address: string }>)[0]!.address;
      const syn = buildPacket([eth({ src: '02:00:00:00:00:01', dst: serverMac }), ipv4({ src: '10.0.10.2', dst: '10.0.10.1', ttl: 64 }), tcp({ sport: 40000, dport: 9, flags: 'S', seq: 1, ack: 0 })]);

      testRun(obj.program('csum_state'), { data: syn });
      expect(counts()).toEqual([0, 1, 0, 0]);

      const link = inNetns(hosts.server.netns, () => attachTc(obj.program('csum_state'), { ifname: 'eth0', direction: 'ingress' }));
      try {
        inNetns(hosts.client.netns, () => sendFramesOnce(ifindexOf('eth0'), [syn]));
        for (let i = 0; i < 100 && counts()[1]! < 2; i++) await settle(10);
        expect(counts()).toEqual([0, 2, 0, 0]);

        // A connect (refused: nothing listens on port 9): the SYN leaves the client's stack partial.
        await hosts.client.exec(['bash', '-c', 'exec 3<>/dev/tcp/10.0.10.1/9']);
        for (let i = 0; i < 100 && counts()[2]! < 1; i++) await settle(10);
        expect(counts()[2]).toBeGreaterThanOrEqual(1);
        expect(counts()[1]).toBe(2);
        expect(counts()[0]).toBe(0);
        expect(counts()[3]).toBe(0);
      } finally {
        link.close();
      }
    } finally {
      obj.close();
    }
  });
});
