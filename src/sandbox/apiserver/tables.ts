// Server-side printing, as kubectl asks for it (Accept: application/json;as=Table;…):
// Services with TYPE, CLUSTER-IP, EXTERNAL-IP and PORT(S); custom resources with their
// additionalPrinterColumns; everything else with its name and age.
import type { PrinterColumn, ResourceDef } from './crd.js';
import type { KObject } from './store.js';

export function wantsTable(accept: string | undefined): boolean {
  return Boolean(accept && /as=Table/.test(accept));
}

/** `5m`, `2d3h` – the AGE column as kubectl prints it. */
export function age(created: string | undefined, now = Date.now()): string {
  if (!created) return '<unknown>';
  const s = Math.max(0, Math.floor((now - Date.parse(created)) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 3600 * 2) return `${Math.floor(s / 60)}m`;
  if (s < 86400 * 2) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

/** A printer column's value: simple JSONPath (`.spec.a.b`, `.status.x[0].y`). */
export function jsonPath(obj: unknown, path: string): unknown {
  let v: unknown = obj;
  for (const part of path.replace(/^\{?\.?|\}?$/g, '').split('.').filter(Boolean)) {
    const m = /^([^[]+)(?:\[(\d+)\])?$/.exec(part);
    if (!m || v === null || typeof v !== 'object') return undefined;
    v = (v as Record<string, unknown>)[m[1]!];
    if (m[2] !== undefined) v = Array.isArray(v) ? v[Number(m[2])] : undefined;
  }
  return v;
}

type Column = { name: string; type: string; format?: string; description: string; priority: number; value: (o: KObject) => unknown };

function serviceColumns(): Column[] {
  const spec = (o: KObject) => (o.spec ?? {}) as { type?: string; clusterIP?: string; externalIPs?: string[]; ports?: Array<{ port: number; nodePort?: number; protocol?: string }> };
  return [
    { name: 'Type', type: 'string', description: 'the Service type', priority: 0, value: (o) => spec(o).type ?? 'ClusterIP' },
    { name: 'Cluster-IP', type: 'string', description: 'the cluster IP', priority: 0, value: (o) => spec(o).clusterIP ?? '<none>' },
    {
      name: 'External-IP', type: 'string', description: 'external addresses', priority: 0,
      value: (o) => {
        const ips = [...((o.status as { loadBalancer?: { ingress?: Array<{ ip?: string; hostname?: string }> } })?.loadBalancer?.ingress ?? []).map((i) => i.ip ?? i.hostname ?? ''), ...(spec(o).externalIPs ?? [])].filter(Boolean);
        if (ips.length) return ips.join(',');
        return spec(o).type === 'LoadBalancer' ? '<pending>' : '<none>';
      },
    },
    { name: 'Port(s)', type: 'string', description: 'ports', priority: 0, value: (o) => (spec(o).ports ?? []).map((p) => `${p.port}${p.nodePort ? `:${p.nodePort}` : ''}/${p.protocol ?? 'TCP'}`).join(',') || '<none>' },
  ];
}

/** kubectl get events: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE (no name, no age). */
function eventColumns(): Column[] {
  const ev = (o: KObject) => o as unknown as { type?: string; reason?: string; message?: string; lastTimestamp?: string; eventTime?: string; involvedObject?: { kind?: string; name?: string } };
  return [
    { name: 'Last Seen', type: 'string', description: 'when it last happened', priority: 0, value: (o) => age(ev(o).lastTimestamp ?? ev(o).eventTime ?? o.metadata.creationTimestamp) },
    { name: 'Type', type: 'string', description: 'Normal or Warning', priority: 0, value: (o) => ev(o).type ?? '' },
    { name: 'Reason', type: 'string', description: 'why', priority: 0, value: (o) => ev(o).reason ?? '' },
    { name: 'Object', type: 'string', description: 'what it is about', priority: 0, value: (o) => `${(ev(o).involvedObject?.kind ?? '').toLowerCase()}/${ev(o).involvedObject?.name ?? ''}` },
    { name: 'Message', type: 'string', description: 'what happened', priority: 0, value: (o) => ev(o).message ?? '' },
  ];
}

function printerColumns(cols: PrinterColumn[]): Column[] {
  return cols.map((c) => ({ name: c.name, type: c.type, description: c.description ?? '', priority: c.priority ?? 0, value: (o: KObject) => jsonPath(o, c.jsonPath) ?? '' }));
}

/** The Table a kubectl get shows, for a list or for one object. */
export function toTable(def: ResourceDef, objects: KObject[], resourceVersion: string): object {
  const core = def.group === '';
  const extra = core && def.plural === 'services' ? serviceColumns() : printerColumns(def.printerColumns ?? []);
  const columns: Column[] = core && def.plural === 'events' ? eventColumns() : [
    { name: 'Name', type: 'string', format: 'name', description: 'the object\'s name', priority: 0, value: (o) => o.metadata.name },
    ...extra,
    { name: 'Age', type: 'date', description: 'how long ago it was created', priority: 0, value: (o) => age(o.metadata.creationTimestamp) },
  ];
  return {
    kind: 'Table',
    apiVersion: 'meta.k8s.io/v1',
    metadata: { resourceVersion },
    columnDefinitions: columns.map(({ value: _v, ...c }) => c),
    rows: objects.map((o) => ({
      cells: columns.map((c) => {
        const v = c.value(o);
        return typeof v === 'object' && v !== null ? JSON.stringify(v) : v;
      }),
      object: { kind: 'PartialObjectMetadata', apiVersion: 'meta.k8s.io/v1', metadata: o.metadata },
    })),
  };
}
