// Errors an operator meets before anything works: not root, no libbpf. Each says what to do.
import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { expect, it } from 'vitest';
import { bpfObject, REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';

/** Try to load the counter object in a child process; report the error it got. */
function loadInChild(opts: { withoutCaps?: boolean; env?: NodeJS.ProcessEnv }): { code: string; message: string } {
  const script = `
    import { BpfObject } from ${JSON.stringify(resolve(REPO_ROOT, 'dist/ebpf/index.js'))};
    try {
      const o = BpfObject.open(${JSON.stringify(bpfObject('tests/pkt_counter'))});
      try { o.load(); } finally { o.close(); }
      console.log(JSON.stringify({ code: 'none', message: 'loaded' }));
    } catch (e) {
      console.log(JSON.stringify({ code: e.code, message: e.message }));
    }`;
  const node = [process.execPath, '--input-type=module', '-e', script];
  const argv = opts.withoutCaps
    ? ['setpriv', '--inh-caps=-all', '--bounding-set=-all', ...node] // uid 0, but no capabilities: files stay readable wherever CI cloned to
    : node;
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', env: { ...process.env, ...opts.env } });
  if (r.status !== 0) throw new Error(`child failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { code: string; message: string };
}

describeWith(['root'], 'operator hints', () => {
  it('tells an unprivileged user to run as root', () => {
    const r = loadInChild({ withoutCaps: true });
    expect(r.code).toBe('FERRY_PERMISSION');
    expect(r.message).toMatch(/^load .*pkt_counter\.bpf\.o: operation not permitted: .*Operation not permitted.* \(run as root, or grant CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN\)$/);
  });

  it('tells how to install libbpf when it is missing', () => {
    const r = loadInChild({ env: { FERRY_LIBBPF: 'libbpf-missing.so.9' } });
    expect(r.code).toBe('FERRY_LIBBPF_MISSING');
    expect(r.message).toMatch(/^load libbpf-missing\.so\.9: .*\(install libbpf 1\.x \(Debian: apt-get install libbpf1\), or run make setup\)$/);
  });

  it('loads as root (the control for the two above)', () => {
    expect(loadInChild({})).toEqual({ code: 'none', message: 'loaded' });
  });
});
