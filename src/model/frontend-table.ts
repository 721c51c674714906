// Every Service's outcome merged into the node's frontends, kept up to date one Service at
// a time: which Service wins each frontend (CLAIM_ORDER), which Services' programmed
// frontends changed since the writer last asked, and the problems each Service has. A
// change to one Service touches only the frontends it claims, so a sync at 50k Services
// does not walk the other 49 999.
import type { DesiredState, FrontendConflict, HealthCheck, Rejected, ServiceOutcome } from './desired.js';
import { frontendId, type FrontendSpec } from './frontend.js';

/**
 * Who wins a frontend two Services ask for. A ClusterIP is allocated by the API server and
 * is its Service's alone: it always wins over an externalIP or LoadBalancer IP that a user
 * set to the same address and port. NodePorts are allocated too, and come next. Between
 * equals, the Service first in name order keeps it.
 */
const CLAIM_ORDER: Array<FrontendSpec['kind'][]> = [['ClusterIP'], ['NodePort'], ['LoadBalancer', 'ExternalIP']];
const rankOf = (kind: FrontendSpec['kind']) => CLAIM_ORDER.findIndex((g) => g.includes(kind));

interface Claim {
  service: string;
  rank: number;
  /** Position in the Service's own list (the first of its duplicates wins). */
  index: number;
  fid: string;
  spec: FrontendSpec;
}

const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const first = (a: Claim, b: Claim) => a.rank - b.rank || byName(a.service, b.service) || a.index - b.index;

export class FrontendTable {
  private readonly outcomes = new Map<string, ServiceOutcome>();
  /** Per frontend id, its claims, best first. */
  private readonly claims = new Map<string, Claim[]>();
  /** Per Service, its claims in its own order. */
  private readonly claimsOf = new Map<string, Claim[]>();
  private readonly changed = new Set<string>();
  private readonly health = new Map<string, HealthCheck>();
  private readonly noLocal = { internal: 0, external: 0 };

  /** A Service's new outcome (undefined: it is gone). */
  set(service: string, outcome: ServiceOutcome | undefined): void {
    this.changed.add(service);
    const old = this.outcomes.get(service);
    for (const p of old?.result?.noLocalEndpoints ?? []) this.noLocal[p]--;
    const touched = new Set<string>();
    for (const c of this.claimsOf.get(service) ?? []) {
      touched.add(c.fid);
      const list = this.claims.get(c.fid)!;
      list.splice(list.indexOf(c), 1);
      if (list.length === 0) this.claims.delete(c.fid);
    }
    this.claimsOf.delete(service);
    this.health.delete(service);
    if (!outcome) {
      this.outcomes.delete(service);
    } else {
      this.outcomes.set(service, outcome);
      const r = outcome.result;
      for (const p of r?.noLocalEndpoints ?? []) this.noLocal[p]++;
      if (r?.health) this.health.set(service, { service, ...r.health });
      const mine: Claim[] = (r?.frontends ?? []).map((spec, index) => ({ service, rank: rankOf(spec.kind), index, fid: frontendId(spec), spec }));
      if (mine.length) this.claimsOf.set(service, mine);
      for (const c of mine) {
        touched.add(c.fid);
        const list = this.claims.get(c.fid);
        if (!list) {
          this.claims.set(c.fid, [c]);
          continue;
        }
        const was = list[0]!;
        let at = list.findIndex((x) => first(c, x) < 0);
        if (at < 0) at = list.length;
        list.splice(at, 0, c);
        if (at === 0) this.changed.add(was.service); // it lost the frontend
      }
    }
    // A frontend this Service gave up goes to the next claimant.
    for (const fid of touched) {
      const w = this.claims.get(fid)?.[0];
      if (w && w.service !== service) this.changed.add(w.service);
    }
  }

  /** Services whose programmed frontends may have changed since the last call. */
  takeChanged(): Set<string> {
    const c = new Set(this.changed);
    this.changed.clear();
    return c;
  }

  /** The frontends a Service wins, in its own order. */
  frontendsOf(service: string): FrontendSpec[] {
    return (this.claimsOf.get(service) ?? []).filter((c) => this.claims.get(c.fid)![0] === c).map((c) => c.spec);
  }

  /** How many frontends are programmed. */
  get frontendCount(): number {
    return this.claims.size; // one winner per frontend id
  }

  healthChecks(): HealthCheck[] {
    return [...this.health.values()].sort((a, b) => byName(a.service, b.service));
  }

  noLocalEndpoints(): { internal: number; external: number } {
    return { ...this.noLocal };
  }

  /** What a Service is refused or loses, for reports. */
  problemsOf(service: string): { rejected: Rejected[]; conflicts: FrontendConflict[]; ignored: string[] } {
    const o = this.outcomes.get(service);
    const conflicts: FrontendConflict[] = [];
    for (const c of this.claimsOf.get(service) ?? []) {
      const w = this.claims.get(c.fid)![0]!;
      if (w === c || (w.service === c.service && w.spec.kind === c.spec.kind)) continue;
      conflicts.push({ service, frontend: c.fid, kind: c.spec.kind, owner: w.service, ownerKind: w.spec.kind });
    }
    for (const a of o?.result?.nodeAddresses ?? []) conflicts.push({ service, frontend: a.address, kind: a.kind, owner: 'a node', ownerKind: 'NodeAddress' });
    return { rejected: o?.rejected ?? [], conflicts, ignored: (o?.result?.ignored ?? []).map((i) => `${service}: ${i}`) };
  }

  services(): IterableIterator<string> {
    return this.outcomes.keys();
  }

  /** Everything at once, in a stable order (full syncs and tests). */
  snapshot(orphanRejections: Rejected[] = []): DesiredState {
    const names = [...this.outcomes.keys()].sort(byName);
    const winners: Claim[] = [];
    for (const list of this.claims.values()) winners.push(list[0]!);
    winners.sort(first);
    const out: DesiredState = { frontends: winners.map((c) => c.spec), healthChecks: this.healthChecks(), rejected: [...orphanRejections], skipped: [], conflicts: [], ignored: [], noLocalEndpoints: this.noLocalEndpoints() };
    const lost: FrontendConflict[] = [];
    const nodeAddress: FrontendConflict[] = [];
    const order = new Map<FrontendConflict, Claim>();
    for (const name of names) {
      const o = this.outcomes.get(name)!;
      const p = this.problemsOf(name);
      out.rejected.push(...p.rejected);
      out.ignored.push(...p.ignored);
      if (o.skipped) out.skipped.push({ service: name, reason: o.skipped });
      for (const c of p.conflicts) {
        if (c.ownerKind === 'NodeAddress') nodeAddress.push(c);
        else {
          lost.push(c);
          order.set(c, this.claimsOf.get(name)!.find((x) => x.fid === c.frontend && x.spec.kind === c.kind)!);
        }
      }
    }
    lost.sort((a, b) => first(order.get(a)!, order.get(b)!));
    out.conflicts = [...lost, ...nodeAddress];
    return out;
  }
}
