// deploy/kubernetes: both overlays render with `kubectl kustomize` and `ferry manifests`
// alike; every object, the CRDs included, is valid for Kubernetes 1.27 to 1.33 (so 1.31);
// custom resources in the docs are valid for their CRDs; the command's options and errors.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import { isIPv4, isIP } from 'node:net';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/agent/config.js';
import { kustomize, readObjects, type KObject } from '../../src/deploy/kustomize.js';
import { KUSTOMIZE_ROOT, renderManifests, renderObjects } from '../../src/deploy/manifests.js';
import { schemaProblems, unknownFields } from '../harness/k8s-schemas.js';
import { REPO_ROOT } from '../harness/paths.js';

const FERRY = join(REPO_ROOT, 'bin', 'ferry.js');
const GENERIC_PLACEHOLDER = 'kube-apiserver.invalid:6443';
const key = (o: KObject) => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
const byKey = (objects: KObject[]) => Object.fromEntries(objects.map((o) => [key(o), o]));

function kubectlKustomize(overlay: string): KObject[] {
  const r = spawnSync('kubectl', ['kustomize', join(KUSTOMIZE_ROOT, 'overlays', overlay)], { encoding: 'utf8' });
  expect(r.status, r.stderr).toBe(0);
  return parseAllDocuments(r.stdout).map((d) => d.toJSON() as KObject);
}

const everything = () => [...renderObjects({ talos: true }), ...['uninstall.yaml', 'cleanup-kube-proxy.yaml'].flatMap((f) => readObjects(join(KUSTOMIZE_ROOT, f)))];

