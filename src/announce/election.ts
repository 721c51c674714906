// Who answers for each address, decided the same way by every agent from what all of them
// see: the candidates (nodes the policies select, with a device to answer on, and for
// externalTrafficPolicy Local a ready endpoint), which of them are alive (their heartbeat
// Lease renewed lately), and what each live node says it answers for (its claims, in the
// same Lease). A live candidate that already answers keeps the address, so a node that
// comes back takes nothing back (no flapping); otherwise the live candidate ranked first
// for the address by rendezvous hashing takes it, which spreads addresses over nodes and
// moves only the addresses of a node that goes. A node back from being cut off (it kept
// answering, unable to tell an API server outage from its own isolation) says so, and
// its claims yield to those of a node that was never cut off. Pure.

/**
 * A stable rank for (address, node), the same on every agent: FNV-1a over both, then
 * murmur3's finaliser, without which names that differ only in their last character
 * (node-1, node-2) rank alike across addresses and the spread is uneven.
 */
export function rank(address: string, node: string): number {
  let h = 0x811c9dc5;
  const s = `${address}|${node}`;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35) >>> 0;
  h ^= h >>> 16;
  return h >>> 0;
}

export interface ElectionInput {
  /** Address → the nodes that may answer for it. */
  candidates: ReadonlyMap<string, readonly string[]>;
  live: ReadonlySet<string>;
  /** Node → the addresses it says it answers for. */
  claims: ReadonlyMap<string, ReadonlySet<string>>;
  /** Nodes back from being cut off: their claims yield to the others'. */
  recovering?: ReadonlySet<string>;
}

const best = (address: string, nodes: readonly string[]) =>
  nodes.reduce<string | undefined>((a, n) => (a === undefined || rank(address, n) > rank(address, a) || (rank(address, n) === rank(address, a) && n < a) ? n : a), undefined);

/** Address → the node that answers for it (absent: no live candidate). */
export function elect(input: ElectionInput): Map<string, string> {
  const out = new Map<string, string>();
  for (const [address, candidates] of input.candidates) {
    const live = candidates.filter((n) => input.live.has(n));
    const holding = live.filter((n) => input.claims.get(n)?.has(address));
    const steady = holding.filter((n) => !input.recovering?.has(n));
    const owner = best(address, steady.length ? steady : holding.length ? holding : live);
    if (owner !== undefined) out.set(address, owner);
  }
  return out;
}
