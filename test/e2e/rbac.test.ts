// The manifests' RBAC, enforced: the sandbox's API server serves the agents and operators
// over TLS, knows them by their ServiceAccount tokens and refuses (403) what the rendered
// ClusterRoles, Roles and bindings do not grant. Every sandbox test runs so (Sandbox.down
// fails on a refusal under the manifests' own policy). Here: a scenario that exercises what
// the agents and the operator do with L2 announcements (and the operator's status on
// announcement objects); then every rule, and every verb
// of every rule, is shown to be needed: without it, a request they made is refused; one
// rule is taken away live and the agents' heartbeats fail.
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { AGENT_USER, OPERATOR_USER } from '../../src/sandbox/cluster-identity.js';
import { Sandbox } from '../../src/sandbox/sandbox.js';
import { describeWith } from '../harness/requirements.js';
import { eventually } from '../harness/wait.js';

let sb: Sandbox;

/** Grants the scenario does not exercise, and why they are there anyway. */
const NOT_EXERCISED: Record<string, string> = {
  'secrets:get': 'a BGPPeer\'s password Secret: this L2 scenario has none (test/e2e/bgp.test.ts brings up sessions with one)',
};

beforeAll(async () => {
  sb = await Sandbox.up({ name: 'rbac', nodes: 2, mode: 'snat', announce: 'l2', log: pino({ level: 'silent' }), agentEnv: { FERRY_MIN_SYNC_PERIOD_MS: '20' } });
  await sb.put('Deployment', {
    apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'web', namespace: 'default' },
    spec: { replicas: 2, selector: { matchLabels: { app: 'web' } }, template: { metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'whoami', image: 'whoami', ports: [{ containerPort: 8080 }] }] } } },
  });
  // For the operator's status writes on BGP objects: a peer the agents leave out (its
  // keepalive is more than a third of its hold time) and an advertisement naming a peer
  // that does not exist.
  await sb.put('BGPPeer', { apiVersion: 'ferry.dev/v1alpha1', kind: 'BGPPeer', metadata: { name: 'broken' }, spec: { peerAddress: '192.0.2.1', peerASN: 65000, myASN: 64512, holdTimeSeconds: 3, keepaliveTimeSeconds: 2 } });
  await sb.put('BGPAdvertisement', { apiVersion: 'ferry.dev/v1alpha1', kind: 'BGPAdvertisement', metadata: { name: 'to-nobody' }, spec: { peers: ['nobody'] } });
  for (const [name, etp] of [['web', 'Cluster'], ['web-local', 'Local']]) {
    await sb.put('Service', { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default' }, spec: { type: 'LoadBalancer', externalTrafficPolicy: etp, selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080 }] } });
  }
});
afterAll(async () => {
  await sb?.down();
});

