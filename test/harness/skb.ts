export { skbContext } from '../../src/ebpf/skb-context.js';
