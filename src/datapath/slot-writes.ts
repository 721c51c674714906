// The backend slots one sync writes, kept compact (see SlotWrites).
import type { Lb4Key } from './layouts.js';

/**
 * Backend slots to write: the i-th is slot slots[i] of the frontend whose master key is
 * masters[i], holding backend ids[i]. Parallel arrays, not a key and a value per slot: a
 * first sync at 50k Services writes half a million slots.
 */
export class SlotWrites {
  readonly masters: Lb4Key[] = [];
  readonly slots: number[] = [];
  readonly ids: number[] = [];

  push(master: Lb4Key, slot: number, id: number): void {
    this.masters.push(master);
    this.slots.push(slot);
    this.ids.push(id);
  }

  get length(): number {
    return this.slots.length;
  }
}
