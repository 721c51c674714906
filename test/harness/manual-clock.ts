// A clock that moves only when the test says so: timers fire in due order on advance().
import type { Clock, Timer } from '../../src/clock.js';

interface Pending {
  at: number;
  fn: () => void;
  every?: number;
  id: number;
}

export class ManualClock implements Clock {
  private t: number;
  private seq = 0;
  private readonly pending = new Map<number, Pending>();

  constructor(start = 1_700_000_000_000) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  setTimeout(fn: () => void, ms: number): Timer {
    return this.add(fn, ms);
  }

  setInterval(fn: () => void, ms: number): Timer {
    return this.add(fn, ms, ms);
  }

  clearTimeout(t: Timer): void {
    this.pending.delete((t as { id: number }).id);
  }

  clearInterval(t: Timer): void {
    this.clearTimeout(t);
  }

  private add(fn: () => void, ms: number, every?: number): Timer {
    const id = ++this.seq;
    this.pending.set(id, { at: this.t + Math.max(0, ms), fn, every, id });
    return { id, unref: () => undefined } as Timer;
  }

  /** Timers waiting. */
  get waiting(): number {
    return this.pending.size;
  }

  /** Move time on by `ms`, firing every timer due on the way (and letting promises settle). */
  async advance(ms: number): Promise<void> {
    const end = this.t + ms;
    for (;;) {
      const next = [...this.pending.values()].filter((p) => p.at <= end).sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (!next) break;
      this.t = next.at;
      if (next.every) next.at += next.every;
      else this.pending.delete(next.id);
      next.fn();
      await new Promise((r) => setImmediate(r));
    }
    this.t = end;
    await new Promise((r) => setImmediate(r));
  }
}
