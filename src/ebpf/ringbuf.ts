// Reading a BPF ring buffer: poll() hands each record to the callback, synchronously.
import { ErrorCode, FerryError, errnoError, errnoName } from '../errors.js';
import { libbpf, type Pointer } from './libbpf.js';
import { track, untrack, type Resource } from './resources.js';

export class RingBufferReader implements Resource {
  private rb: Pointer | null;

  constructor(readonly name: string, private readonly fd: number, onRecord: (data: Buffer) => void) {
    const lb = libbpf();
    const rb = lb.ringBufferNew(fd, onRecord);
    if (!rb) throw errnoError(`open ring buffer ${name}`, lb.errno(), ErrorCode.MapOp);
    this.rb = rb;
    track(this);
  }

  get what(): string {
    return `ring buffer ${this.name}`;
  }

  /** Deliver what is there, waiting up to timeoutMs for the first record. Returns how many. */
  poll(timeoutMs: number): number {
    if (!this.rb) throw new FerryError({ code: ErrorCode.Closed, op: `poll ${this.name}`, cause: 'used after close' });
    const n = libbpf().ringBufferPoll(this.rb, timeoutMs);
    if (n < 0 && errnoName(n) !== 'EINTR') throw errnoError(`poll ${this.name}`, n, ErrorCode.MapOp);
    return Math.max(0, n);
  }

  close(): void {
    if (!this.rb) return;
    libbpf().ringBufferFree(this.rb);
    this.rb = null;
    libbpf().close(this.fd);
    untrack(this);
  }
}
