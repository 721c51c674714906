// Input checks for Services and EndpointSlices. The API server validates what it stores,
// but ferry must not trust it blindly: one malformed object is skipped with a reason, and
// every other Service keeps working.
import { isIPv4, isIPv6 } from 'node:net';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';

export type Result<T> = { ok: true; value: T } | { ok: false; error: string };

/** More ports than any real Service has; a guard against absurd objects. */
export const MAX_PORTS_PER_SERVICE = 1024;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const PROTOCOLS = new Set(['TCP', 'UDP', 'SCTP']);

function validPort(n: unknown): boolean {
  return typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 65535;
}

/** An IPv4 or IPv6 address; not one with a zone (fe80::1%eth0), which Node's checks accept. */
function validIP(s: unknown): boolean {
  return typeof s === 'string' && (isIPv4(s) || (isIPv6(s) && !s.includes('%')));
}

const isObject = (x: unknown): boolean => typeof x === 'object' && x !== null && !Array.isArray(x);
/** A list field: absent, or an array (the API server checks types; ferry does not count on it). */
const listOrAbsent = (x: unknown) => x === undefined || x === null || Array.isArray(x);
/** A short, printable rendering of a hostile value for an error message. */
const shown = (x: unknown) => JSON.stringify(x)?.slice(0, 80) ?? String(x);

export function validateService(svc: V1Service): Result<V1Service> {
  const m = svc.metadata;
  if (!m?.name || !m.namespace) return { ok: false, error: 'metadata.name and metadata.namespace are required' };
  if (typeof m.name !== 'string' || m.name.length > 63 || !DNS_LABEL.test(m.name)) return { ok: false, error: `metadata.name ${shown(m.name)} is not a DNS label` };
  if (typeof m.namespace !== 'string' || m.namespace.length > 63 || !DNS_LABEL.test(m.namespace)) return { ok: false, error: `metadata.namespace ${shown(m.namespace)} is not a DNS label` };
  const spec = svc.spec;
  if (!spec) return { ok: false, error: 'spec is missing' };
  if (!isObject(spec)) return { ok: false, error: `spec ${shown(spec)} is not an object` };
  for (const f of ['ports', 'clusterIPs', 'externalIPs', 'loadBalancerSourceRanges'] as const) {
    if (!listOrAbsent(spec[f])) return { ok: false, error: `spec.${f} ${shown(spec[f])} is not a list` };
  }
  if (!listOrAbsent(svc.status?.loadBalancer?.ingress)) return { ok: false, error: `status.loadBalancer.ingress ${shown(svc.status?.loadBalancer?.ingress)} is not a list` };
  const ports = spec.ports ?? [];
  if (ports.length > MAX_PORTS_PER_SERVICE) return { ok: false, error: `${ports.length} ports (at most ${MAX_PORTS_PER_SERVICE})` };
  const seen = new Set<string>();
  for (const [i, p] of ports.entries()) {
    if (!isObject(p)) return { ok: false, error: `spec.ports[${i}] ${shown(p)} is not an object` };
    if (p.protocol !== undefined && p.protocol !== null && typeof p.protocol !== 'string') return { ok: false, error: `spec.ports[${i}].protocol ${shown(p.protocol)} is not TCP, UDP or SCTP` };
    if (p.name !== undefined && p.name !== null && typeof p.name !== 'string') return { ok: false, error: `spec.ports[${i}].name ${shown(p.name)} is not a string` };
    const proto = (p.protocol ?? 'TCP').toUpperCase();
    if (!PROTOCOLS.has(proto)) return { ok: false, error: `spec.ports[${i}].protocol "${p.protocol}" is not TCP, UDP or SCTP` };
    if (!validPort(p.port)) return { ok: false, error: `spec.ports[${i}].port ${p.port} is not in 1..65535` };
    if (p.nodePort !== undefined && p.nodePort !== null && p.nodePort !== 0 && !validPort(p.nodePort)) {
      return { ok: false, error: `spec.ports[${i}].nodePort ${p.nodePort} is not in 1..65535` };
    }
    const key = `${p.port}/${proto}`;
    if (seen.has(key)) return { ok: false, error: `spec.ports[${i}]: port ${key} is listed twice` };
    seen.add(key);
    if (ports.length > 1 && !p.name) return { ok: false, error: `spec.ports[${i}] has no name (required when there are several ports)` };
  }
  for (const ip of [...(spec.clusterIPs ?? []), ...(spec.clusterIP && spec.clusterIP !== 'None' ? [spec.clusterIP] : [])]) {
    if (ip !== 'None' && ip !== '' && !validIP(ip)) return { ok: false, error: `cluster IP "${ip}" is not an IP address` };
  }
  for (const ip of spec.externalIPs ?? []) if (!validIP(ip)) return { ok: false, error: `externalIP "${ip}" is not an IP address` };
  for (const ing of svc.status?.loadBalancer?.ingress ?? []) {
    if (ing.ip && !validIP(ing.ip)) return { ok: false, error: `status.loadBalancer.ingress ip "${ing.ip}" is not an IP address` };
  }
  for (const ing of svc.status?.loadBalancer?.ingress ?? []) {
    if (!isObject(ing)) return { ok: false, error: `status.loadBalancer.ingress entry ${shown(ing)} is not an object` };
  }
  if (spec.clusterIP !== undefined && spec.clusterIP !== null && typeof spec.clusterIP !== 'string') return { ok: false, error: `cluster IP ${shown(spec.clusterIP)} is not an IP address` };
  for (const r of spec.loadBalancerSourceRanges ?? []) {
    if (typeof r !== 'string') return { ok: false, error: `loadBalancerSourceRanges entry ${shown(r)} is not a CIDR` };
    const [ip, bits, extra] = r.trim().split('/');
    const n = Number(bits);
    const ok = extra === undefined && bits !== undefined && /^\d+$/.test(bits) && (isIPv4(ip ?? '') ? n <= 32 : isIPv6(ip ?? '') && n <= 128);
    if (!ok) return { ok: false, error: `loadBalancerSourceRanges entry "${r}" is not a CIDR` };
  }
  const t = spec.sessionAffinityConfig?.clientIP?.timeoutSeconds;
  if (t !== undefined && t !== null && (!Number.isInteger(t) || t < 1 || t > 86400)) {
    return { ok: false, error: `sessionAffinityConfig.clientIP.timeoutSeconds ${t} is not in 1..86400` };
  }
  if (spec.healthCheckNodePort !== undefined && spec.healthCheckNodePort !== null && spec.healthCheckNodePort !== 0 && !validPort(spec.healthCheckNodePort)) {
    return { ok: false, error: `spec.healthCheckNodePort ${spec.healthCheckNodePort} is not in 1..65535` };
  }
  return { ok: true, value: svc };
}

