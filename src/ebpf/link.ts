// Every attachment (tc filter, XDP, cgroup hook) is a Link: it knows where it is and
// detaches on close. Closing twice is harmless.
import { libbpf, type Pointer } from './libbpf.js';
import { track, untrack, type Resource } from './resources.js';

export interface Link extends Resource {
  /** Where it is attached: `tc ingress eth0 (ifindex 2)`, `cgroup connect4 /sys/fs/cgroup`. */
  readonly where: string;
  readonly program: string;
  readonly attachedAt: Date;
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

  close(): void {
    if (!this.handle) return;
    libbpf().linkDestroy(this.handle);
    this.handle = null;
    untrack(this);
  }
}
