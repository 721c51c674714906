// bench/pps-node.ts's packet source and sink: the injector writes valid frames (checksums a
// netfilter conntrack would accept, source ports in order) and tail-calls a forwarder, and
// the sink counts only what arrives translated. The benchmark has the kernel send the
// frames (live-frames mode); here each is a test run, sent on a real device after. Where the
// kernel refuses live frames, the sink's recycler is the source: frames go round.
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { be16Constant, be32Constant, injectorSettings, type InjectedFlow } from '../../bench/inject-frame.js';
import { defaultObjectsDir } from '../../src/datapath/loader.js';
import { u32Codec, u64Codec } from '../../src/ebpf/codec.js';
import { attachXdpDevice } from '../../src/ebpf/link-xdp.js';
import { ifindexOf } from '../../src/ebpf/link-tc.js';
import { BpfObject } from '../../src/ebpf/object.js';
import { runLiveFrames, testRun } from '../../src/ebpf/test-run.js';
import { Testbed, type Host } from '../../src/sandbox/netns/testbed.js';
import { inNetns } from '../../src/sys/netns.js';
import { sendFramesOnce } from '../../src/sys/packet-socket.js';
import { describeWith } from '../harness/requirements.js';

const XDP_PASS = 2;
const XDP_TX = 3;
const obj = (name: string) => BpfObject.open(join(defaultObjectsDir(), 'tests', `${name}.bpf.o`));
const flow = (proto: 'udp' | 'tcp'): InjectedFlow => ({ proto, srcMac: '02:00:00:00:00:01', dstMac: '02:00:00:00:00:02', saddr: '192.0.2.10', daddr: '10.0.40.2', dport: 30900 });

/** The Internet checksum of `parts`, written out here rather than taken from bench/inject-frame.ts. */
function internetChecksumOk(...parts: Buffer[]): boolean {
  const all = Buffer.concat(parts);
  let sum = 0;
  for (let i = 0; i < all.length; i += 2) sum += (all[i]! << 8) | (all[i + 1] ?? 0);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return sum === 0xffff;
}

let open: Array<{ close(): void }> = [];
afterEach(() => {
  for (const o of open.reverse()) o.close();
  open = [];
});

const loadInjector = (f: InjectedFlow) => {
  const inj = obj('xdp_inject');
  open.push(inj);
  for (const [name, v] of Object.entries(injectorSettings(f))) inj.setConstant(name, v);
  inj.load();
  return inj;
};

/** The floor forwarder, readdressing to 10.0.40.3:9000 (and from 10.0.40.2 when `translateSource`). */
const loadBounce = (translateSource: boolean) => {
  const bounce = obj('xdp_bounce');
  open.push(bounce);
  bounce.setConstant('dst_addr', be32Constant('10.0.40.3'));
  bounce.setConstant('dst_port', be16Constant(9000));
  if (translateSource) bounce.setConstant('src_addr', be32Constant('10.0.40.2'));
  bounce.load();
  return bounce;
};

describeWith(['root', 'bpffs'], 'the pps source: frames', () => {
  for (const proto of ['udp', 'tcp'] as const) {
    it(`writes ${proto} frames with valid checksums over successive source ports, into a dirty page`, () => {
      const inj = loadInjector(flow(proto));
      const ports: number[] = [];
      for (let i = 0; i < 3; i++) {
        // A page the previous run's dataplane wrote into: the injector must rewrite all of it.
        const r = testRun(inj.program('xdp_inject'), { data: Buffer.alloc(60, 0xa5) });
        expect(r.retval).toBe(XDP_PASS); // no forwarder in the tail-call slot
        const f = r.data;
        expect(f.subarray(0, 12).toString('hex')).toBe('020000000002020000000001');
        expect(f.readUInt16BE(12)).toBe(0x0800);
        const ip = f.subarray(14, 34);
        expect([ip[0], ip[9], ip.readUInt16BE(2), ip.readUInt16BE(6)]).toEqual([0x45, proto === 'udp' ? 17 : 6, 46, 0]);
        expect([...ip.subarray(12, 16)].join('.')).toBe('192.0.2.10');
        expect([...ip.subarray(16, 20)].join('.')).toBe('10.0.40.2');
        expect(internetChecksumOk(ip)).toBe(true);
        const l4 = f.subarray(34, 60);
        expect(l4.readUInt16BE(2)).toBe(30900);
        if (proto === 'tcp') expect([l4[12], l4[13]]).toEqual([0x50, 0x02]);
        else expect(l4.readUInt16BE(4)).toBe(26);
        const pseudo = Buffer.concat([ip.subarray(12, 20), Buffer.from([0, ip[9]!, 0, 26])]);
        expect(internetChecksumOk(pseudo, l4)).toBe(true);
        ports.push(l4.readUInt16BE(0));
      }
      expect(ports).toEqual([1024, 1025, 1026]);
    });
  }
});

describeWith(['root', 'bpffs'], 'the floor forwarder (xdp_bounce)', () => {
  it('readdresses both ends and keeps the IPv4 header checksum right', () => {
    const inj = loadInjector(flow('udp'));
    const frame = testRun(inj.program('xdp_inject'), { data: Buffer.alloc(60) }).data;
    const bounce = loadBounce(true);
    const out = testRun(bounce.program('xdp_bounce'), { data: frame });
    expect(out.retval).toBe(3); // XDP_TX
    const ip = out.data.subarray(14, 34);
    expect([[...ip.subarray(12, 16)].join('.'), [...ip.subarray(16, 20)].join('.'), out.data.readUInt16BE(36)]).toEqual(['10.0.40.2', '10.0.40.3', 9000]);
    expect(internetChecksumOk(ip)).toBe(true);
  });
});

