// A previous ferry release, unpacked: what a node ran before an upgrade. The tarballs are
// made by scripts/snapshot-release.sh from a commit (bin/, dist/, the BPF objects); they
// run with this checkout's node_modules, linked in.
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFileSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { FrontendSpec } from '../model/frontend.js';
import type { Host, Proc } from './netns/testbed.js';
import type { TcProgram } from './packet-fixture.js';

const PACKAGE_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The last release with map layout 1 (before ct4_entry gained the arrival device). */
export const LAYOUT_1_RELEASE = join(PACKAGE_ROOT, 'test', 'fixtures', 'releases', 'layout-1.tar.gz');

export interface UnpackedRelease {
  root: string;
  /** The commit it was built from. */
  commit: string;
  /** Its `ferry` command, and its BPF objects. */
  bin: string;
  objectsDir: string;
  remove(): void;
}

export function unpackRelease(tarball = LAYOUT_1_RELEASE): UnpackedRelease {
  const root = mkdtempSync(join(tmpdir(), 'ferry-release-'));
  try {
    execFileSync('tar', ['-xzf', tarball, '-C', root]);
    symlinkSync(join(PACKAGE_ROOT, 'node_modules'), join(root, 'node_modules'));
  } catch (e) {
    rmSync(root, { recursive: true, force: true });
    throw e;
  }
  return {
    root,
    commit: readFileSync(join(root, 'RELEASE'), 'utf8').trim(),
    bin: join(root, 'bin', 'ferry.js'),
    objectsDir: join(root, 'build', 'bpf'),
    remove: () => rmSync(root, { recursive: true, force: true }),
  };
}

/** A previous release's datapath, loaded and run by its own code in a process of its own. */
export interface ReleaseDatapath {
  apply(services: FrontendSpec[]): Promise<void>;
  /** PROG_TEST_RUN of one of its programs. */
  run(program: TcProgram, data: Buffer, ifindex: number): Promise<{ retval: number; data: Buffer }>;
  /** Leave the datapath as a stopping agent does (pinned, attached), and end the process. */
  release(): Promise<void>;
  proc: Proc;
}

/** Load a release's datapath in a node (its pin directory, in its namespace). */
export async function startReleaseDatapath(release: UnpackedRelease, host: Host, config: { pinDir: string; snatIPv4: string; hashSeed?: number }): Promise<ReleaseDatapath> {
  const worker = join(PACKAGE_ROOT, 'dist', 'sandbox', 'release-worker.js'); // built, also when run from src/ by the tests
  const proc = host.spawn([process.execPath, worker, release.root], process.env, { stdin: true });
  const lines = createInterface({ input: proc.child.stdout! })[Symbol.asyncIterator]();
  const next = async (): Promise<Record<string, unknown>> => {
    const r = await lines.next();
    if (r.done) throw new Error(`the release worker ended:\n${proc.output()}`);
    const m = JSON.parse(r.value) as Record<string, unknown>;
    if (typeof m.error === 'string') throw new Error(`release ${release.commit}: ${m.error}`);
    return m;
  };
  const call = (m: object) => {
    proc.child.stdin!.write(`${JSON.stringify(m)}\n`);
    return next();
  };
  await next(); // ready
  await call({ op: 'load', config });
  return {
    proc,
    apply: async (services) => void (await call({ op: 'apply', services })),
    run: async (program, data, ifindex) => {
      const r = await call({ op: 'run', program, data: data.toString('hex'), ifindex });
      return { retval: r.retval as number, data: Buffer.from(r.data as string, 'hex') };
    },
    release: async () => {
      await call({ op: 'release' });
      await proc.exited;
    },
  };
}
