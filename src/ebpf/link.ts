// Every attachment (tc filter, XDP, cgroup hook) is a Link: it knows where it is and
// detaches on close. Closing twice is harmless.
import { closeSync, openSync } from 'node:fs';
import { ErrorCode, FerryError, errnoError } from '../errors.js';
import { inNetns } from '../sys/netns.js';
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

  /** The link's file descriptor (owned by the link). */
  get fd(): number {
    if (!this.handle) throw new FerryError({ code: ErrorCode.Closed, op: `use ${this.what}`, cause: 'used after close' });
    return libbpf().linkFd(this.handle);
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

/**
 * An attachment made through netlink (tc filter, XDP program) rather than a kernel link:
 * it lives in the network namespace it was made in, so it keeps that namespace open and
 * detaches there, whichever namespace the caller is in then.
 */
export abstract class NetnsLink implements Link {
  readonly attachedAt = new Date();
  private open = true;
  /** The namespace of the thread that attached it. */
  private readonly netnsFd = openSync('/proc/thread-self/ns/net', 'r');

  constructor(
    readonly program: string,
    readonly where: string,
  ) {
    track(this);
  }

  abstract get what(): string;

  /** Take the attachment off (called in its network namespace). */
  protected abstract detach(): void;

  close(): void {
    if (!this.open) return;
    this.open = false;
    untrack(this);
    try {
      inNetns(`/proc/self/fd/${this.netnsFd}`, () => this.detach());
    } finally {
      closeSync(this.netnsFd);
    }
  }

  disown(): void {
    if (!this.open) return;
    this.open = false;
    untrack(this);
    closeSync(this.netnsFd);
  }
}