describeWith(['root', 'bpffs', 'netns'], 'the pps source: frames through the forwarder to the sink, on a real device', () => {
  let tb: Testbed;
  let a: Host;
  let b: Host;
  beforeEach(async () => {
    tb = await Testbed.create();
    a = await tb.addHost('a');
    b = await tb.addHost('b');
    await tb.link({ host: a, ifname: 'eth0', address: '10.0.40.2/24' }, { host: b, ifname: 'eth0', address: '10.0.40.3/24' });
  });
  afterEach(async () => {
    for (const o of open.reverse()) o.close();
    open = [];
    await tb?.destroy();
  });

  /**
   * Frames the injector wrote and xdp_bounce forwarded (translating the source or not), each
   * a test run of its own, then sent from a's device; what b's sink counted. (The benchmark
   * has the kernel send them itself, in live-frames mode, which some kernels refuse with
   * EPERM: bench/pps-node.ts says so when it is.)
   */
  const sendThroughBounce = (translateSource: boolean, frames: number): number => {
    const sink = obj('xdp_sink');
    open.push(sink);
    sink.setConstant('sink_addr', be32Constant('10.0.40.3'));
    sink.setConstant('sink_port', be16Constant(9000));
    sink.setConstant('from_addr', be32Constant('10.0.40.2'));
    sink.load();
    open.push(inNetns(b.netns, () => attachXdpDevice(sink.program('xdp_sink'), 'eth0', 'native')));
    const bounce = loadBounce(translateSource);
    const inj = loadInjector(flow('udp'));
    inj.map('next', u32Codec, u32Codec).update(0, bounce.program('xdp_bounce').fd);
    const out = Array.from({ length: frames }, () => testRun(inj.program('xdp_inject'), { data: Buffer.alloc(60) }));
    expect(out.every((r) => r.retval === XDP_TX)).toBe(true);
    inNetns(a.netns, () => sendFramesOnce(ifindexOf('eth0'), out.map((r) => r.data)));
    return (sink.map('sunk', u32Codec, u64Codec).lookupPerCpu(0) ?? []).reduce((n, x) => n + Number(x), 0);
  };

  it('every frame is forwarded and counted once', () => {
    expect(sendThroughBounce(true, 500)).toBe(500);
  });

  it('the sink does not count frames that still carry the client as their source', () => {
    expect(sendThroughBounce(false, 500)).toBe(0);
  });

  /**
   * The circulating source (for kernels that refuse live frames): a's device bounces what
   * arrives (the forwarder), b's recycles what arrives translated back to a as the next
   * client frame. Seeded with `seeds` frames sent from b, they go round until `loop`'s
   * circulate slot is cleared; then each is drained once.
   */
  it('the recycler keeps seeded frames going round through the forwarder, and drains every one', async () => {
    const recycler = obj('xdp_sink');
    open.push(recycler);
    recycler.setConstant('sink_addr', be32Constant('10.0.40.3'));
    recycler.setConstant('sink_port', be16Constant(9000));
    recycler.setConstant('from_addr', be32Constant('10.0.40.2'));
    for (const [name, v] of Object.entries(injectorSettings(flow('tcp')))) recycler.setConstant(name, v);
    recycler.load();
    const loop = recycler.map('loop', u32Codec, u64Codec);
    loop.update(0, 1n);
    const bounce = loadBounce(true);
    open.push(inNetns(a.netns, () => attachXdpDevice(bounce.program('xdp_bounce'), 'eth0', 'native')));
    open.push(inNetns(b.netns, () => attachXdpDevice(recycler.program('xdp_recycle'), 'eth0', 'native')));
    const sunk = () => (recycler.map('sunk', u32Codec, u64Codec).lookupPerCpu(0) ?? []).reduce((n, x) => n + Number(x), 0);
    // Seeds of another shape (UDP, 74 bytes): the recycler makes each the benchmark's frame.
    const inj = loadInjector(flow('udp'));
    const seeds = Array.from({ length: 8 }, () => Buffer.concat([testRun(inj.program('xdp_inject'), { data: Buffer.alloc(60) }).data, Buffer.alloc(14)]));
    inNetns(b.netns, () => sendFramesOnce(ifindexOf('eth0'), seeds));
    await new Promise((r) => setTimeout(r, 200));
    const went = sunk();
    expect(went).toBeGreaterThan(1000); // 8 seeds, each round a count
    loop.update(0, 0n);
    await new Promise((r) => setTimeout(r, 100));
    expect(loop.lookup(1)).toBe(8n); // every frame still going round, dropped once
    const settled = sunk();
    await new Promise((r) => setTimeout(r, 50));
    expect(sunk()).toBe(settled); // nothing goes round any more
  });

  it('refuses a frame count out of range', () => {
    const inj = loadInjector(flow('udp'));
    expect(() => runLiveFrames(inj.program('xdp_inject'), { data: Buffer.alloc(60), ifindex: 1, frames: 0 })).toThrow(/frames 0/);
  });
});
