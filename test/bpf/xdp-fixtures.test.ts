// The tc fixture tables again, through xdp_ingress and then tc_ingress as a device runs them
// (datapath-node.ts): every packet must come out exactly as with tc alone. XDP must do the
// work itself where it can (the lists below), and pass the rest untouched.
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { XdpVerdict, expectFixture } from '../../src/sandbox/packet-fixture.js';
import { datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { TC_FIXTURES, TC_SERVICES } from '../../src/sandbox/fixtures/tc.js';
import { DSR_FIXTURES, dsrServices } from '../../src/sandbox/fixtures/dsr.js';
import { describeWith } from '../harness/requirements.js';

/** Fixtures whose packet XDP sends back out itself (XDP_TX): remote backends, their replies, rejects. */
const XDP_SENDS = new Set(['nodeport-remote', 'nodeport-remote-established', 'nodeport-remote-midstream', 'udp-remote', 'udp-remote-zero-checksum', 'snat-reply', 'dsr-annotated', 'dsr-annotated-established', 'dsr-established', 'lb-remote', 'reject', 'ttl-expired', 'dsr-syn', 'dsr-ack', 'dsr-udp', 'dsr-frag-needed', 'dsr-frag-needed-kept-hop', 'dsr-fits']);
/** ... and those it drops itself. */
const XDP_DROPS = new Set(['local-policy-drop', 'unknown-port', 'source-range-denied']);

function xdpVerdictOf(id: string): number {
  return XDP_SENDS.has(id) ? XdpVerdict.TX : XDP_DROPS.has(id) ? XdpVerdict.DROP : XdpVerdict.PASS;
}

describeWith(['root', 'bpffs', 'netns'], 'xdp_ingress, then tc, on the tc fixtures', () => {
  let node: DatapathNode;
  beforeAll(async () => {
    node = await datapathNode({ acceleration: 'native' });
    node.writer.apply(TC_SERVICES);
  });
  afterAll(async () => {
    await node?.close();
  });
  beforeEach(() => node.flushState());

  for (const f of TC_FIXTURES.filter((x) => x.program === 'tc_ingress')) {
    it(`${f.id}: ${f.description}`, () => {
      expectFixture(node, f);
      expect(node.lastXdpVerdict(), 'what xdp_ingress did').toBe(xdpVerdictOf(f.id));
    });
  }
});

describeWith(['root', 'bpffs', 'netns'], 'xdp_ingress, then tc, on the DSR fixtures', () => {
  let node: DatapathNode;
  beforeAll(async () => {
    node = await datapathNode({ forwardingMode: 'dsr', acceleration: 'native' });
    node.writer.apply(dsrServices());
  });
  afterAll(async () => {
    await node?.close();
  });
  beforeEach(() => node.flushState());

  for (const f of DSR_FIXTURES.filter((x) => x.program === 'tc_ingress')) {
    it(`${f.id}: ${f.description}`, () => {
      expectFixture(node, f);
      expect(node.lastXdpVerdict(), 'what xdp_ingress did').toBe(xdpVerdictOf(f.id));
    });
  }
});
