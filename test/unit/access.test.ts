// The agent's own credentials (no @kubernetes/client-node): kubeconfig files with a token,
// a token file, client certificates inline or by relative path; in-cluster credentials
// whose rotated token is read again; exec plugins refused with a clear error; and a real
// request through JsonClient to the test API server.
import { mkdtempSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { inClusterAccess, kubeconfigAccess } from '../../src/k8s/access.js';
import { JsonClient } from '../../src/k8s/client.js';
import { testKubeconfig } from '../../src/sandbox/apiserver/kubeconfig.js';
import { TestApiServer } from '../../src/sandbox/apiserver/server.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'ferry-access-'));
});

const kubeconfig = (cluster: string, user: string) => `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
${cluster}
users:
- name: u
  user:
${user}
contexts:
- name: x
  context: { cluster: c, user: u }
current-context: x
`;

describe('API credentials without client-node', () => {
  let server: TestApiServer | undefined;
  afterEach(async () => {
    await server?.stop();
    server = undefined;
  });

  it('reads the test API server kubeconfig and makes a real request through JsonClient', async () => {
    server = new TestApiServer();
    await server.start();
    server.store.create('services', { metadata: { name: 'web', namespace: 'default' }, spec: { clusterIP: '10.96.0.10', ports: [{ port: 80 }] } } as never);
    writeFileSync(join(dir, 'kc'), testKubeconfig(server.url));
    const list = await new JsonClient(kubeconfigAccess(join(dir, 'kc'))).request<{ items: Array<{ metadata: { name: string } }> }>('GET', '/api/v1/services');
    expect(list.items.map((s) => s.metadata.name)).toEqual(['web']);
  });

  it('a bearer token, inline or from a file next to the kubeconfig', async () => {
    writeFileSync(join(dir, 'a'), kubeconfig('    server: https://10.0.0.1:6443', '    token: abc'));
    expect((await kubeconfigAccess(join(dir, 'a')).credentials(new URL('https://10.0.0.1:6443/api'), 'GET')).headers).toEqual({ authorization: 'Bearer abc' });
    writeFileSync(join(dir, 'tok'), 'from-file\n');
    writeFileSync(join(dir, 'b'), kubeconfig('    server: https://10.0.0.1:6443', '    tokenFile: tok'));
    expect((await kubeconfigAccess(join(dir, 'b')).credentials(new URL('https://10.0.0.1:6443/api'), 'GET')).headers).toEqual({ authorization: 'Bearer from-file' });
  });

  it('a CA and a client certificate, inline (base64) or by path relative to the kubeconfig', async () => {
    writeFileSync(join(dir, 'ca.pem'), 'CA-PEM');
    writeFileSync(join(dir, 'k'), kubeconfig('    server: https://api:6443\n    certificate-authority: ca.pem', `    client-certificate-data: ${Buffer.from('CERT').toString('base64')}\n    client-key-data: ${Buffer.from('KEY').toString('base64')}`));
    const { agent, headers } = await kubeconfigAccess(join(dir, 'k')).credentials(new URL('https://api:6443/'), 'GET');
    expect(headers).toEqual({});
    expect(agent).toBeInstanceOf(https.Agent);
    const o = (agent as https.Agent & { options: { ca: Buffer; cert: Buffer; key: Buffer; rejectUnauthorized: boolean } }).options;
    expect([o.ca.toString(), o.cert.toString(), o.key.toString(), o.rejectUnauthorized]).toEqual(['CA-PEM', 'CERT', 'KEY', true]);
  });

  it('refuses what the agent cannot do, saying what to use instead', () => {
    writeFileSync(join(dir, 'e'), kubeconfig('    server: https://api:6443', '    exec: { command: aws, apiVersion: client.authentication.k8s.io/v1 }'));
    expect(() => kubeconfigAccess(join(dir, 'e'))).toThrow(/exec plugin .* \(give the agent a token, a client certificate, or its in-cluster service account\)/);
    writeFileSync(join(dir, 'f'), kubeconfig('    server: ftp://api', '    token: t'));
    expect(() => kubeconfigAccess(join(dir, 'f'))).toThrow(/is not an http\(s\) URL/);
    writeFileSync(join(dir, 'g'), kubeconfig('    server: https://api:6443\n    certificate-authority: missing.pem', '    token: t'));
    expect(() => kubeconfigAccess(join(dir, 'g'))).toThrow(/a file the kubeconfig names cannot be read/);
    expect(() => kubeconfigAccess(join(dir, 'nope'))).toThrow(/read kubeconfig .*nope/);
  });

  it('in-cluster: KubePrism on Talos, the mounted CA, and a token read again after it rotates', async () => {
    writeFileSync(join(dir, 'ca.crt'), 'CLUSTER-CA');
    writeFileSync(join(dir, 'token'), 'first');
    const a = inClusterAccess({ KUBERNETES_SERVICE_HOST: 'localhost', KUBERNETES_SERVICE_PORT: '7445' }, dir);
    expect(a.server).toBe('https://localhost:7445');
    const first = await a.credentials(new URL('https://localhost:7445/'), 'GET');
    expect(first.headers).toEqual({ authorization: 'Bearer first' });
    expect((first.agent as https.Agent & { options: { ca: Buffer } }).options.ca.toString()).toBe('CLUSTER-CA');
    writeFileSync(join(dir, 'token'), 'rotated');
    const realNow = Date.now;
    Date.now = () => realNow() + 61_000;
    try {
      expect((await a.credentials(new URL('https://localhost:7445/'), 'GET')).headers).toEqual({ authorization: 'Bearer rotated' });
    } finally {
      Date.now = realNow;
    }
    expect(inClusterAccess({ KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' }, dir).server).toBe('https://[fd00::1]:443');
    expect(() => inClusterAccess({}, dir)).toThrow(/KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set/);
  });
});
