// What encoding map entries costs the agent: a first sync at 50k Services (10 endpoints
// each) writes about 550k service entries and as many backends, each through its codec.
// Encodes N keys, values and backends into preallocated buffers, 7 rounds.
// Run: npx tsx bench/codec-encode.mts
import { lb4BackendCodec, lb4KeyCodec, lb4ServiceCodec } from '../src/datapath/layouts.js';

const N = 550_000;
const keys = Array.from({ length: N }, (_, i) => ({ address: `10.96.${(i >> 8) & 255}.${i & 255}`, port: 80, proto: 6, scope: 0, slot: i % 11 }));
const values = Array.from({ length: N }, (_, i) => ({ backendId: i, revNatId: i, affinityTimeout: 0, count: 10, flags: 1, affinityId: 0, firstBackends: [i + 1, i + 2, i + 3, i + 4] }));
const backends = Array.from({ length: N }, (_, i) => ({ address: `10.244.${(i >> 8) & 255}.${i & 255}`, port: 8080, proto: 6, flags: 0 }));
const kb = Buffer.alloc(lb4KeyCodec.size * N);
const vb = Buffer.alloc(lb4ServiceCodec.size * N);
const bb = Buffer.alloc(lb4BackendCodec.size * N);
for (let round = 0; round < 7; round++) {
  const t0 = performance.now();
  for (let i = 0; i < N; i++) {
    lb4KeyCodec.encode(keys[i]!, kb, i * lb4KeyCodec.size);
    lb4ServiceCodec.encode(values[i]!, vb, i * lb4ServiceCodec.size);
    lb4BackendCodec.encode(backends[i]!, bb, i * lb4BackendCodec.size);
  }
  console.log(`round ${round}: ${(performance.now() - t0).toFixed(0)} ms for ${N} key, value and backend encodes`);
}
