import { describe, expect, it } from 'vitest';
import { ErrorCode, FerryError, errnoError } from '../../src/errors.js';

describe('errors', () => {
  it('read op: cause (hint) with a stable code', () => {
    const e = errnoError('create map services', -1, ErrorCode.MapOp);
    expect(e.message).toBe('create map services: operation not permitted (run as root, or grant CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN)');
    expect(e.code).toBe(ErrorCode.Permission);
    expect(e.errno).toBe(1);
  });
  it('maps ENOENT to not found with a bpffs hint', () => {
    const e = errnoError('open pin', 2, ErrorCode.MapOp);
    expect(e.code).toBe(ErrorCode.NotFound);
    expect(e.message).toMatch(/^open pin: no such file or directory \(.*bpffs/);
  });
  it('keeps long detail out of the message', () => {
    const e = new FerryError({ code: ErrorCode.Verifier, op: 'load x', cause: 'rejected', detail: 'a'.repeat(10_000) });
    expect(e.message).toBe('load x: rejected');
  });
});
