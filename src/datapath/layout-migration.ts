// Upgrading a node whose pinned maps another ferry build made, in another layout or size.
// Each such map is loaded fresh, its entries copied through the converters of
// layout-history.ts, and the fresh map takes over the old one's pin before the new programs
// are attached. The old programs keep running on the old maps until their hooks are
// replaced, so once the new ones are attached a second pass copies the flows the old
// programs created meanwhile. A layout this build cannot convert is refused, with what to do.
import { renameSync } from 'node:fs';
import { u32Codec, type Codec } from '../ebpf/codec.js';
import { libbpf } from '../ebpf/libbpf.js';
import { BpfMap, MapType, UpdateFlag } from '../ebpf/map.js';
import { nextPinPath, type BpfObject, type PinnedMismatch } from '../ebpf/object.js';
import { ErrorCode, FerryError, errnoError, errnoName } from '../errors.js';
import { layoutHistory, OLDEST_UPGRADABLE_LAYOUT, type PastLayout } from './layout-history.js';
import { LAYOUT_VERSION, mapOptions, mapSpecs, type MapName } from './layouts.js';

/**
 * Maps the programs write (flows, bindings): the ones the second pass catches up, in this
 * order. Reply bindings first: a reply the new programs find no binding for reaches the
 * host, which resets the backend's end of the connection; a client packet whose flow entry
 * is not there yet is balanced again and takes its own binding back (the same backend and
 * port), so it loses nothing by waiting a little longer.
 */
const CATCH_UP_ORDER = ['nat4', 'ct4', 'frag4', 'lb4_affinity', 'lb4_sock_rev', 'lb6_affinity', 'lb6_sock_rev', 'nat6', 'ct6', 'frag6'];

/**
 * Which flow an entry is, of the maps whose keys the programs reuse in place: a new flow
 * on an old conntrack tuple (a reopened connection) is written over the old entry, and a
 * SNAT binding taken over from a finished flow is rewritten where it lies. A catch-up
 * pass copies such an entry again when the old programs made it another flow since its
 * copy. Conntrack: when the flow was created and where it went; a binding: its client and
 * frontend. A binding reused by the same client port towards the same frontend looks the
 * same and is not copied again. These fields have the same names in every past layout
 * (a test holds layout-history.ts to it), so an old entry is judged before it is
 * converted: a pass converts only what it copies.
 */
export const FLOW_IDENTITY_FIELDS: Partial<Record<MapName, readonly string[]>> = {
  ct4: ['createdNs', 'backendId', 'natPort'],
  nat4: ['clientAddr', 'clientPort', 'frontendAddr', 'frontendPort'],
  // An IPv6 flow's direction: its backend (client's) or its frontend (reply's).
  ct6: ['addr', 'port'],
  nat6: ['clientAddr', 'clientPort', 'frontendAddr', 'frontendPort'],
};

function flowIdentity(name: string): ((value: unknown) => string) | undefined {
  const fields = FLOW_IDENTITY_FIELDS[name as MapName];
  return fields && ((v) => fields.map((f) => String((v as Record<string, unknown>)[f])).join('/'));
}

type CopyKind = 'entries' | 'per-cpu' | 'map-references' | 'none';

interface Plan {
  path: string;
  kind: CopyKind;
  /** The pinned map's layout. */
  key: Codec<unknown>;
  value: Codec<unknown>;
  /** Converters from the pinned layout to the current one (empty: same layout, other size or type). */
  chain: PastLayout[];
  /** The layout the pinned map has: a past version, or the current one. */
  fromLayout: number;
}

export interface MigratedMap {
  map: string;
  fromLayout: number;
  /** Entries copied before the new programs were attached, and after. */
  copied: number;
  caughtUp: number;
  /** Entries that could not be copied (the new map is smaller, or refused them). */
  dropped: number;
}

interface OldMap {
  old: BpfMap<unknown, unknown>;
  fresh: BpfMap<unknown, unknown>;
  plan: Plan;
  /** Old keys already copied (hex), with the flow each was (FLOW_IDENTITY_FIELDS): a pass copies
   * only the others and those made another flow since, so that it is short. */
  copied: Map<string, string>;
}