const ingress = (name: string) => (sb.store.get('services', 'default', name) as { status?: { loadBalancer?: { ingress?: Array<{ ip: string }> } } } | undefined)?.status?.loadBalancer?.ingress?.[0]?.ip;

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'RBAC of the manifests, enforced', () => {
  it('the agents and the operator work under it: addresses given, announced, served; nothing refused', async () => {
    const ip = await eventually(async () => ingress('web'), (x) => Boolean(x), 30_000);
    const curl = async () => (await sb.net.client.exec(['curl', '-sS', '--max-time', '2', `http://${ip}/`])).stdout;
    expect(await eventually(curl, (o) => /Hostname: web-/.test(o), 30_000)).toMatch(/Hostname: web-/);
    // Events from both: the operator's IPAllocated, the agents' L2Announced.
    await eventually(async () => sb.store.list('events').map((e) => String(e.reason)), (r) => r.includes('IPAllocated') && r.includes('L2Announced'), 30_000);
    // The announcement objects' status, from the operator.
    const conditions = (plural: string, name: string) => ((sb.store.get(plural, undefined, name) as { status?: { conditions?: Array<{ type: string; status: string }> } } | undefined)?.status?.conditions ?? []).map((c) => `${c.type}=${c.status}`).join(' ');
    expect(await eventually(async () => conditions('l2announcementpolicies', 'default'), Boolean, 20_000)).toBe('Accepted=True');
    expect(await eventually(async () => conditions('bgppeers', 'broken'), Boolean, 20_000)).toBe('Accepted=False');
    expect(await eventually(async () => conditions('bgpadvertisements', 'to-nobody'), Boolean, 20_000)).toBe('Accepted=True ResolvedRefs=False');
    const mine = sb.api.access.filter((a) => a.user === AGENT_USER || a.user === OPERATOR_USER);
    expect(mine.filter((a) => a.user === AGENT_USER).length).toBeGreaterThan(20);
    expect(mine.filter((a) => a.user === OPERATOR_USER).length).toBeGreaterThan(10);
    expect(mine.filter((a) => !a.allowed)).toEqual([]);
  });

  it('every rule, and every verb, API group and resource in it, is needed: without it, a request they made is refused', async () => {
    // Long enough for the leader to renew its Lease (an update) at least once.
    await eventually(async () => sb.api.access.some((a) => a.user === OPERATOR_USER && a.resource === 'leases' && a.verb === 'update'), Boolean, 20_000);
    const made = sb.api.access.filter((a) => (a.user === AGENT_USER || a.user === OPERATOR_USER) && a.allowed && a.policy === 'manifests');
    const policy = sb.identity.policy;
    const ours = policy.rules.filter((r) => r.subjects.some((s) => s.kind === 'ServiceAccount' && ['ferry', 'ferry-operator'].includes(s.name)));
    expect(ours.length).toBeGreaterThanOrEqual(10);
    const unneeded: string[] = [];
    for (const r of ours) {
      const users = r.subjects.map((s) => `system:serviceaccount:${s.namespace ?? r.namespace}:${s.name}`);
      // Each verb: taken away, some request is refused (no other rule grants it).
      for (const verb of r.rule.verbs) {
        const reduced = policy.withoutRule(`${r.role}#${r.index}:${verb}`);
        const key = `${(r.rule.resources ?? []).join(',')}:${verb}`;
        if (!made.some((a) => !reduced.allows(a.user!, a)) && !NOT_EXERCISED[key]) unneeded.push(`${r.role}#${r.index} verb ${verb} (${key})`);
      }
      // Each API group and resource of it is one some request used.
      for (const group of r.rule.apiGroups ?? []) {
        for (const resource of r.rule.resources ?? []) {
          const used = made.some((a) => users.includes(a.user!) && a.group === group && a.resource === resource && r.rule.verbs.includes(a.verb));
          if (!used && !r.rule.verbs.every((v) => NOT_EXERCISED[`${resource}:${v}`])) unneeded.push(`${r.role}#${r.index} ${group || 'core'}/${resource}`);
        }
      }
    }
    expect(unneeded).toEqual([]);
  });

  it('a rule taken away live: the agents\' heartbeat Leases are refused (403) and counted as failed', async () => {
    const heartbeats = sb.identity.policy.rules.find((r) => r.role === 'Role/kube-system/ferry-heartbeats' && r.rule.resources?.includes('leases'))!;
    const before = sb.api.access.length;
    const failed = async () => {
      const m = await sb.net.node(1).host.execOk(['curl', '-sS', 'http://127.0.0.1:10249/metrics']);
      return Number(/^ferry_l2_heartbeats_total\{result="failed"\} (\d+)/m.exec(m)?.[1] ?? 0);
    };
    const failedBefore = await failed();
    const manifests = sb.identity.policy;
    sb.identity.policy = manifests.withoutRule(`${heartbeats.role}#${heartbeats.index}`);
    try {
      await eventually(failed, (n) => n > failedBefore, 10_000);
      const refused = sb.api.access.slice(before).filter((a) => a.allowed === false);
      expect(refused.length).toBeGreaterThan(0);
      expect(new Set(refused.map((a) => `${a.user} ${a.resource}`))).toEqual(new Set([`${AGENT_USER} leases`]));
    } finally {
      sb.identity.policy = manifests;
    }
  });
});