describe('deploy/kubernetes', () => {
  it('ferry manifests renders each overlay as kubectl kustomize does', () => {
    const talos = kubectlKustomize('talos');
    expect(byKey(renderObjects({ talos: true }))).toEqual(byKey(talos));
    expect(byKey(renderObjects({ talos: false, apiServer: GENERIC_PLACEHOLDER }))).toEqual(byKey(kubectlKustomize('generic')));
    expect(Object.keys(byKey(talos)).sort()).toEqual([
      'ClusterRole//ferry', 'ClusterRole//ferry-operator', 'ClusterRoleBinding//ferry', 'ClusterRoleBinding//ferry-operator',
      'ConfigMap/kube-system/ferry', 'CustomResourceDefinition//bgpadvertisements.ferry.dev', 'CustomResourceDefinition//bgppeers.ferry.dev',
      'CustomResourceDefinition//l2announcementpolicies.ferry.dev', 'CustomResourceDefinition//loadbalancerippools.ferry.dev',
      'DaemonSet/kube-system/ferry', 'Deployment/kube-system/ferry-operator', 'Role/kube-system/ferry-heartbeats', 'Role/kube-system/ferry-operator-leader',
      'RoleBinding/kube-system/ferry-heartbeats', 'RoleBinding/kube-system/ferry-operator-leader', 'ServiceAccount/kube-system/ferry', 'ServiceAccount/kube-system/ferry-operator',
    ]);
  });

  it('the talos overlay reaches the API server through KubePrism, generic through the address given', () => {
    const env = (objects: KObject[], kind: string) => {
      const w = objects.find((o) => o.kind === kind) as unknown as { spec: { template: { spec: { containers: Array<{ env: Array<{ name: string; value?: string }> }> } } } };
      return Object.fromEntries(w.spec.template.spec.containers[0]!.env.filter((e) => e.name.startsWith('KUBERNETES_')).map((e) => [e.name, e.value]));
    };
    for (const kind of ['DaemonSet', 'Deployment']) {
      expect(env(renderObjects({ talos: true }), kind)).toEqual({ KUBERNETES_SERVICE_HOST: 'localhost', KUBERNETES_SERVICE_PORT: '7445' });
      expect(env(renderObjects({ talos: false, apiServer: '[fd00::10]:443' }), kind)).toEqual({ KUBERNETES_SERVICE_HOST: 'fd00::10', KUBERNETES_SERVICE_PORT: '443' });
    }
  });

  it('--image, --devices, --mode, --acceleration and --xdp-devices reach every container and the agent\'s configuration', () => {
    const out = spawnSync(process.execPath, [FERRY, 'manifests', '--talos', '--image', 'registry.example/ferry:1.2', '--devices', 'enp.*,bond0', '--mode', 'dsr', '--acceleration', 'best-effort', '--xdp-devices', 'enp.*'], { encoding: 'utf8' });
    expect(out.status, out.stderr).toBe(0);
    const objects = parseAllDocuments(out.stdout).map((d) => d.toJSON() as KObject & { spec?: { template?: { spec: { containers: Array<{ image: string }> } } }; data?: Record<string, string> });
    const images = objects.flatMap((o) => o.spec?.template?.spec.containers.map((c) => c.image) ?? []);
    expect(images).toEqual(['registry.example/ferry:1.2', 'registry.example/ferry:1.2', 'registry.example/ferry:1.2']);
    const file = join(mkdtempSync(join(tmpdir(), 'ferry-manifests-')), 'ferry.yaml');
    writeFileSync(file, objects.find((o) => o.kind === 'ConfigMap')!.data!['ferry.yaml']!);
    const cfg = loadConfig({ file, env: { NODE_NAME: 'n1' } });
    expect(cfg.devices).toEqual(['enp.*', 'bond0']);
    expect(cfg.forwardingMode).toBe('dsr');
    expect(cfg.acceleration).toBe('best-effort');
    expect(cfg.xdpDevices).toEqual(['enp.*']);
    expect(readFileSync(file, 'utf8')).toMatch(/# Every setting: README\.md/); // comments kept
  });

  it('refuses what it cannot render, with the reason', () => {
    const run = (...args: string[]) => spawnSync(process.execPath, [FERRY, 'manifests', ...args], { encoding: 'utf8' });
    expect(run().stderr).toMatch(/--api-server is needed without --talos/);
    expect(run('--talos', '--api-server', '10.0.0.1:6443').stderr).toMatch(/--api-server with --talos/);
    for (const bad of ['10.0.0.1', '10.0.0.1:0', '10.0.0.1:70000', 'a b:6443', '-x:6443']) expect(run('--api-server', bad).stderr, bad).toMatch(/not host:port/);
    expect(run('--talos', '--devices', 'eth0,,eth1').stderr).toMatch(/--devices entry "" is empty/);
    expect(run('--talos', '--acceleration', 'fast').stderr).toMatch(/--acceleration.*none, native, best-effort/);
    expect(run('--talos', '--devices', '(').stderr).toMatch(/is not a valid pattern/);
    expect(run('--talos', '--xdp-devices', 'eth0,(').stderr).toMatch(/--xdp-devices entry "\(" is not a valid pattern/);
    expect(run('--talos', '--mode', 'fast').stderr).toMatch(/Allowed choices are snat, dsr, hybrid/);
    expect(run('--talos', '--image', 'a b').stderr).toMatch(/not an image reference/);
    // A kustomize feature the renderer does not have is refused, not ignored.
    const dir = mkdtempSync(join(tmpdir(), 'ferry-kustomize-'));
    mkdirSync(join(dir, 'o'));
    writeFileSync(join(dir, 'o', 'kustomization.yaml'), 'resources: [a.yaml]\nimages: [{ name: ferry, newTag: "2" }]\n');
    writeFileSync(join(dir, 'o', 'a.yaml'), 'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: a }\n');
    expect(() => kustomize(join(dir, 'o'))).toThrow(/images not supported/);
    writeFileSync(join(dir, 'o', 'kustomization.yaml'), 'resources: [a.yaml]\npatches: [{ path: p.yaml, target: { kind: Secret } }]\n');
    writeFileSync(join(dir, 'o', 'p.yaml'), '- { op: add, path: /data, value: {} }\n');
    expect(() => kustomize(join(dir, 'o'))).toThrow(/matches no object/);
  }, 60_000); // thirteen CLI processes: over 5 s on a slow machine under make test's load

  it('every object (CRDs included) is valid for the Kubernetes 1.33 schemas, with no unknown field', () => {
    const objects = everything();
    expect(schemaProblems(objects, '1.33')).toEqual([]);
    expect(unknownFields(objects, '1.33')).toEqual([]);
  }, 60_000);

  it('and for 1.27, but for appArmorProfile (1.30): so every field is one 1.31 has', () => {
    const objects = everything();
    expect(schemaProblems(objects, '1.27')).toEqual([]);
    const problems = unknownFields(objects, '1.27');
    expect(problems, problems.join('\n')).toHaveLength(1);
    expect(problems[0]).toMatch(/^DaemonSet\/ferry: .*'"appArmorProfile"' does not exist in type 'ISecurityContext'/);
  }, 60_000);

  it('uses only APIs that are GA in every version from 1.27 (the schema packages also keep removed ones)', () => {
    const ga = new Set(['v1', 'apps/v1', 'rbac.authorization.k8s.io/v1', 'apiextensions.k8s.io/v1']);
    expect(everything().filter((o) => !ga.has(o.apiVersion)).map(key)).toEqual([]);
  });

  it('the schema check can fail: a misspelt field, a wrong type, an unknown kind', () => {
    const ds = structuredClone(renderObjects({ talos: true }).find((o) => o.kind === 'DaemonSet')!) as KObject & { spec: Record<string, unknown> & { template: { spec: { containers: Array<Record<string, unknown>> } } } };
    ds.spec.template.spec.containers[0]!.imagePullPolcy = 'Always';
    ds.spec.minReadySeconds = 'soon';
    expect(unknownFields([ds], '1.33').join('\n')).toMatch(/imagePullPolcy/);
    expect(schemaProblems([ds], '1.33').join('\n')).toMatch(/minReadySeconds must be integer/);
    expect(schemaProblems([{ apiVersion: 'apps/v1', kind: 'DaemonSat', metadata: { name: 'typo' } } as KObject], '1.33')).toEqual(['DaemonSat/typo: apps/v1 DaemonSat is not in Kubernetes 1.33']);
  }, 60_000);

  it('the custom resources in the README and demo/ are valid for the CRDs', () => {
    const crds = renderObjects({ talos: true }).filter((o) => o.kind === 'CustomResourceDefinition') as unknown as Array<{ spec: { names: { kind: string }; versions: Array<{ name: string; schema: { openAPIV3Schema: object } }> } }>;
    const ajv = new Ajv({ strict: false, allErrors: true });
    ajv.addFormat('ipv4', (s: string) => isIPv4(s));
    ajv.addFormat('cidr', (s: string) => /^[^/]+\/\d{1,3}$/.test(s) && isIP(s.split('/')[0]!) !== 0);
    ajv.addFormat('date-time', (s: string) => !Number.isNaN(Date.parse(s)));
    const validators = new Map(crds.map((c) => [c.spec.names.kind, ajv.compile(c.spec.versions[0]!.schema.openAPIV3Schema)]));
    const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
    const blocks = [...readme.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]!);
    const docs = [...blocks, readFileSync(join(REPO_ROOT, 'demo', 'l2.yaml'), 'utf8')].flatMap((text) => parseAllDocuments(text).map((d) => d.toJSON() as { kind?: string; metadata?: { name?: string } } | null));
    const custom = docs.filter((d): d is { kind: string; metadata: { name: string } } => Boolean(d?.kind && validators.has(d.kind)));
    expect(custom.length).toBeGreaterThanOrEqual(4);
    for (const cr of custom) {
      const validate = validators.get(cr.kind)!;
      expect(validate(cr) ? [] : validate.errors, `${cr.kind}/${cr.metadata.name}`).toEqual([]);
    }
    // And the check can fail.
    expect(validators.get('LoadBalancerIPPool')!({ apiVersion: 'ferry.dev/v1alpha1', kind: 'LoadBalancerIPPool', metadata: { name: 'x' }, spec: { blocks: [{ cidr: 'ten/8' }] } })).toBe(false);
  });

  it('renders as YAML that kubectl reads back to the same objects', () => {
    const text = renderManifests({ talos: true });
    expect(parseAllDocuments(text).map((d) => d.toJSON())).toEqual(renderObjects({ talos: true }));
  });
});
