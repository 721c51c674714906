// A read-only view of a datapath's pinned maps, for what runs beside the agent (the CLI,
// explain): typed by the same specs as the loader, each layout checked against the BTF the
// kernel keeps for the pinned map. Writes go through the few functions of datapath/ that
// need them (conntrack flush, the monitor switch), never through the view.
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Codec } from '../ebpf/codec.js';
import type { BpfMap } from '../ebpf/map.js';
import { assertBpffs, openPinnedMap } from '../ebpf/pinned.js';
import { ErrorCode, FerryError } from '../errors.js';
import { mapOptions, mapSpecs, type DatapathMaps, type MapKey, type MapName, type MapValue } from './layouts.js';

/** What a reader may do with a map. */
export type MapReader<K, V> = Pick<BpfMap<K, V>, 'name' | 'info' | 'perCpu' | 'maxEntries' | 'keyCodec' | 'lookup' | 'lookupPerCpu' | 'keys' | 'entries' | 'entriesPerCpu' | 'forEachRaw'>;

export type DatapathReader = { readonly [N in MapName]: MapReader<MapKey<N>, MapValue<N>> };

export class PinnedDatapath {
  private readonly opened = new Map<MapName, BpfMap<unknown, unknown>>();

  private constructor(readonly pinDir: string) {}

  /** The datapath pinned in `pinDir`; maps are opened when first read. */
  static open(pinDir: string): PinnedDatapath {
    assertBpffs(pinDir);
    if (!existsSync(pinDir)) {
      throw new FerryError({ code: ErrorCode.NotFound, op: `read the datapath in ${pinDir}`, cause: 'no such file or directory', hint: 'is the agent running on this node, or is its pin directory elsewhere (--pin-dir)?' });
    }
    return new PinnedDatapath(pinDir);
  }

  /** Open, use, close. */
  static with<T>(pinDir: string, fn: (dp: PinnedDatapath) => T): T {
    const dp = PinnedDatapath.open(pinDir);
    try {
      return fn(dp);
    } finally {
      dp.close();
    }
  }

  /** The datapath maps pinned here, by name. */
  pinned(): MapName[] {
    return readdirSync(this.pinDir).filter((f): f is MapName => f in mapSpecs).sort();
  }

  map<N extends MapName>(name: N): DatapathReader[N] {
    return this.handle(name) as unknown as DatapathReader[N];
  }

  /** Every map as a reader (opened on first use). */
  get maps(): DatapathReader {
    return new Proxy({} as DatapathReader, { get: (_t, name) => this.map(name as MapName) });
  }

  /** For the writers in datapath/ only (conntrack flush, the monitor switch). */
  writable<N extends MapName>(name: N): DatapathMaps[N] {
    return this.handle(name) as unknown as DatapathMaps[N];
  }

  private handle(name: MapName): BpfMap<unknown, unknown> {
    let m = this.opened.get(name);
    if (!m) {
      const spec = mapSpecs[name];
      m = openPinnedMap(join(this.pinDir, name), spec.key as Codec<unknown>, spec.value as Codec<unknown>, mapOptions(name));
      this.opened.set(name, m);
    }
    return m;
  }

  close(): void {
    for (const m of this.opened.values()) m.close();
    this.opened.clear();
  }
}
