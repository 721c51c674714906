// EndpointSlices by the Service they belong to (kubernetes.io/service-name), kept from the
// watch events, so a sync finds one Service's slices without a walk over all of them.
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { flat } from './flat-string.js';
import { LABEL_SERVICE_NAME } from './service.js';

const sliceKey = (s: V1EndpointSlice) => flat(`${s.metadata?.namespace ?? ''}/${s.metadata?.name ?? ''}`);

export class SliceIndex {
  /**
   * A Service's slices as a plain list: most Services have one or two, and at 50k
   * Services a Map per Service would cost three times the memory of a short array.
   */
  private readonly byService = new Map<string, V1EndpointSlice[]>();
  /** Slice → the Service it was filed under (its label may change). */
  private readonly serviceOf = new Map<string, string>();

  update(kind: 'add' | 'update' | 'delete', slice: V1EndpointSlice): void {
    const key = sliceKey(slice);
    const was = this.serviceOf.get(key);
    if (was !== undefined) {
      const rest = this.byService.get(was)!.filter((s) => (s.metadata?.name ?? '') !== (slice.metadata?.name ?? '') || (s.metadata?.namespace ?? '') !== (slice.metadata?.namespace ?? ''));
      if (rest.length === 0) this.byService.delete(was);
      else this.byService.set(was, rest);
      this.serviceOf.delete(key);
    }
    const owner = slice.metadata?.labels?.[LABEL_SERVICE_NAME];
    if (kind === 'delete' || !owner) return;
    const service = flat(`${slice.metadata?.namespace ?? ''}/${owner}`);
    const list = this.byService.get(service);
    if (list) list.push(slice);
    else this.byService.set(service, [slice]);
    this.serviceOf.set(key, service);
  }

  of(namespace: string, name: string): V1EndpointSlice[] {
    return [...(this.byService.get(`${namespace}/${name}`) ?? [])];
  }
}