export function validateEndpointSlice(slice: V1EndpointSlice): Result<V1EndpointSlice> {
  const m = slice.metadata;
  if (!m?.name || !m.namespace) return { ok: false, error: 'metadata.name and metadata.namespace are required' };
  for (const f of ['ports', 'endpoints'] as const) if (!listOrAbsent(slice[f])) return { ok: false, error: `${f} ${shown(slice[f])} is not a list` };
  if ((slice.ports?.length ?? 0) > MAX_PORTS_PER_SERVICE) return { ok: false, error: `${slice.ports!.length} ports (at most ${MAX_PORTS_PER_SERVICE})` };
  for (const [i, p] of (slice.ports ?? []).entries()) {
    if (!isObject(p)) return { ok: false, error: `ports[${i}] ${shown(p)} is not an object` };
    if (p.protocol !== undefined && p.protocol !== null && typeof p.protocol !== 'string') return { ok: false, error: `ports[${i}].protocol ${shown(p.protocol)} is not TCP, UDP or SCTP` };
    if (p.port !== undefined && p.port !== null && !validPort(p.port)) return { ok: false, error: `ports[${i}].port ${p.port} is not in 1..65535` };
    if (p.protocol && !PROTOCOLS.has(p.protocol.toUpperCase())) return { ok: false, error: `ports[${i}].protocol "${p.protocol}" is not TCP, UDP or SCTP` };
  }
  for (const [i, e] of (slice.endpoints ?? []).entries()) {
    if (!isObject(e) || !listOrAbsent(e.addresses)) return { ok: false, error: `endpoints[${i}] ${shown(e)} is not an endpoint` };
    if (e.conditions !== undefined && e.conditions !== null && !isObject(e.conditions)) return { ok: false, error: `endpoints[${i}].conditions ${shown(e.conditions)} is not an object` };
    const ip = e.addresses?.[0];
    if (ip !== undefined && slice.addressType !== 'FQDN' && !validIP(ip)) return { ok: false, error: `endpoints[${i}].addresses[0] "${ip}" is not an IP address` };
  }
  return { ok: true, value: slice };
}
