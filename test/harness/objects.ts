// Kubernetes objects the sandbox tests create again and again.

/** A whoami pod (HTTP on 8080) labelled app=APP, placed on NODE. */
export const whoamiPod = (name: string, app: string, node: string) => `
apiVersion: v1
kind: Pod
metadata: { name: ${name}, namespace: default, labels: { app: ${app} } }
spec: { nodeName: ${node}, containers: [{ name: c, image: traefik/whoami, ports: [{ containerPort: 8080 }] }] }
`;
