// The BPF layer: libbpf through koffi. Nothing here knows about Kubernetes.
export * from '../errors.js';
export * from './btf.js';
export * from './codec.js';
export * from './map.js';
export * from './object.js';
export * from './pinned.js';
export * from './link.js';
export * from './link-tc.js';
export * from './link-xdp.js';
export * from './link-cgroup.js';
export * from './test-run.js';
export * from './resources.js';
export { libbpf, captureLibbpfMessages } from './libbpf.js';
export * from './enum-check.js';
