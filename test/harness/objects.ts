// Kubernetes objects the sandbox tests create again and again.

import { expect } from 'vitest';
import type { Kubectl } from './kubectl.js';

/** A whoami pod (HTTP on 8080) labelled app=APP, placed on NODE. */
export const whoamiPod = (name: string, app: string, node: string) => `
apiVersion: v1
kind: Pod
metadata: { name: ${name}, namespace: default, labels: { app: ${app} } }
spec: { nodeName: ${node}, containers: [{ name: c, image: traefik/whoami, ports: [{ containerPort: 8080 }] }] }
`;

/** The announcement tests' pods: `web-N` (app=web) on every node, and `solo` on node-1. */
export async function webEverywhereSoloOnNode1(kubectl: Kubectl, nodes: ReadonlyArray<{ name: string }>): Promise<void> {
  for (const n of nodes) expect((await kubectl.apply(whoamiPod(`web-${n.name.slice(-1)}`, 'web', n.name))).code).toBe(0);
  expect((await kubectl.apply(whoamiPod('solo', 'solo', 'node-1'))).code).toBe(0);
}
