// One value of a Secret (a BGP peer's password): read when needed, never cached, so a
// rotated Secret is used at the next read.
import type { JsonClient } from './client.js';

/** The key's value as UTF-8; undefined when the Secret has no such key (a missing Secret throws: 404). */
export async function secretValue(json: JsonClient, namespace: string, ref: { name: string; key: string }): Promise<string | undefined> {
  const sec = await json.request<{ data?: Record<string, string> }>('GET', `/api/v1/namespaces/${encodeURIComponent(namespace)}/secrets/${encodeURIComponent(ref.name)}`);
  const v = sec.data?.[ref.key];
  return v === undefined ? undefined : Buffer.from(v, 'base64').toString('utf8');
}
