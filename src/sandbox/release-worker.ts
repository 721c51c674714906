// The datapath of a previous ferry release in a process of its own, as its agent ran it:
// that release's code loads, writes and runs its programs. Driven from a test over stdin
// and stdout, one JSON message per line (previous-release.ts is the other end).
//   node release-worker.js <release root>
import { join } from 'node:path';
import { createInterface } from 'node:readline';

interface OldDatapath {
  maps: unknown;
  tc: { program(name: string): unknown };
  release(): void;
}

const root = process.argv[2];
if (!root) throw new Error('usage: release-worker <release root>');
const from = <T>(module: string) => import(join(root, 'dist', module)) as Promise<T>;
const { Datapath } = await from<{ Datapath: { load(cfg: unknown): OldDatapath } }>('datapath/loader.js');
const { ServiceWriter } = await from<{ ServiceWriter: new (maps: unknown, o: object) => { apply(s: unknown): void } }>('datapath/writer.js');
const { testRun } = await from<{ testRun(p: unknown, i: { data: Buffer; ctx: Buffer }): { retval: number; data: Buffer } }>('ebpf/test-run.js');
const { skbContext } = await from<{ skbContext(o: { ifindex: number }): Buffer }>('ebpf/skb-context.js');
const { netnsCookie } = await from<{ netnsCookie(): bigint }>('sys/socket.js');

let dp: OldDatapath | undefined;
const reply = (m: object) => process.stdout.write(`${JSON.stringify(m)}\n`);
reply({ ready: true });
for await (const line of createInterface({ input: process.stdin })) {
  const cmd = JSON.parse(line) as { op: string; [k: string]: unknown };
  try {
    if (cmd.op === 'load') {
      dp = Datapath.load({ ...(cmd.config as object), objectsDir: join(root, 'build', 'bpf'), hostNetnsCookie: netnsCookie() });
      reply({ ok: true });
    } else if (cmd.op === 'apply') {
      new ServiceWriter(dp!.maps, {}).apply(cmd.services);
      reply({ ok: true });
    } else if (cmd.op === 'run') {
      const r = testRun(dp!.tc.program(cmd.program as string), { data: Buffer.from(cmd.data as string, 'hex'), ctx: skbContext({ ifindex: cmd.ifindex as number }) });
      reply({ retval: r.retval, data: r.data.toString('hex') });
    } else if (cmd.op === 'release') {
      dp?.release();
      reply({ ok: true });
      process.exit(0);
    } else {
      reply({ error: `unknown op ${cmd.op}` });
    }
  } catch (e) {
    reply({ error: (e as Error).message });
  }
}
