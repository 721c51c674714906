// The sandbox's API server from the CLI and the tests: raw REST calls by kind.
const RESOURCES: Record<string, { path: string; namespaced: boolean; plural?: string }> = {
  Service: { path: '/api/v1', namespaced: true },
  Pod: { path: '/api/v1', namespaced: true },
  Deployment: { path: '/apis/apps/v1', namespaced: true },
  EndpointSlice: { path: '/apis/discovery.k8s.io/v1', namespaced: true },
  Namespace: { path: '/api/v1', namespaced: false },
  Lease: { path: '/apis/coordination.k8s.io/v1', namespaced: true },
  Event: { path: '/api/v1', namespaced: true },
  Secret: { path: '/api/v1', namespaced: true },
  CustomResourceDefinition: { path: '/apis/apiextensions.k8s.io/v1', namespaced: false },
  LoadBalancerIPPool: { path: '/apis/ferry.dev/v1alpha1', namespaced: false },
  L2AnnouncementPolicy: { path: '/apis/ferry.dev/v1alpha1', namespaced: false, plural: 'l2announcementpolicies' },
  BGPPeer: { path: '/apis/ferry.dev/v1alpha1', namespaced: false, plural: 'bgppeers' },
  BGPAdvertisement: { path: '/apis/ferry.dev/v1alpha1', namespaced: false, plural: 'bgpadvertisements' },
};
const plural = (kind: string) => RESOURCES[kind]?.plural ?? `${kind.toLowerCase()}s`;

/** The sandbox's own requests say so (tests tell them from ferry's in the access log). */
export const SANDBOX_USER_AGENT = 'ferry-sandbox';

/** A tiny API client (loopback only: the sandbox's API server listens there). */
export class SandboxApi {
  constructor(readonly base: string) {}
  async call(method: string, path: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
    const r = await fetch(`${this.base}${path}`, { method, headers: { 'content-type': method === 'PATCH' ? 'application/merge-patch+json' : 'application/json', 'user-agent': SANDBOX_USER_AGENT }, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: r.status, json: (await r.json()) as Record<string, unknown> };
  }
  url(kind: string, ns: string, name?: string): string {
    const r = RESOURCES[kind];
    if (!r) throw new Error(`kind ${kind} is not supported by the sandbox (${Object.keys(RESOURCES).join(', ')})`);
    return `${r.path}${r.namespaced ? `/namespaces/${ns}` : ''}/${plural(kind)}${name ? `/${name}` : ''}`;
  }
}
