// XDP attachment as a BPF link (detached when the link closes).
import { ErrorCode, errnoError } from '../errors.js';
import { libbpf } from './libbpf.js';
import { ifindexOf } from './link-tc.js';
import { BpfLink } from './link.js';
import type { Program } from './object.js';

export function attachXdp(program: Program, ifname: string): BpfLink {
  const ifindex = ifindexOf(ifname);
  const where = `xdp ${ifname} (ifindex ${ifindex})`;
  const lb = libbpf();
  const h = lb.programAttachXdp(program.handle, ifindex);
  if (!h) throw errnoError(`attach ${program.name} to ${where}`, lb.errno(), ErrorCode.Attach);
  return new BpfLink(program.name, where, h);
}
