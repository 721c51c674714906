// The sandbox's API server as a cluster's: a CA made for this sandbox (openssl), a serving
// certificate for the address the nodes use, a bearer token per ServiceAccount of the
// manifests (ferry, ferry-operator), each with a kubeconfig (server, CA, token), and the
// RBAC of the rendered manifests, which the API server enforces.
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderObjects, type ManifestOptions } from '../deploy/manifests.js';
import { execOk } from '../sys/exec.js';
import { RbacPolicy } from './apiserver/rbac.js';
import type { AccessRecord } from './apiserver/server.js';

export const AGENT_USER = 'system:serviceaccount:kube-system:ferry';
export const OPERATOR_USER = 'system:serviceaccount:kube-system:ferry-operator';

export class ClusterIdentity {
  /** The manifests' objects (generic overlay, pointed at the sandbox's API server). */
  readonly objects: ReturnType<typeof renderObjects>;
  /** Enforced now; a test may take a rule away (RbacPolicy.withoutRule). */
  policy: RbacPolicy;
  private readonly tokens = new Map<string, string>();

  private constructor(
    private readonly dir: string,
    readonly key: string,
    readonly cert: string,
    readonly ca: string,
    apiServer: string,
    settings: Pick<ManifestOptions, 'mode' | 'acceleration'>,
  ) {
    this.objects = renderObjects({ talos: false, apiServer, ...settings });
    this.policy = new RbacPolicy(this.objects);
    for (const user of [AGENT_USER, OPERATOR_USER]) this.tokens.set(randomBytes(24).toString('hex'), user);
  }

  /** Keys and certificates in `dir`, for the API server at host:port (and loopback). */
  static async create(dir: string, host: string, port: number, settings: Pick<ManifestOptions, 'mode' | 'acceleration'> = {}): Promise<ClusterIdentity> {
    const f = (n: string) => join(dir, n);
    const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
    await execOk('openssl', ['req', '-x509', ...ec, '-keyout', f('ca.key'), '-out', f('ca.crt'), '-days', '7', '-subj', '/CN=ferry-sandbox-ca']);
    await execOk('openssl', ['req', ...ec, '-keyout', f('apiserver.key'), '-out', f('apiserver.csr'), '-subj', '/CN=kube-apiserver']);
    writeFileSync(f('apiserver.ext'), `subjectAltName=IP:${host},IP:127.0.0.1\nextendedKeyUsage=serverAuth\n`);
    await execOk('openssl', ['x509', '-req', '-in', f('apiserver.csr'), '-CA', f('ca.crt'), '-CAkey', f('ca.key'), '-CAcreateserial', '-out', f('apiserver.crt'), '-days', '7', '-extfile', f('apiserver.ext')]);
    const read = (n: string) => readFileSync(f(n), 'utf8');
    return new ClusterIdentity(dir, read('apiserver.key'), read('apiserver.crt'), read('ca.crt'), `${host}:${port}`, settings);
  }

  /** The manifests' RBAC must have sufficed: a refusal under it is a missing rule. */
  checkSufficient(access: readonly AccessRecord[]): void {
    const refused = access.filter((a) => a.allowed === false && a.policy === 'manifests');
    if (refused.length) throw new Error(`RBAC refused ${refused.length} request(s) the manifests should allow: ${refused.slice(0, 5).map((a) => `${a.user} ${a.verb} ${a.group}/${a.resource} ${a.namespace ?? ''}/${a.name ?? ''}`).join('; ')}`);
  }

  userOf(token: string): string | undefined {
    return this.tokens.get(token);
  }

  tokenOf(user: string): string {
    const t = [...this.tokens].find(([, u]) => u === user)?.[0];
    if (!t) throw new Error(`no token for ${user}`);
    return t;
  }

  /** A kubeconfig for `user` at `server` (https), written in the sandbox's directory. */
  kubeconfig(user: string, server: string): string {
    const name = user.split(':').at(-1)!;
    const path = join(this.dir, `kubeconfig-${name}`);
    writeFileSync(path, `apiVersion: v1
kind: Config
clusters:
- name: sandbox
  cluster:
    server: ${server}
    certificate-authority-data: ${Buffer.from(this.ca).toString('base64')}
users:
- name: ${name}
  user:
    token: ${this.tokenOf(user)}
contexts:
- name: ${name}
  context: { cluster: sandbox, user: ${name} }
current-context: ${name}
`, { mode: 0o600 });
    return path;
  }
}
