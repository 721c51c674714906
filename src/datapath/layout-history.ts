// The pinned maps' past layouts, and how an entry of each becomes an entry of the next.
// An agent finding a pinned map in one of these layouts migrates it (layout-migration.ts);
// one it finds in a layout it does not know, it refuses. When bpf/shared changes a struct
// a pinned map holds: bump FERRY_LAYOUT_VERSION, and add the old codec and its converter.
import { structCodec, type Codec } from '../ebpf/codec.js';
import { ct6EntryV5Codec, ct6KeyCodec, type Ct6Entry } from './layouts6.js';
import { ct4KeyCodec, lb4KeyCodec, type Ct4Entry, type Lb4Service, type MapName, type Nat4Entry } from './layouts.js';

export interface PastLayout {
  /** The last layout version with this shape. */
  version: number;
  key: Codec<unknown>;
  value: Codec<unknown>;
  /** One entry in the next version's shape. */
  upgrade(key: unknown, value: unknown): { key: unknown; value: unknown };
}

/** Layout 1: before the flow's arrival device. */
const ct4EntryV1Codec = structCodec('ct4_entry', {
  expiresNs: { type: 'u64' },
  createdNs: { type: 'u64' },
  backendId: { type: 'u32' },
  revNatId: { type: 'u32' },
  natAddr: { type: 'ipv4' },
  natPort: { type: 'be16' },
  flags: { type: 'u8' },
  tcpFlags: { type: 'u8' },
  packets: { type: 'u64' },
  bytes: { type: 'u64' },
  clientSeqNext: { type: 'u32' },
  pad: { type: 'pad', length: 4 },
});

/** Layouts 2 and 3: before the flow's kept next hop. */
const ct4EntryV3Codec = structCodec('ct4_entry', {
  expiresNs: { type: 'u64' },
  createdNs: { type: 'u64' },
  backendId: { type: 'u32' },
  revNatId: { type: 'u32' },
  natAddr: { type: 'ipv4' },
  natPort: { type: 'be16' },
  flags: { type: 'u8' },
  tcpFlags: { type: 'u8' },
  packets: { type: 'u64' },
  bytes: { type: 'u64' },
  clientSeqNext: { type: 'u32' },
  ifindex: { type: 'u32' },
});

/** Layouts 1 and 2: before a contested DSR binding's pending frontend. */
const nat4EntryV2Codec = structCodec('nat4_entry', {
  expiresNs: { type: 'u64' },
  clientAddr: { type: 'ipv4' },
  clientPort: { type: 'be16' },
  frontendPort: { type: 'be16' },
  frontendAddr: { type: 'ipv4' },
  revNatId: { type: 'u32' },
  flags: { type: 'u8' },
  pad: { type: 'pad', length: 7 },
  packets: { type: 'u64' },
  bytes: { type: 'u64' },
});

/** Layout 3: before the replies' kept next hop. */
const nat4EntryV3Codec = structCodec('nat4_entry', {
  expiresNs: { type: 'u64' },
  clientAddr: { type: 'ipv4' },
  clientPort: { type: 'be16' },
  frontendPort: { type: 'be16' },
  frontendAddr: { type: 'ipv4' },
  revNatId: { type: 'u32' },
  flags: { type: 'u8' },
  pad: { type: 'pad', length: 1 },
  pendingPort: { type: 'be16' },
  pendingAddr: { type: 'ipv4' },
  packets: { type: 'u64' },
  bytes: { type: 'u64' },
});

/** Layouts 1 to 4: before the master entry's first slots. */
const lb4ServiceV4Codec = structCodec('lb4_service', {
  backendId: { type: 'u32' },
  revNatId: { type: 'u32' },
  affinityTimeout: { type: 'u32' },
  count: { type: 'u16' },
  flags: { type: 'u16' },
  affinityId: { type: 'u16' },
  pad: { type: 'pad', length: 2 },
});

/** A kept next hop of none: the next packet looks its route up. */
const noHop = { hopIfindex: 0, hopMacs: Buffer.alloc(12) };

/** Oldest first, per map; a map absent here has had one layout since layout 1. */
export const layoutHistory: Partial<Record<MapName, PastLayout[]>> = {
  ct4: [
    {
      version: 1,
      key: ct4KeyCodec as Codec<unknown>,
      value: ct4EntryV1Codec as Codec<unknown>,
      upgrade: (key, value) => ({ key, value: { ...(value as ReturnType<typeof ct4EntryV1Codec.decode>), ifindex: 0 } satisfies ReturnType<typeof ct4EntryV3Codec.decode> }),
    },
    {
      version: 3,
      key: ct4KeyCodec as Codec<unknown>,
      value: ct4EntryV3Codec as Codec<unknown>,
      upgrade: (key, value) => ({ key, value: { ...(value as ReturnType<typeof ct4EntryV3Codec.decode>), ...noHop } satisfies Ct4Entry }),
    },
  ],
  nat4: [
    {
      version: 2,
      key: ct4KeyCodec as Codec<unknown>,
      value: nat4EntryV2Codec as Codec<unknown>,
      upgrade: (key, value) => ({ key, value: { ...(value as ReturnType<typeof nat4EntryV2Codec.decode>), pendingPort: 0, pendingAddr: '0.0.0.0' } satisfies ReturnType<typeof nat4EntryV3Codec.decode> }),
    },
    {
      version: 3,
      key: ct4KeyCodec as Codec<unknown>,
      value: nat4EntryV3Codec as Codec<unknown>,
      upgrade: (key, value) => ({ key, value: { ...(value as ReturnType<typeof nat4EntryV3Codec.decode>), ...noHop } satisfies Nat4Entry }),
    },
  ],
  ct6: [
    {
      version: 5,
      key: ct6KeyCodec as Codec<unknown>,
      value: ct6EntryV5Codec as Codec<unknown>,
      upgrade: (key, value) => ({ key, value: { ...(value as ReturnType<typeof ct6EntryV5Codec.decode>), natPort: 0 } satisfies Ct6Entry }),
    },
  ],
  lb4_services: [
    {
      version: 4,
      key: lb4KeyCodec as Codec<unknown>,
      value: lb4ServiceV4Codec as Codec<unknown>,
      // Carrying no first slot: the programs look every slot up, as before, until the
      // agent's first sync writes the master entries again (FrontendState.firstBackendsStale).
      upgrade: (key, value) => ({ key, value: { ...(value as ReturnType<typeof lb4ServiceV4Codec.decode>), firstBackends: [] } satisfies Lb4Service }),
    },
  ],
};

/** The oldest layout an agent of this build upgrades from. */
export const OLDEST_UPGRADABLE_LAYOUT = 1;
