export * from './addr.js';
export * from './build.js';
export * from './checksum.js';
export * from './decode.js';
export * from './diff.js';
