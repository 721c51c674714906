// API discovery for kubectl: /api, /apis, each group and each group version, built from
// the resources served now (CRDs appear as soon as they are created).
import type { ResourceDef } from './crd.js';

const BUILTIN_STATUS = new Set(['services', 'nodes', 'pods', 'deployments']);

function resourceList(gv: string, defs: ResourceDef[]): object {
  return {
    kind: 'APIResourceList',
    apiVersion: 'v1',
    groupVersion: gv,
    resources: defs.flatMap((d) => [
      { name: d.plural, singularName: d.kind.toLowerCase(), namespaced: d.namespaced, kind: d.kind, verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'], shortNames: d.shortNames, ...(d.schema ? { categories: ['all'] } : {}) },
      ...((d.group === '' && BUILTIN_STATUS.has(d.plural)) || d.statusSubresource ? [{ name: `${d.plural}/status`, singularName: '', namespaced: d.namespaced, kind: d.kind, verbs: ['get', 'patch', 'update'] }] : []),
    ]),
  };
}

/** The discovery document for `path`, or undefined when it is not a discovery path. */
export function discovery(path: string, resources: ResourceDef[]): object | undefined {
  if (path === '/api') return { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress: '127.0.0.1' }] };
  if (path === '/api/v1') return resourceList('v1', resources.filter((r) => r.group === ''));
  const groups = new Map<string, string[]>();
  for (const r of resources) {
    if (!r.group) continue;
    const vs = groups.get(r.group) ?? [];
    if (!vs.includes(r.version)) vs.push(r.version);
    groups.set(r.group, vs);
  }
  const group = (g: string, vs: string[]) => ({ name: g, versions: vs.map((v) => ({ groupVersion: `${g}/${v}`, version: v })), preferredVersion: { groupVersion: `${g}/${vs[0]}`, version: vs[0] } });
  if (path === '/apis') return { kind: 'APIGroupList', apiVersion: 'v1', groups: [...groups].map(([g, vs]) => group(g, vs)) };
  for (const [g, vs] of groups) {
    if (path === `/apis/${g}`) return { kind: 'APIGroup', apiVersion: 'v1', ...group(g, vs) };
    for (const v of vs) if (path === `/apis/${g}/${v}`) return resourceList(`${g}/${v}`, resources.filter((r) => r.group === g && r.version === v));
  }
  return undefined;
}
