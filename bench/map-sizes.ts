// Map sizes for a benchmark's Service count: the defaults hold 64k-odd Services, the large
// runs need more. Rounded up to a power of two, never below the defaults.
import { DEFAULT_MAP_SIZES, type MapSizes } from '../src/datapath/loader.js';

const pow2 = (n: number) => 2 ** Math.ceil(Math.log2(n));

/** `entries`: lb4_services entries the run writes; `frontends`: reverse-NAT ids it needs. */
export function serviceMapSizes(entries: number, frontends: number): Pick<MapSizes, 'services' | 'reverseNat'> {
  return {
    services: Math.max(DEFAULT_MAP_SIZES.services, pow2(entries + 1024)),
    reverseNat: Math.max(DEFAULT_MAP_SIZES.reverseNat, pow2(frontends + 1024)),
  };
}
