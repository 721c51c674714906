import { describe, expect, it } from 'vitest';
import { structCodec, u32Codec } from '../../src/ebpf/codec.js';
import { ErrorCode, FerryError } from '../../src/errors.js';
import { BpfObject } from '../../src/ebpf/object.js';
import type { DatapathConfig } from '../../src/datapath/loader.js';
import { setForwardingConstants } from '../../src/datapath/object-settings.js';
import { testRun } from '../../src/ebpf/test-run.js';
import { buildPacket, eth, icmp, ipv4, tcp } from '../../src/packet/build.js';
import { TcVerdict, expectProgram } from '../../src/sandbox/packet-fixture.js';
import { bpfObject } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { counterCodec } from './codecs.js';

const ping = buildPacket([eth(), ipv4({ src: '10.0.10.2', dst: '10.0.10.1' }), icmp({ type: 8, rest: 0x00010001 })]);
const syn = buildPacket([eth(), ipv4({ src: '10.0.10.2', dst: '10.0.10.1' }), tcp({ sport: 1234, dport: 80 })]);

function sum(values: { packets: bigint; bytes: bigint }[]): { packets: bigint; bytes: bigint } {
  return values.reduce((a, v) => ({ packets: a.packets + v.packets, bytes: a.bytes + v.bytes }), { packets: 0n, bytes: 0n });
}