export class LayoutMigration {
  private readonly plans = new Map<string, Plan>();
  private readonly oldMaps = new Map<string, OldMap>();
  readonly migrated: MigratedMap[] = [];

  /** For PinOptions.replace: plan one pinned map's migration, or refuse it loudly. */
  readonly decide = (m: PinnedMismatch): boolean => {
    this.plans.set(m.name, planFor(m));
    return true;
  };

  /** After an object's load: fill each fresh map from the old one and move it onto the old pin. */
  migrate(obj: BpfObject): void {
    for (const name of obj.pinReport.replaced) {
      const plan = this.plans.get(name);
      if (!plan) continue;
      const result: MigratedMap = { map: name, fromLayout: plan.fromLayout, copied: 0, caughtUp: 0, dropped: 0 };
      if (plan.kind !== 'none') {
        const spec = mapSpecs[name as MapName];
        const fresh = obj.map(name, spec.key as Codec<unknown>, spec.value as Codec<unknown>, mapOptions(name as MapName));
        const old = openOld(plan);
        const seen = new Map<string, string>();
        const { copied, dropped } = copyEntries(old, fresh, plan, UpdateFlag.Any, seen, flowIdentity(name));
        result.copied = copied;
        result.dropped = dropped;
        if (CATCH_UP_ORDER.includes(name)) this.oldMaps.set(name, { old, fresh, plan, copied: seen });
        else old.close();
      }
      try {
        renameSync(nextPinPath(plan.path), plan.path);
      } catch (e) {
        throw new FerryError({ code: ErrorCode.MapOp, op: `move the new ${name} onto ${plan.path}`, cause: (e as Error).message, hint: 'is bpffs mounted read-write?' });
      }
      this.migrated.push(result);
    }
  }

  /**
   * Copy what the old programs created since the last pass (entries the fresh maps lack,
   * and entries they reused in place for another flow). Called right before the new
   * programs are attached, which leaves few flows made in between, and right after, which
   * copies those.
   */
  catchUp(): void {
    for (const name of CATCH_UP_ORDER) {
      const m = this.oldMaps.get(name);
      if (!m) continue;
      const { copied, dropped } = copyEntries(m.old, m.fresh, m.plan, UpdateFlag.NoExist, m.copied, flowIdentity(name));
      const result = this.migrated.find((r) => r.map === name)!;
      result.caughtUp += copied;
      result.dropped += dropped;
    }
  }

  /** Are there flows of the previous programs still to copy (an upgrade across layouts or sizes)? */
  get catchingUp(): boolean {
    return this.oldMaps.size > 0;
  }

  close(): void {
    for (const { old } of this.oldMaps.values()) old.close();
    this.oldMaps.clear();
  }
}

function planFor(m: PinnedMismatch): Plan {
  const base = { path: m.path, chain: [], fromLayout: LAYOUT_VERSION };
  const spec = mapSpecs[m.name as MapName] as { key: Codec<unknown>; value: Codec<unknown>; scratch?: boolean } | undefined;
  // Nothing to copy: a ring buffer's events were for the old readers, scratch space lives
  // for one packet or is read again when missing (and may hold a struct of an older layout).
  if (m.info.type === MapType.Ringbuf || spec?.scratch) return { ...base, kind: 'none', key: u32Codec, value: u32Codec };
  if (!spec) throw unknownLayout(m, 'ferry does not know this map');
  if (m.info.type === MapType.HashOfMaps || m.info.type === MapType.ArrayOfMaps) return { ...base, kind: 'map-references', key: spec.key, value: spec.value };
  const kind: CopyKind = ([MapType.PercpuArray, MapType.PercpuHash, MapType.LruPercpuHash] as number[]).includes(m.info.type) ? 'per-cpu' : 'entries';
  if (!m.btf) throw unknownLayout(m, 'the pinned map carries no BTF');
  const matches = (key: Codec<unknown>, value: Codec<unknown>) =>
    key.size === m.info.keySize && value.size === m.info.valueSize && key.diff(m.btf!, m.info.btfKeyTypeId).length === 0 && value.diff(m.btf!, m.info.btfValueTypeId).length === 0;
  if (matches(spec.key, spec.value)) return { ...base, kind, key: spec.key, value: spec.value };
  const past = layoutHistory[m.name as MapName] ?? [];
  const at = past.findIndex((p) => matches(p.key, p.value));
  if (at < 0) throw unknownLayout(m, `its layout is neither layout ${LAYOUT_VERSION} nor one this ferry converts (from layout ${OLDEST_UPGRADABLE_LAYOUT} on)`);
  return { ...base, kind, key: past[at]!.key, value: past[at]!.value, chain: past.slice(at), fromLayout: past[at]!.version };
}

