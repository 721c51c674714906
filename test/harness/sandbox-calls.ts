// Calls the sandbox tests make again and again: an object created through the API server
// (and the sandbox settled after it), a node's datapath packet counter by path.
import type { SandboxApi } from '../../src/sandbox/api-client.js';
import type { Sandbox } from '../../src/sandbox/sandbox.js';
import type { Host } from '../../src/sandbox/netns/testbed.js';

/** Create `obj` of `kind` (Pod, Service…) and wait for the sandbox to act on it. */
export async function createObject(sb: Sandbox, api: SandboxApi, kind: string, obj: Record<string, unknown>): Promise<void> {
  const meta = obj.metadata as { namespace?: string };
  const r = await api.call('POST', api.url(kind, meta.namespace ?? 'default'), obj);
  if (r.status >= 300) throw new Error(String(r.json.message));
  await sb.settle();
}

/** `ferry_datapath_packets_total{path}` from the node's agent (0 when not counted yet). */
export async function datapathPackets(node: Host, path: string): Promise<number> {
  const m = await node.execOk(['curl', '-sS', 'http://127.0.0.1:10249/metrics']);
  return Number(new RegExp(`ferry_datapath_packets_total\\{path="${path}"\\} (\\d+)`).exec(m)?.[1] ?? 0);
}
