// A kubeconfig pointing at a test API server (plain HTTP, no credentials).
export function testKubeconfig(url: string): string {
  return `apiVersion: v1
kind: Config
clusters:
- name: ferry-test
  cluster:
    server: ${url}
    insecure-skip-tls-verify: true  # plain HTTP: client-node asks for this flag
users:
- name: ferry-test
  user: {}
contexts:
- name: ferry-test
  context:
    cluster: ferry-test
    user: ferry-test
current-context: ferry-test
`;
}
