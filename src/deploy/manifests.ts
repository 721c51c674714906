// `ferry manifests`: the overlay of deploy/kubernetes (talos or generic) rendered as
// `kubectl kustomize` would, then the command line's choices applied: the image, the API
// server's address (generic), the agent's devices, forwarding mode and XDP acceleration
// (its ConfigMap).
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseDocument, stringify } from 'yaml';
import { ErrorCode, FerryError } from '../errors.js';
import { kustomize, type KObject } from './kustomize.js';

const PACKAGE_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const KUSTOMIZE_ROOT = join(PACKAGE_ROOT, 'deploy', 'kubernetes');

export interface ManifestOptions {
  /** The talos overlay (KubePrism); otherwise generic, which needs apiServer. */
  talos: boolean;
  /** host:port of the API server as the nodes reach it (generic). */
  apiServer?: string | undefined;
  image?: string | undefined;
  /** The agent's devices (names or patterns); empty or absent: chosen on each node. */
  devices?: string[] | undefined;
  mode?: 'snat' | 'dsr' | 'hybrid' | undefined;
  /** XDP before tc: none, native or best-effort. */
  acceleration?: 'none' | 'native' | 'best-effort' | undefined;
  /** Which devices get XDP (names or patterns); absent: all but tunnels and stacked devices. */
  xdpDevices?: string[] | undefined;
}

type Container = { name: string; image?: string; env?: Array<{ name: string; value?: string }> };
type Workload = KObject & { spec: { template: { spec: { containers: Container[] } } } };

const fail = (cause: string, hint?: string) => new FerryError({ code: ErrorCode.Config, op: 'ferry manifests', cause, hint });

export function renderObjects(o: ManifestOptions, root = KUSTOMIZE_ROOT): KObject[] {
  const overlay = join(root, 'overlays', o.talos ? 'talos' : 'generic');
  if (!existsSync(overlay)) throw fail(`no overlay at ${overlay}`);
  if (o.talos && o.apiServer) throw fail('--api-server with --talos', 'Talos nodes reach the API server through KubePrism on localhost:7445');
  if (!o.talos && !o.apiServer) throw fail('--api-server is needed without --talos', 'the agent cannot use the kubernetes Service before ferry runs: give the address nodes reach the API server at, e.g. 10.0.0.10:6443');
  const objects = kustomize(overlay);
  const workloads = objects.filter((x): x is Workload => x.kind === 'DaemonSet' || x.kind === 'Deployment');
  if (o.apiServer) {
    const { host, port } = parseHostPort(o.apiServer);
    for (const w of workloads) {
      for (const c of w.spec.template.spec.containers) {
        for (const e of c.env ?? []) {
          if (e.name === 'KUBERNETES_SERVICE_HOST') e.value = host;
          if (e.name === 'KUBERNETES_SERVICE_PORT') e.value = String(port);
        }
      }
    }
  }
  if (o.image !== undefined) {
    if (!/^[a-z0-9][a-z0-9._\-/:@]*$/i.test(o.image) || o.image.length > 255) throw fail(`--image ${JSON.stringify(o.image)}: not an image reference`);
    for (const w of workloads) for (const c of w.spec.template.spec.containers) c.image = o.image;
  }
  if (o.devices !== undefined || o.mode !== undefined || o.acceleration !== undefined || o.xdpDevices !== undefined) {
    const cm = objects.find((x) => x.kind === 'ConfigMap' && x.metadata.name === 'ferry') as (KObject & { data: Record<string, string> }) | undefined;
    if (!cm?.data?.['ferry.yaml']) throw fail('the overlay has no ConfigMap ferry with ferry.yaml');
    // Edit the document, not a re-dump: its comments document the settings.
    const doc = parseDocument(cm.data['ferry.yaml']);
    if (o.devices !== undefined) doc.set('devices', doc.createNode(o.devices, { flow: true }));
    if (o.mode !== undefined) doc.set('forwardingMode', o.mode);
    if (o.acceleration !== undefined) doc.set('acceleration', o.acceleration);
    if (o.xdpDevices !== undefined) doc.set('xdpDevices', doc.createNode(o.xdpDevices, { flow: true }));
    cm.data['ferry.yaml'] = doc.toString();
  }
  return objects;
}

/** The objects as one YAML stream, ready for `kubectl apply -f -`. */
export function renderManifests(o: ManifestOptions, root = KUSTOMIZE_ROOT): string {
  return renderObjects(o, root).map((x) => stringify(x, { lineWidth: 0 })).join('---\n');
}

export function parseHostPort(s: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([a-zA-Z0-9.-]+)):(\d{1,5})$/.exec(s);
  const port = Number(m?.[3]);
  const host = m?.[1] ?? m?.[2] ?? '';
  if (!m || port < 1 || port > 65535 || host.length > 253 || host.startsWith('-') || host.startsWith('.')) {
    throw fail(`--api-server ${JSON.stringify(s)}: not host:port`, 'e.g. 10.0.0.10:6443, api.example.com:6443 or [fd00::10]:6443');
  }
  return { host, port };
}
