// Run a command and collect its output; failures become errors that show stderr.
import { execFile } from 'node:child_process';

export interface ExecResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function exec(cmd: string, args: readonly string[], opts: { timeoutMs?: number; input?: string } = {}): Promise<ExecResult> {
  return new Promise((resolve) => {
    const child = execFile(cmd, args, { timeout: opts.timeoutMs ?? 30_000, maxBuffer: 64 << 20, encoding: 'utf8' }, (err, stdout, stderr) => {
      // err.code is the exit status, or a string such as ENOENT when the spawn failed.
      const status = (err as { code?: unknown } | null)?.code;
      const code = !err ? 0 : typeof status === 'number' ? status : 127;
      resolve({ code, stdout, stderr: stderr || (err ? err.message : '') });
    });
    if (opts.input !== undefined) child.stdin?.end(opts.input);
  });
}

/** Run and throw on a non-zero exit, quoting the command and its stderr. */
export async function execOk(cmd: string, args: readonly string[], opts: { timeoutMs?: number; input?: string } = {}): Promise<string> {
  const r = await exec(cmd, args, opts);
  if (r.code !== 0) {
    throw new Error(`${cmd} ${args.join(' ')}: exit ${r.code}: ${r.stderr.trim() || r.stdout.trim()}`);
  }
  return r.stdout;
}
