// Every attachment (tc filter, XDP, cgroup hook) is a Link: it knows where it is and
// detaches on close. Closing twice is harmless.
import { ErrorCode, FerryError, errnoError } from '../errors.js';
import { libbpf, type Pointer } from './libbpf.js';
import { track, untrack, type Resource } from './resources.js';

export interface Link extends Resource {
  /** Where it is attached: `tc ingress eth0 (ifindex 2)`, `cgroup connect4 /sys/fs/cgroup`. */
  readonly where: string;
  readonly program: string;
  readonly attachedAt: Date;
  /** Let go of the link without detaching it: it stays attached after this process exits
   * (a tc filter always does; a kernel link only if pinned). */
  disown(): void;
}

/** A kernel BPF link (XDP, cgroup): detaching is destroying the link. */
export class BpfLink implements Link {
  readonly attachedAt = new Date();
  private handle: Pointer | null;

  constructor(readonly program: string, readonly where: string, handle: Pointer) {
    this.handle = handle;
    track(this);
  }

  get what(): string {
    return `link ${this.program} at ${this.where}`;
  }

  /** Pin at a bpffs path, so the attachment outlives this process. */
  pin(path: string): void {
    if (!this.handle) throw new FerryError({ code: ErrorCode.Closed, op: `pin ${this.what}`, cause: 'used after close' });
    const rc = libbpf().linkPin(this.handle, path);
    if (rc < 0) throw errnoError(`pin ${this.what} at ${path}`, rc, ErrorCode.Attach);
  }

  close(): void {
    if (!this.handle) return;
    libbpf().linkDestroy(this.handle);
    this.handle = null;
    untrack(this);
  }

  disown(): void {
    if (!this.handle) return;
    libbpf().linkDisconnect(this.handle);
    libbpf().linkDestroy(this.handle);
    this.handle = null;
    untrack(this);
  }
}
