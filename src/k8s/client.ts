// How the agent reaches the API server: a kubeconfig file, or in-cluster credentials (on
// Talos, KUBERNETES_SERVICE_HOST=localhost and KUBERNETES_SERVICE_PORT=7445 reach KubePrism).
import { KubeConfig } from '@kubernetes/client-node';
import { ErrorCode, FerryError } from '../errors.js';

/**
 * `path`, or else in-cluster credentials (daemons); with `fallback: 'default'`, kubectl's
 * order instead ($KUBECONFIG, ~/.kube/config, in-cluster), for commands a human runs.
 */
export function kubeConfig(path: string, fallback: 'in-cluster' | 'default' = 'in-cluster'): KubeConfig {
  const kc = new KubeConfig();
  try {
    if (path) kc.loadFromFile(path);
    else if (fallback === 'default') kc.loadFromDefault();
    else kc.loadFromCluster();
  } catch (e) {
    throw new FerryError({
      code: ErrorCode.Config,
      op: path ? `read kubeconfig ${path}` : 'load in-cluster config',
      cause: (e as Error).message,
      hint: path ? 'check the path (--kubeconfig)' : 'run in a pod with a service account, or pass --kubeconfig',
    });
  }
  if (!kc.getCurrentCluster()) {
    throw new FerryError({ code: ErrorCode.Config, op: 'load kubeconfig', cause: 'no current cluster', hint: 'set current-context, or KUBERNETES_SERVICE_HOST/PORT in a pod' });
  }
  return kc;
}
