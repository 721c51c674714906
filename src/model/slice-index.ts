// EndpointSlices by the Service they belong to (kubernetes.io/service-name), kept from the
// watch events, so a sync finds one Service's slices without a walk over all of them.
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { LABEL_SERVICE_NAME } from './service.js';

export class SliceIndex {
  private readonly byService = new Map<string, Map<string, V1EndpointSlice>>();
  /** Slice → the Service it was filed under (its label may change). */
  private readonly serviceOf = new Map<string, string>();

  update(kind: 'add' | 'update' | 'delete', slice: V1EndpointSlice): void {
    const key = `${slice.metadata?.namespace ?? ''}/${slice.metadata?.name ?? ''}`;
    const was = this.serviceOf.get(key);
    if (was !== undefined) {
      const m = this.byService.get(was)!;
      m.delete(key);
      if (m.size === 0) this.byService.delete(was);
      this.serviceOf.delete(key);
    }
    const owner = slice.metadata?.labels?.[LABEL_SERVICE_NAME];
    if (kind === 'delete' || !owner) return;
    const service = `${slice.metadata?.namespace ?? ''}/${owner}`;
    let m = this.byService.get(service);
    if (!m) this.byService.set(service, (m = new Map()));
    m.set(key, slice);
    this.serviceOf.set(key, service);
  }

  of(namespace: string, name: string): V1EndpointSlice[] {
    return [...(this.byService.get(`${namespace}/${name}`)?.values() ?? [])];
  }
}
