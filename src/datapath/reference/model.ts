// A small reference model of tc_ingress's per-packet decision, written from the design,
// not from the C: service lookup, wildcard, backend choice by flow hash, conntrack reuse,
// SNAT port choice, a local flow's client port at the pod (remapped where another flow
// holds the tuple). The differential tests run random packets through both and demand
// the same answer.
import { BackendFlags, LbFlags, LocalRemap, type Lb4Backend, type Lb4Service } from '../layouts.js';
import { ipv4InCidr } from '../../packet/addr.js';
import { maglevTable } from '../maglev.js';
import { flowHash4 } from './hash.js';


export interface Tuple {
  saddr: string;
  daddr: string;
  sport: number;
  dport: number;
  proto: number;
}

export type Decision =
  | { verdict: 'pass' }
  | { verdict: 'drop'; reason: 'unknown-port' | 'backend-missing' | 'nat-exhausted' | 'no-local-backend' | 'source-range' }
  | { verdict: 'reject' }
  /** podPort: the client port the pod sees (the client's own, or the one its tuple was remapped to). */
  | { verdict: 'local'; backendId: number; backend: Lb4Backend; podPort: number }
  | { verdict: 'remote'; backendId: number; backend: Lb4Backend; snatAddr: string; snatPort: number; snatPortCandidates: 'client' | 'any' }
  | { verdict: 'reply-remote'; client: { addr: string; port: number }; frontend: { addr: string; port: number } };

export interface ServiceTables {
  /** lb4_services, keyed by serviceKey(). */
  services: Map<string, Lb4Service>;
  backends: Map<number, Lb4Backend>;
  /** loadBalancerSourceRanges: CIDRs allowed, by rev-NAT id. */
  sourceRanges?: Map<number, string[]>;
}

export function serviceKey(address: string, port: number, proto: number, scope: number, slot: number): string {
  return `${address}|${port}|${proto}|${scope}|${slot}`;
}

export interface ModelConfig {
  seed: number;
  /** Maglev table size the datapath runs with (0: off). */
  maglevTableSize?: number;
  snatIPv4: string;
  snatPortMin: number;
  snatPortMax: number;
}

interface CtState {
  backendId: number;
  /** remote: the SNAT port; local: the client port the pod sees. */
  snatPort: number;
}

/** How many client ports a local flow on a held tuple tries (the C's, BTF-checked). */
export const LOCAL_REMAP_TRIES = LocalRemap.LOCAL_REMAP_TRIES;

/**
 * The `i`th client port a local flow tries when another flow holds its tuple at the pod:
 * in the class of the client's own port (netfilter's: 1-511, 600-1023, 1024-65535), in an
 * order the flow's hash sets (bpf/lib/contest.h).
 */
export function localRemapPort(clientPort: number, hash: number, i: number): number {
  const [min, span] = clientPort < 512 ? [1, 511] : clientPort < 1024 ? [600, 1024 - 600] : [1024, 65536 - 1024];
  return min + (((hash + i * ((hash >>> 16) | 1)) >>> 0) % span);
}

const SCOPE = 0;

export class ReferenceModel {
  private readonly ct = new Map<string, CtState>();
  private readonly maglev = new Map<string, Uint32Array>();
  /** nat4 reply keys of SNATed flows: backend|bport|natport|proto → client and frontend. */
  private readonly nat = new Map<string, { client: { addr: string; port: number }; frontend: { addr: string; port: number } }>();
  /** Local flows' reply tuples at the pod: backend|bport|client|port|proto → the flow holding it (client port, frontend). */
  private readonly local = new Map<string, string>();

  constructor(
    private readonly tables: ServiceTables,
    private readonly cfg: ModelConfig,
  ) {}

  private master(addr: string, port: number, proto: number): Lb4Service | undefined {
    return this.tables.services.get(serviceKey(addr, port, proto, SCOPE, 0));
  }

  private natKey(b: Lb4Backend, natPort: number, proto: number): string {
    return `${b.address}|${b.port}|${natPort}|${proto}`;
  }

  private localKey(b: Lb4Backend, client: string, port: number, proto: number): string {
    return `${b.address}|${b.port}|${client}|${port}|${proto}`;
  }

