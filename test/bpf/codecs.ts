// Codecs for the test objects' shared structs (bpf/shared/counters.h, bpf/tests/map_kinds.h).
import { structCodec } from '../../src/ebpf/codec.js';

export const counterCodec = structCodec('ferry_counter', { packets: { type: 'u64' }, bytes: { type: 'u64' } });

export const flowKeyCodec = structCodec('test_flow_key', {
  addr: { type: 'ipv4' },
  port: { type: 'be16' },
  proto: { type: 'u8' },
  pad: { type: 'pad', length: 1 },
});

export const flowValueCodec = structCodec('test_flow_value', {
  createdNs: { type: 'u64' },
  hits: { type: 'u32' },
  state: { type: 'u32' },
});
