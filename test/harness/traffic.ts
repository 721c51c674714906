// Traffic helpers the e2e tests share: UDP datagrams echoed by the udp-echo workload.
import type { Host } from '../../src/sandbox/netns/testbed.js';
import { WORKLOADS_BIN } from '../../src/sandbox/workloads/spawn.js';

/** `count` datagrams of `size` bytes to to:port, echoed back: what came back. */
export async function udpEcho(from: Host, to: string, size: number, count = 2): Promise<Array<{ ok: boolean; bytes: number }>> {
  const r = await from.execOk([process.execPath, WORKLOADS_BIN, 'udp', '--to', to, '--size', String(size), '--count', String(count)], { timeoutMs: 15_000 });
  return (JSON.parse(r) as { replies: Array<{ ok: boolean; bytes: number }> }).replies;
}