  /**
   * The decision for one TCP/UDP packet arriving on the external device. For 'remote',
   * `snatPort` is what the model expects when it can know it (the client's port, free);
   * otherwise 'any' free port in range is right, and the caller records the one used.
   */
  decide(t: Tuple): Decision {
    // Replies to SNATed flows first.
    if (t.daddr === this.cfg.snatIPv4) {
      const n = this.nat.get(`${t.saddr}|${t.sport}|${t.dport}|${t.proto}`);
      if (n) return { verdict: 'reply-remote', client: n.client, frontend: n.frontend };
    }
    const svc = this.master(t.daddr, t.dport, t.proto);
    if (svc && svc.flags & LbFlags.LB_F_SOURCE_RANGES && !(this.tables.sourceRanges?.get(svc.revNatId) ?? []).some((c) => ipv4InCidr(t.saddr, c))) {
      return { verdict: 'drop', reason: 'source-range' };
    }
    if (!svc) {
      const wild = this.master(t.daddr, 0, 0);
      return wild && wild.flags & LbFlags.LB_F_WILDCARD ? { verdict: 'drop', reason: 'unknown-port' } : { verdict: 'pass' };
    }
    if (svc.count === 0) return svc.flags & LbFlags.LB_F_DROP_WHEN_EMPTY ? { verdict: 'drop', reason: 'no-local-backend' } : { verdict: 'reject' };
    const ctKey = `${t.saddr}|${t.daddr}|${t.sport}|${t.dport}|${t.proto}`;
    const known = this.ct.get(ctKey);
    if (known && this.tables.backends.has(known.backendId)) {
      const backend = this.tables.backends.get(known.backendId)!;
      if (backend.flags & BackendFlags.LB_BACKEND_F_LOCAL) return { verdict: 'local', backendId: known.backendId, backend, podPort: known.snatPort };
      return { verdict: 'remote', backendId: known.backendId, backend, snatAddr: this.cfg.snatIPv4, snatPort: known.snatPort, snatPortCandidates: 'client' };
    }
    const hash = flowHash4(t.saddr, t.daddr, t.sport, t.dport, t.proto, this.cfg.seed);
    const id = this.maglevChoice(t, svc, hash) || (this.tables.services.get(serviceKey(t.daddr, t.dport, t.proto, SCOPE, (hash % svc.count) + 1))?.backendId ?? 0);
    const backend = this.tables.backends.get(id);
    if (!backend) return { verdict: 'drop', reason: 'backend-missing' };
    if (backend.flags & BackendFlags.LB_BACKEND_F_LOCAL) {
      // Every flow here is live and not closing: a tuple another flow holds (another
      // frontend's, or a remapped one's) is remapped, to the first try no flow holds.
      const holder = this.local.get(this.localKey(backend, t.saddr, t.sport, t.proto));
      let podPort = t.sport;
      if (holder !== undefined && holder !== `${t.sport}|${t.daddr}|${t.dport}`) {
        const tries = Array.from({ length: LOCAL_REMAP_TRIES }, (_, i) => localRemapPort(t.sport, hash, i));
        podPort = tries.find((port) => !this.local.has(this.localKey(backend, t.saddr, port, t.proto))) ?? 0;
        if (!podPort) return { verdict: 'drop', reason: 'nat-exhausted' };
      }
      this.ct.set(ctKey, { backendId: id, snatPort: podPort });
      this.local.set(this.localKey(backend, t.saddr, podPort, t.proto), `${t.sport}|${t.daddr}|${t.dport}`);
      return { verdict: 'local', backendId: id, backend, podPort };
    }
    const clientPortFree =
      t.sport >= this.cfg.snatPortMin && t.sport <= this.cfg.snatPortMax && !this.nat.has(this.natKey(backend, t.sport, t.proto));
    return {
      verdict: 'remote',
      backendId: id,
      backend,
      snatAddr: this.cfg.snatIPv4,
      snatPort: clientPortFree ? t.sport : 0,
      snatPortCandidates: clientPortFree ? 'client' : 'any',
    };
  }

  /** Maglev: the table built from the frontend's slots, as the writer builds it. */
  private maglevChoice(t: Tuple, svc: Lb4Service, hash: number): number {
    const m = this.cfg.maglevTableSize ?? 0;
    if (!m || !svc.backendId) return 0;
    const ids = Array.from({ length: svc.count }, (_, i) => this.tables.services.get(serviceKey(t.daddr, t.dport, t.proto, SCOPE, i + 1))?.backendId ?? 0);
    const key = ids.join(',');
    let table = this.maglev.get(key);
    if (!table) {
      table = maglevTable(ids.map((id) => { const b = this.tables.backends.get(id)!; return `${b.address}:${b.port}/${b.proto}`; }), m);
      this.maglev.set(key, table);
    }
    return ids[table[hash % m]!]!;
  }

  /** Is `port` an acceptable SNAT port for a new binding to this backend? */
  natPortAcceptable(backend: Lb4Backend, port: number, proto: number): boolean {
    return port >= this.cfg.snatPortMin && port <= this.cfg.snatPortMax && !this.nat.has(this.natKey(backend, port, proto));
  }

  /** Record what the datapath did for a remote flow (the port, when the model could not know it). */
  commitRemote(t: Tuple, d: Extract<Decision, { verdict: 'remote' }>, port: number): void {
    const ctKey = `${t.saddr}|${t.daddr}|${t.sport}|${t.dport}|${t.proto}`;
    if (this.ct.has(ctKey) && this.tables.backends.has(this.ct.get(ctKey)!.backendId)) return;
    this.ct.set(ctKey, { backendId: d.backendId, snatPort: port });
    this.nat.set(this.natKey(d.backend, port, t.proto), { client: { addr: t.saddr, port: t.sport }, frontend: { addr: t.daddr, port: t.dport } });
  }

  /** Forget flows (the maps were flushed). */
  reset(): void {
    this.ct.clear();
    this.nat.clear();
    this.local.clear();
  }
}
