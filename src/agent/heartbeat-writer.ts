// This node's heartbeat Lease (see announce/heartbeats.ts): created when missing, replaced
// (conditional on its resourceVersion) on every renew, re-read after a conflict.
import type { V1Lease } from '@kubernetes/client-node';
import { heartbeatLease, heartbeatName, type Heartbeat } from '../announce/heartbeats.js';
import type { JsonClient } from '../k8s/client.js';

export interface HeartbeatSink {
  renew(hb: Heartbeat): Promise<void>;
}

const code = (e: unknown) => (e as { code?: number }).code;

export class HeartbeatWriter implements HeartbeatSink {
  private current: V1Lease | undefined;
  private readonly path: string;

  constructor(private readonly api: JsonClient, private readonly namespace: string, node: string, private readonly now: () => number = Date.now) {
    this.path = `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/leases`;
    this.name = heartbeatName(node);
  }

  private readonly name: string;

  async renew(hb: Heartbeat): Promise<void> {
    for (let attempt = 0; attempt < 2; attempt++) {
      if (!this.current) {
        try {
          this.current = await this.api.request<V1Lease>('GET', `${this.path}/${encodeURIComponent(this.name)}`);
        } catch (e) {
          if (code(e) !== 404) throw e;
          this.current = await this.api.request<V1Lease>('POST', this.path, heartbeatLease(this.namespace, hb, new Date(this.now())));
          return;
        }
      }
      try {
        this.current = await this.api.request<V1Lease>('PUT', `${this.path}/${encodeURIComponent(this.name)}`, heartbeatLease(this.namespace, hb, new Date(this.now()), this.current));
        return;
      } catch (e) {
        this.current = undefined; // re-read: someone else wrote it, or it was deleted
        if (code(e) !== 409 && code(e) !== 404) throw e;
      }
    }
  }
}