function unknownLayout(m: PinnedMismatch, why: string): FerryError {
  return new FerryError({
    code: ErrorCode.Layout,
    op: `upgrade pinned map ${m.path}`,
    cause: `${why}: ${m.diffs.join('; ')}`,
    hint: 'another ferry build made it that this one cannot upgrade from: roll out a release between the two first, or run "ferry uninstall --yes" on this node and start the agent again (flows through the node are cut)',
    detail: m.diffs.join('\n'),
  });
}

function openOld(plan: Plan): BpfMap<unknown, unknown> {
  const fd = libbpf().objGet(plan.path);
  if (fd < 0) throw errnoError(`open the old map ${plan.path}`, fd, ErrorCode.MapOp);
  return new BpfMap(fd, plan.key, plan.value, { ownsFd: true });
}

function convert(plan: Plan, key: unknown, value: unknown): { key: unknown; value: unknown } {
  let e = { key, value };
  for (const step of plan.chain) e = step.upgrade(e.key, e.value);
  return e;
}

/**
 * Copy every entry; with NoExist, only the ones the fresh map lacks. `seen`: old keys
 * copied before, with the flow each was (`identity`); such a key is skipped while the old
 * map holds the same flow under it. One the old programs made another flow since is copied
 * again over the fresh map's entry, unless the fresh map's entry is no longer the first
 * copy (the new programs made it a flow of their own, which they own now). The keys copied
 * now are added to it.
 */
function copyEntries(
  old: BpfMap<unknown, unknown>,
  fresh: BpfMap<unknown, unknown>,
  plan: Plan,
  flag: UpdateFlag,
  seen?: Map<string, string>,
  identity: (value: unknown) => string = () => '',
): { copied: number; dropped: number } {
  let copied = 0;
  let dropped = 0;
  const put = (key: unknown, value: unknown, how = flag): boolean => {
    try {
      fresh.update(key, value, how);
      copied++;
      return true;
    } catch (e) {
      if (!(how === UpdateFlag.NoExist && e instanceof FerryError && e.errno !== undefined && errnoName(e.errno) === 'EEXIST')) dropped++;
      return false;
    }
  };
  if (plan.kind === 'per-cpu') {
    for (const [k, perCpu] of old.entriesPerCpu()) {
      const converted = perCpu.map((v) => convert(plan, k, v));
      put(converted[0]!.key, converted.map((c) => c.value));
    }
  } else if (plan.kind === 'map-references') {
    // Reading a map of maps gives inner map ids; writing one takes file descriptors.
    for (const [k, id] of old.entries()) {
      const fd = libbpf().mapGetFdById(id as number);
      if (fd < 0) {
        dropped++;
        continue;
      }
      try {
        put(k, fd);
      } finally {
        libbpf().close(fd);
      }
    }
  } else {
    for (const [k, v] of old.entries()) {
      const id = seen && plan.key.encode(k).toString('hex');
      const flow = identity(v);
      const before = id ? seen.get(id) : undefined;
      if (before === flow) continue;
      const c = convert(plan, k, v);
      if (before !== undefined) {
        // Reused in place for another flow since its copy: written over the first copy,
        // unless the new programs made the key a flow of their own.
        const now = fresh.lookup(c.key);
        if ((now === undefined || identity(now) === before) && put(c.key, c.value, UpdateFlag.Any)) seen!.set(id!, flow);
        continue;
      }
      put(c.key, c.value);
      if (id) seen.set(id, flow);
    }
  }
  return { copied, dropped };
}
