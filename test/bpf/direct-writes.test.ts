// tc_ingress writes a translated packet's headers directly (CTX_STORE_DIRECT,
// bpf/lib/ctx.h) rather than by bpf_skb_store_bytes. A tc program with any direct packet
// write gets a prologue from the verifier that makes a cloned skb's head private
// (bpf_skb_pull_data, which ferry itself never calls) before every run; TCP's own
// segments leaving the host are clones, so tc_egress, which sees all of them, must have
// no direct write. The loaded programs as the kernel runs them (bpftool's dump of the
// translated instructions) say which has the prologue.
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { libbpf } from '../../src/ebpf/libbpf.js';
import { kernelStruct } from '../../src/ebpf/skb-context.js';
import { datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { describeWith } from '../harness/requirements.js';

describeWith(['root', 'bpffs', 'netns', 'btf'], 'direct packet writes in the tc programs', () => {
  let node: DatapathNode;

  beforeAll(async () => {
    node = await datapathNode();
  }, 60_000);
  afterAll(async () => {
    await node?.close();
  });

  /** The helpers the loaded program calls, as bpftool names them. */
  const calls = (program: string): string[] => {
    const info = Buffer.alloc(kernelStruct('bpf_prog_info').size);
    if (libbpf().objGetInfoByFd(node.program(program).fd, info) < 0) throw new Error(`no info for ${program}`);
    const id = info.readUInt32LE(kernelStruct('bpf_prog_info').offset('id'));
    const insns = JSON.parse(execFileSync('bpftool', ['-j', 'prog', 'dump', 'xlated', 'id', String(id)], { encoding: 'utf8', maxBuffer: 256 << 20 })) as Array<{ disasm: string }>;
    return insns.flatMap((i) => /\) call ([a-z_0-9]+)/.exec(i.disasm)?.[1] ?? []);
  };

  it('tc_ingress writes directly: the verifier added the prologue that unclones', () => {
    expect(calls('tc_ingress')).toContain('bpf_skb_pull_data');
  });

  it('tc_egress has no direct write, so no prologue: cloned segments go by untouched', () => {
    const egress = calls('tc_egress');
    expect(egress).not.toContain('bpf_skb_pull_data');
    expect(egress).toContain('bpf_skb_store_bytes'); // it still rewrites replies, by the helper
  });
});
