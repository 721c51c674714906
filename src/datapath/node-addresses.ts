// The cluster's node addresses in the datapath (node4_addrs): a DSR option naming one of
// them is a NodePort on that node. Written from the Nodes the agent watches.
import type { DatapathMaps } from './layouts.js';

export class NodeAddressWriter {
  private readonly written = new Set<string>();

  constructor(private readonly map: DatapathMaps['node4_addrs']) {
    for (const a of map.keys()) this.written.add(a);
  }

  /** Make the map hold exactly `addresses`. Returns what changed. */
  apply(addresses: Iterable<string>): { added: number; removed: number } {
    const want = new Set(addresses);
    const added = [...want].filter((a) => !this.written.has(a));
    const removed = [...this.written].filter((a) => !want.has(a));
    if (added.length > 0) this.map.updateBatch(added.map((a) => [a, { flags: 0 }]));
    if (removed.length > 0) this.map.deleteBatch(removed);
    for (const a of added) this.written.add(a);
    for (const a of removed) this.written.delete(a);
    return { added: added.length, removed: removed.length };
  }
}
