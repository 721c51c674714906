// What a benchmark deletes before each run of a "new flow" so that the run really times
// one: the flow's conntrack entry and its reply entries (nat4: the SNAT binding of a flow to
// a remote backend, the reverse translation of a local one). An entry left behind is taken
// back as the flow's own (the path of a flow whose conntrack entry was evicted): a lookup
// and a write in place instead of an insert (for SNAT, a lookup that misses, the host's
// sockets asked and an LRU insert), so keeping it times a cheaper path than a new client's.
import type { Ct4Key } from '../src/datapath/layouts.js';
import { Ct6Dir, type Ct6Key } from '../src/datapath/layouts6.js';
import type { DatapathNode } from '../src/sandbox/datapath-node.js';

/** After one run of the flow: a function that forgets it (its entry and its bindings). */
export function flowForgetter(node: DatapathNode, key: Ct4Key): () => void {
  const maps = node.dp.maps;
  const bindings = maps.nat4.entries()
    .filter(([, v]) => v.clientAddr === key.saddr && v.clientPort === key.sport)
    .map(([k]) => k);
  return () => {
    maps.ct4.delete(key);
    for (const b of bindings) maps.nat4.delete(b);
  };
}

/** The same for an IPv6 flow: its client's entry in ct6, and its other entries (a local
 * flow's reply direction in ct6, an SNATed flow's binding in nat6). */
export function flowForgetter6(node: DatapathNode, key: Ct6Key): () => void {
  const maps = node.dp.maps;
  const replies = maps.ct6.entries()
    .filter(([k]) => k.dir === Ct6Dir.CT6_DIR_REPLY && k.daddr === key.saddr && k.dport === key.sport)
    .map(([k]) => k);
  const bindings = maps.nat6.entries()
    .filter(([, v]) => v.clientAddr === key.saddr && v.clientPort === key.sport)
    .map(([k]) => k);
  return () => {
    maps.ct6.delete(key);
    for (const r of replies) maps.ct6.delete(r);
    for (const b of bindings) maps.nat6.delete(b);
  };
}
