// One frontend as one sync plans it, in one lookup scope: its backends, their keys (each
// parsed once a plan), their one order on every node, and whether it takes its address's
// "unknown port" entry.
import type { BackendSpec, FrontendSpec } from '../model/frontend.js';
import { backendKey } from './ids.js';
import { LbScope, Proto } from './layouts.js';

export interface ScopedFrontend {
  f: FrontendSpec;
  scope: number;
  fid: string;
  backends: BackendSpec[];
  dropWhenEmpty: boolean;
  /** backendKey() of each of `backends`, then of f.drainingBackends: an address is parsed once a plan, not thrice. */
  keys?: number[];
}

export function backendKeys(sf: ScopedFrontend): number[] {
  if (sf.keys) return sf.keys;
  const proto = Proto[sf.f.proto];
  const keys: number[] = [];
  for (const b of sf.backends) keys.push(backendKey(b.address, b.port, proto));
  for (const b of sf.f.drainingBackends ?? []) keys.push(backendKey(b.address, b.port, proto));
  return (sf.keys = keys);
}

/** The indexes of `sf.backends` in one order on every node (address, then port: their
 * backendKey order, as the protocol is the frontend's), whatever order the slices had. */
export function canonical(sf: ScopedFrontend): number[] {
  const keys = backendKeys(sf);
  const order = sf.backends.map((_, i) => i);
  return order.length < 2 ? order : order.sort((a, b) => keys[a]! - keys[b]!);
}

/** The "known address, unknown port → drop" entry is only for addresses the model says
 * belong to Services alone: a node address also carries the host's own traffic. */
export const wantsWildcard = (sf: ScopedFrontend) => sf.scope === LbScope.LB_SCOPE_EXTERNAL && ownsItsAddress(sf.f);

/** Is the frontend's address the Service's alone (a ClusterIP, an LB IP that is no node's),
 * so that its unknown ports are refused? A node's or an externalIP's are not. */
export const ownsItsAddress = (f: FrontendSpec): boolean => f.serviceOnlyAddress ?? (f.kind === 'ClusterIP' || f.kind === 'LoadBalancer');
