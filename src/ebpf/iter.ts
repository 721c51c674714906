// BPF iterators (SEC("iter/udp") and the like): a program attached as a link, run over the
// kernel's objects each time the link is read. Socket iterators walk the sockets of the
// network namespace of the thread that starts the read (call read() inside inNetns).
import { closeSync, readSync } from 'node:fs';
import { ErrorCode, errnoError } from '../errors.js';
import { libbpf } from './libbpf.js';
import { BpfLink } from './link.js';
import type { Program } from './object.js';

export class BpfIterator {
  private constructor(private readonly link: BpfLink) {}

  static attach(program: Program): BpfIterator {
    const lb = libbpf();
    const h = lb.programAttachIter(program.handle);
    if (!h) throw errnoError(`attach iterator ${program.name}`, lb.errno(), ErrorCode.Attach);
    return new BpfIterator(new BpfLink(program.name, `iterator ${program.section.replace(/^iter\//, '')}`, h));
  }

  /** One pass over the objects: what the program wrote (bpf_seq_printf) during it. */
  read(): string {
    const lb = libbpf();
    const fd = lb.iterCreate(this.link.fd);
    if (fd < 0) throw errnoError(`read iterator ${this.link.program}`, fd, ErrorCode.Attach);
    const chunks: Buffer[] = [];
    try {
      const buf = Buffer.alloc(64 * 1024);
      for (;;) {
        const n = readSync(fd, buf, 0, buf.length, null);
        if (n <= 0) break;
        chunks.push(Buffer.from(buf.subarray(0, n)));
      }
    } finally {
      closeSync(fd);
    }
    return Buffer.concat(chunks).toString('utf8');
  }

  close(): void {
    this.link.close();
  }
}
