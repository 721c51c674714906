// The socket hooks' decision at connect()/sendmsg() (bpf/sock.bpf.c), written from the
// design: which frontend a destination is, and whether the call is rewritten to one of its
// backends, refused, denied by loadBalancerSourceRanges, or left alone. `ferry explain
// --from pod|host` reports it for the live maps; a differential test holds it against the
// real hooks.
import { LbFlags, LbScope, Proto, type Lb4Service } from '../layouts.js';

export interface SockLookup {
  /** The master entry (slot 0) of a frontend, if there is one. */
  master(address: string, port: number, proto: number, scope: number): Lb4Service | undefined;
  /** Is `source` in the loadBalancerSourceRanges of the frontend (IPv4: by its reverse-NAT
   * id; IPv6: by its address, port and protocol)? */
  sourceAllowed(frontend: { address: string; port: number; proto: number; revNatId: number }, source: string): boolean;
}

export interface SockRequest {
  address: string;
  port: number;
  proto: number;
  /** From the host's network namespace (else a pod's): only there NodePorts answer on loopback. */
  fromHost: boolean;
  /** The address the namespace's connections leave from: the node's for the host, the one
   * recorded in lb4_netns_sources (lb6_netns_sources) for a pod; undefined when none is recorded. */
  source: string | undefined;
}

export interface SockFrontend {
  address: string;
  port: number;
  proto: number;
  scope: number;
  service: Lb4Service;
  /** A loopback destination matched the NodePort on any local address (0.0.0.0). */
  loopback: boolean;
}

export type SockDecision =
  | { verdict: 'unchanged' }
  | { verdict: 'refused'; reason: 'unknown-port' | 'no-backend'; frontend?: SockFrontend }
  /** loadBalancerSourceRanges (EPERM): the source not in them, or not recorded. */
  | { verdict: 'denied'; reason: 'source-range' | 'source-unknown'; frontend: SockFrontend }
  | { verdict: 'rewritten'; frontend: SockFrontend };

const isLoopback = (a: string) => a.startsWith('127.');

/** The internal-scope entry when there is one, else the external one. */
function find(l: SockLookup, address: string, port: number, proto: number): { scope: number; svc: Lb4Service } | undefined {
  for (const scope of [LbScope.LB_SCOPE_INTERNAL, LbScope.LB_SCOPE_EXTERNAL]) {
    const svc = l.master(address, port, proto, scope);
    if (svc) return { scope, svc };
  }
  return undefined;
}

function isServiceAddress(l: SockLookup, address: string): boolean {
  return Boolean((l.master(address, 0, 0, LbScope.LB_SCOPE_EXTERNAL)?.flags ?? 0) & LbFlags.LB_F_WILDCARD);
}

export function sockDecision(l: SockLookup, r: SockRequest): SockDecision {
  if (r.proto !== Proto.TCP && r.proto !== Proto.UDP) return { verdict: 'unchanged' };
  let address = r.address;
  let hit = find(l, address, r.port, r.proto);
  if (!hit && isServiceAddress(l, address)) return { verdict: 'refused', reason: 'unknown-port' };
  let loopback = false;
  if (!hit && isLoopback(address)) {
    // A pod's loopback is its own (a sidecar's port): left alone.
    if (!r.fromHost) return { verdict: 'unchanged' };
    // NodePort on loopback: the 0.0.0.0:port entry; any other loopback port is a local one.
    address = '0.0.0.0';
    hit = find(l, address, r.port, r.proto);
    loopback = true;
  }
  if (!hit) return { verdict: 'unchanged' };
  const frontend: SockFrontend = { address, port: r.port, proto: r.proto, scope: hit.scope, service: hit.svc, loopback };
  // Source ranges before anything else, as on the tc path; an ETP=Local LB IP found in the
  // internal scope has its ranges on its external entry.
  const ranged = hit.scope === LbScope.LB_SCOPE_INTERNAL && hit.svc.flags & LbFlags.LB_F_LOAD_BALANCER ? l.master(address, r.port, r.proto, LbScope.LB_SCOPE_EXTERNAL) : hit.svc;
  if (ranged && ranged.flags & LbFlags.LB_F_SOURCE_RANGES) {
    if (r.source === undefined) return { verdict: 'denied', reason: 'source-unknown', frontend };
    if (!l.sourceAllowed({ address, port: r.port, proto: r.proto, revNatId: ranged.revNatId }, r.source)) return { verdict: 'denied', reason: 'source-range', frontend };
  }
  if (hit.svc.count === 0) return { verdict: 'refused', reason: 'no-backend', frontend };
  return { verdict: 'rewritten', frontend };
}
