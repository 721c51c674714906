// Keys the agent keeps for as long as an object lives (Service names, frontend ids, cache
// keys) are built by concatenation, which V8 keeps as a tree of 32-byte "cons" nodes
// over the parts. trim() flattens such a string in place, and the collector then lets go
// of the nodes. Its result is used here, so the optimizing compiler keeps the call (an
// unused Number(s) or charCodeAt() may be optimized away once inlined). At 50k Services
// the keys take about a third of the memory (test/unit/compact-state.test.ts measures it).

/** `s` flattened: for a concatenated string that is kept, not one dropped soon. */
export function flat(s: string): string {
  const t = s.trim();
  return t.length === s.length ? t : s; // keys have no outer spaces; if one had, it keeps them
}
