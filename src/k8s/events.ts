// Kubernetes Events for objects the agent refuses, so `kubectl describe` shows why.
import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';

export interface EventSink {
  warn(obj: { kind: string; namespace: string; name: string }, reason: string, message: string): Promise<void>;
}

export function eventSink(kc: KubeConfig, component: string, nodeName: string): EventSink {
  const api = kc.makeApiClient(CoreV1Api);
  return {
    async warn(obj, reason, message) {
      const now = new Date();
      await api.createNamespacedEvent({
        namespace: obj.namespace || 'default',
        body: {
          metadata: { generateName: `${obj.name || 'unnamed'}.`, namespace: obj.namespace || 'default' },
          involvedObject: { kind: obj.kind, namespace: obj.namespace, name: obj.name, apiVersion: obj.kind === 'EndpointSlice' ? 'discovery.k8s.io/v1' : 'v1' },
          reason,
          message,
          type: 'Warning',
          source: { component, host: nodeName },
          reportingComponent: component,
          reportingInstance: nodeName,
          firstTimestamp: now,
          lastTimestamp: now,
          count: 1,
        },
      });
    },
  };
}
