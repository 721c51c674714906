// ICMP errors the datapath sends are rate-limited: a flood of packets that each earn an
// error (SYNs to a Service without endpoints) cannot turn the node into a flood of errors.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { DropReason, Stat } from '../../src/datapath/layouts.js';
import { CLIENT_IP, NODE_IP, datapathNode, total, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { TcVerdict } from '../../src/sandbox/packet-fixture.js';
import { syn } from '../../src/sandbox/fixtures/tc.js';
import { describeWith } from '../harness/requirements.js';

let node: DatapathNode;
beforeAll(async () => {
  // A burst of 3 and one a second: within this test, no more than the burst is sent.
  node = await datapathNode({ icmpBurst: 3, icmpRatePerSec: 1 });
  node.writer.apply([{ address: NODE_IP, port: 30090, proto: 'TCP', kind: 'NodePort', backends: [] }]);
});
afterAll(async () => {
  await node?.close();
});

describeWith(['root', 'bpffs', 'netns'], 'ICMP rate limit', () => {
  it('answers the burst, then drops silently and counts', () => {
    const verdicts = Array.from({ length: 8 }, (_, i) => node.run('tc_ingress', syn(NODE_IP, 30090, { sport: 30000 + i, src: CLIENT_IP })).retval);
    // Each run may land on another CPU, each with its own bucket: at most the burst per CPU.
    const answered = verdicts.filter((v) => v === TcVerdict.REDIRECT).length;
    expect(answered).toBeGreaterThanOrEqual(3);
    expect(answered).toBeLessThanOrEqual(3 * 2);
    expect(verdicts.filter((v) => v === TcVerdict.SHOT).length).toBe(8 - answered);
    expect(total(node.dp, 'ferry_stats', Stat.STAT_ICMP_REJECT)).toBe(BigInt(answered));
    expect(total(node.dp, 'ferry_drops', DropReason.DROP_ICMP_RATELIMIT)).toBe(BigInt(8 - answered));
  });
});
