// What the model produces for one node, and what the datapath consumes: frontends and the
// backends each one balances over, in plain terms (no Kubernetes objects, no map layouts).
import { flat } from './flat-string.js';

/** The L4 protocols a Service port can have. */
export type ProtoName = 'TCP' | 'UDP' | 'SCTP';

export type FrontendKind = 'ClusterIP' | 'NodePort' | 'LoadBalancer' | 'ExternalIP';

export interface BackendSpec {
  address: string;
  port: number;
  /** On this node: north-south traffic to it is DNATed only, never SNATed. */
  local: boolean;
  terminating?: boolean;
}

export interface FrontendSpec {
  address: string;
  port: number;
  proto: ProtoName;
  kind: FrontendKind;
  /** The 0.0.0.0:nodePort entry socket LB uses for NodePort on loopback. */
  nodePortAny?: boolean;
  /**
   * The address belongs to Services alone (a ClusterIP, a LoadBalancer IP that is no
   * node's): its ports no Service defines are dropped or refused. Never for an address a
   * node or the host also uses, whose other ports must keep working. Unset: ClusterIP and
   * LoadBalancer addresses are, NodePort and externalIP addresses are not.
   */
  serviceOnlyAddress?: boolean;
  backends: BackendSpec[];
  /**
   * Backends for traffic from this node's pods and host (socket LB), when they differ from
   * `backends` (which external traffic on tc gets): ETP=Local frontends are reached from
   * inside through the cluster endpoints, as kube-proxy's short-circuit does.
   */
  internalBackends?: BackendSpec[];
  /**
   * Terminating endpoints that still serve but are not chosen for new flows (Ready ones
   * exist): kept in the backends map so established flows to them go on until they go.
   */
  drainingBackends?: BackendSpec[];
  /** Per-Service forwarding override for remote backends (else the node's mode). */
  forwarding?: 'snat' | 'dsr';
  /** loadBalancerSourceRanges (IPv4 CIDRs): only these sources may use the frontend. */
  sourceRanges?: string[];
  /** With no backend, drop (traffic policy Local) rather than reject. */
  dropWhenEmpty?: boolean;
  /** ClientIP affinity in seconds (0: none). */
  affinityTimeout?: number;
  /** `namespace/name:port`, for the CLI. */
  service?: string;
}

/**
 * The empty list every outcome shares: most Services have no problems, no draining
 * backends and nothing ignored, and at 50k Services an array per empty field is ~10 MiB.
 * Frozen, so a late push fails loudly instead of writing into every Service at once.
 */
export const NONE: never[] = Object.freeze([]) as unknown as never[];

/** `list`, or the shared empty list when it is empty. */
export const orNone = <T>(list: T[]): T[] => (list.length === 0 ? NONE : list);

export function frontendId(f: { address: string; port: number; proto: string }): string {
  return flat(`${f.address}:${f.port}/${f.proto.toLowerCase()}`);
}
