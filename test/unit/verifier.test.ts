import { describe, expect, it } from 'vitest';
import { ErrorCode } from '../../src/errors.js';
import { loadError } from '../../src/ebpf/object.js';
import { parseVerifierFailure } from '../../src/ebpf/verifier.js';

const printed = `libbpf: prog 'read_unchecked': BPF program load failed: Permission denied
libbpf: prog 'read_unchecked': -- BEGIN PROG LOAD LOG --
0: R1=ctx() R10=fp0
; unsigned char *data = (void *)(long)skb->data; @ unverifiable.bpf.c:10
0: (61) r1 = *(u32 *)(r1 +76)         ; R1=pkt(r=0)
; return data[14] == 0x45 ? TC_ACT_SHOT : TC_ACT_OK; @ unverifiable.bpf.c:12
1: (71) r1 = *(u8 *)(r1 +14)
invalid access to packet, off=14 size=1, R1(id=0,off=14,r=0)
R1 offset is outside of the packet
processed 2 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0
-- END PROG LOAD LOG --
libbpf: prog 'read_unchecked': failed to load: -13
`;

describe('verifier log', () => {
  it('keeps the last relevant lines and drops the statistics', () => {
    const f = parseVerifierFailure(printed)!;
    expect(f.program).toBe('read_unchecked');
    expect(f.relevant.at(-1)).toBe('R1 offset is outside of the packet');
    expect(f.relevant).toContain('invalid access to packet, off=14 size=1, R1(id=0,off=14,r=0)');
    expect(f.relevant.some((l) => l.includes('unverifiable.bpf.c:12'))).toBe(true);
    expect(f.relevant.join('\n')).not.toMatch(/processed \d+ insns/);
    expect(f.omitted).toBe(1);
    expect(f.log).toContain('0: R1=ctx() R10=fp0');
  });

  it('returns nothing when no log was printed', () => {
    expect(parseVerifierFailure('libbpf: map create failed')).toBeUndefined();
  });

  it('a load interrupted by signals (EAGAIN) is not reported as a rejection', () => {
    const messages = printed.split('\n').map((text) => ({ level: 0, text: `${text}\n` }));
    const interrupted = loadError('tc.bpf.o', -11, messages);
    expect(interrupted.code).toBe(ErrorCode.ObjectLoad);
    expect(interrupted.message).toMatch(/interrupted by signals/);
    const rejected = loadError('tc.bpf.o', -13, messages);
    expect(rejected.code).toBe(ErrorCode.Verifier);
    expect(rejected.message).toMatch(/the verifier rejected it/);
  });
});
