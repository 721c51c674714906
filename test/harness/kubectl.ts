// kubectl against a sandbox, asynchronously (its API server runs in the test's process:
// a blocking child would starve it), with client-side validation off (the test API server
// serves no OpenAPI documents).
import { exec } from '../../src/sys/exec.js';

export interface Kubectl {
  (args: string[], input?: string): Promise<{ code: number; out: string; err: string }>;
  apply(yaml: string): Promise<{ code: number; out: string; err: string }>;
  /** A Service's LoadBalancer ingress addresses, comma-joined ('' while it has none). */
  lbAddresses(name: string, namespace?: string): Promise<string>;
}

export function kubectlFor(kubeconfig: () => string): Kubectl {
  const run = async (args: string[], input?: string) => {
    const validating = ['apply', 'create'].includes(args[0]!) ? ['--validate=false'] : [];
    const r = await exec('kubectl', ['--kubeconfig', kubeconfig(), ...args, ...validating], { input, timeoutMs: 30_000 });
    return { code: r.code, out: r.stdout, err: r.stderr };
  };
  const lbAddresses = async (name: string, namespace = 'default') => {
    const svc = JSON.parse((await run(['get', 'svc', name, '-n', namespace, '-o', 'json'])).out || '{}') as { status?: { loadBalancer?: { ingress?: Array<{ ip: string }> } } };
    return (svc.status?.loadBalancer?.ingress ?? []).map((i) => i.ip).join(',');
  };
  return Object.assign(run, { apply: (yaml: string) => run(['apply', '-f', '-'], yaml), lbAddresses });
}