describeWith(['root'], 'loading BPF objects', () => {
  it('sets a .rodata constant by name, and the program obeys it', () => {
    const obj = BpfObject.open(bpfObject('tests/pkt_counter'));
    try {
      expect([...obj.rodataVariables().keys()]).toEqual(['match_protocol']);
      obj.setConstant('match_protocol', 1); // ICMP only
      obj.load();
      const prog = obj.program('count_packets');
      const counter = obj.map('pkt_counter', u32Codec, counterCodec);
      expectProgram(prog, { description: 'ICMP echo is counted and passed on', input: ping, expect: { verdict: TcVerdict.OK } });
      expectProgram(prog, { description: 'TCP is passed on, not counted', input: syn, expect: { verdict: TcVerdict.OK } });
      expect(sum(counter.lookupPerCpu(0)!)).toEqual({ packets: 1n, bytes: BigInt(ping.length) });
    } finally {
      obj.close();
    }
  });

  it('type-checks constants against BTF', () => {
    const obj = BpfObject.open(bpfObject('tests/pkt_counter'));
    try {
      expect(() => obj.setConstant('match_protocol', 256)).toThrow('set constant match_protocol: 256 is out of range 0..255 (C type const volatile __u8)');
      expect(() => obj.setConstant('match_protocol', 1.5)).toThrow(/not an integer/);
      expect(() => obj.setConstant('match_protocol', true)).toThrow(/a boolean needs a _Bool/);
      expect(() => obj.setConstant('no_such', 1)).toThrow(/no such const volatile .*known: match_protocol/);
    } finally {
      obj.close();
    }
  });

  it('refuses configuration after load', () => {
    const obj = BpfObject.open(bpfObject('tests/pkt_counter'));
    try {
      obj.load();
      expect(() => obj.setConstant('match_protocol', 1)).toThrow(/already loaded/);
    } finally {
      obj.close();
    }
  });

  it('finds programs and maps by name, with a list when the name is wrong', () => {
    const obj = BpfObject.open(bpfObject('tests/pkt_counter'));
    try {
      obj.load();
      expect(obj.programs().map((p) => [p.name, p.section])).toEqual([['count_packets', 'tc'], ['count_packets_xdp', 'xdp']]);
      expect(obj.mapNames()).toEqual(['pkt_counter']);
      expect(() => obj.program('nope')).toThrow(/no such program \(programs: count_packets, count_packets_xdp\)/);
      expect(() => obj.map('nope', u32Codec, counterCodec)).toThrow(/no such map \(maps: pkt_counter/);
    } finally {
      obj.close();
    }
  });

  it('reports a verifier rejection with the failing line of the log', () => {
    const obj = BpfObject.open(bpfObject('tests/unverifiable'));
    try {
      let err: unknown;
      try {
        obj.load();
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(FerryError);
      const fe = err as FerryError;
      expect(fe.code).toBe(ErrorCode.Verifier);
      expect(fe.message).toMatch(/^load program read_unchecked from .*unverifiable\.bpf\.o: the verifier rejected it:/);
      expect(fe.message).toContain('invalid access to packet, off=14 size=1');
      expect(fe.message).toContain('unverifiable.bpf.c:12');
      expect(fe.message).toMatch(/earlier lines omitted; the full log is in the error's detail/);
      expect(fe.detail).toMatch(/processed \d+ insns/);
    } finally {
      obj.close();
    }
  });

  it('refuses a codec whose layout differs from BTF, listing every difference', () => {
    const obj = BpfObject.open(bpfObject('tests/pkt_counter'));
    try {
      obj.load();
      const swapped = structCodec('ferry_counter', { bytes: { type: 'u64' }, packets: { type: 'u32' }, pad: { type: 'pad', length: 4 } });
      let err: FerryError | undefined;
      try {
        obj.map('pkt_counter', u32Codec, swapped);
      } catch (e) {
        err = e as FerryError;
      }
      expect(err?.code).toBe(ErrorCode.Layout);
      expect(err?.detail?.split('\n')).toEqual([
        'field bytes: offset BTF 8, codec 0',
        'field packets: offset BTF 0, codec 8',
        'field packets: size BTF 8, codec 4',
        'field pad: in the codec, missing from BTF',
      ]);
      const bigEndian = structCodec('ferry_counter', { packets: { type: 'u64' }, bytes: { type: 'u64' } });
      expect(() => obj.map('pkt_counter', u32Codec, bigEndian)).not.toThrow();
      const wrongOrder = structCodec('ferry_counter', { packets: { type: 'u64' }, bytes: { type: 'u32' }, hi: { type: 'be32' } });
      expect(() => obj.map('pkt_counter', u32Codec, wrongOrder)).toThrow(/field bytes: size BTF 8, codec 4; field hi: in the codec, missing from BTF/);
    } finally {
      obj.close();
    }
  });

  it('runs a fixture repeatedly as a benchmark and reports the kernel time per run', () => {
    const obj = BpfObject.open(bpfObject('tests/pkt_counter'));
    try {
      obj.load();
      const r = testRun(obj.program('count_packets'), { data: ping, repeat: 1000 });
      expect(r.retval).toBe(TcVerdict.OK);
      expect(r.durationNs).toBeGreaterThan(0);
      const counter = obj.map('pkt_counter', u32Codec, counterCodec);
      expect(sum(counter.lookupPerCpu(0)!).packets).toBe(1000n);
    } finally {
      obj.close();
    }
  });

  it('the datapath programs verify with headroom in every forwarding mode: under 15% of the verifier\'s instruction limit', () => {
    // An early warning: the programs still load up to 100%, but a change that gets close
    // has made the paths explode. The paths few packets take are global functions that
    // the verifier checks once each (__ferry_global, bpf/lib/common.h): inlined, tc_ingress
    // took 59% and xdp_ingress 41%; out of line, 3-4%. The node's settings are constants
    // the verifier prunes by, so each mode is its own check. tc_ingress is 13-15% since
    // IPv6 fragments (2026-12-07): a first fragment's L4 header lies 8 bytes further, and
    // every IPv6 path after the parse is checked for both offsets.
    for (const [file, programs] of [['tc', ['tc_ingress', 'tc_egress']], ['xdp', ['xdp_ingress']]] as const) {
      for (const forwardingMode of ['snat', 'dsr', 'hybrid'] as const) {
        for (const maglevTableSize of [0, 16381]) {
          const obj = BpfObject.open(bpfObject(file));
          try {
            setForwardingConstants(obj, { snatIPv4: '10.0.30.21', forwardingMode, maglevTableSize } as DatapathConfig);
            obj.collectVerifierStats();
            obj.load();
            for (const name of programs) {
              const s = obj.verifierStats(name);
              const what = `${name}, ${forwardingMode}, Maglev ${maglevTableSize}`;
              expect(s, what).toBeDefined();
              expect(s!.processed / s!.limit, `${what}: ${s!.processed} of ${s!.limit} instructions`).toBeLessThan(0.2);
            }
          } finally {
            obj.close();
          }
        }
      }
    }
  });

  it('names the missing file and how to build it', () => {
    expect(() => BpfObject.open('/nonexistent/x.bpf.o')).toThrow('open /nonexistent/x.bpf.o: no such file (run make build (ferry compile) first)');
  });
});
