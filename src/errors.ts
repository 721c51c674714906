// Errors of the whole project: a stable code, and a message that reads `op: cause (hint)`.
// errno helpers turn what libbpf, the kernel and libc return into the same form.
import { constants as osConstants } from 'node:os';

/** Stable error codes. Retired codes stay reserved; never reuse one with a new meaning. */
export const ErrorCode = {
  LibbpfMissing: 'FERRY_LIBBPF_MISSING',
  BpffsMissing: 'FERRY_BPFFS_MISSING',
  Permission: 'FERRY_PERMISSION',
  NotFound: 'FERRY_NOT_FOUND',
  Verifier: 'FERRY_VERIFIER',
  ObjectOpen: 'FERRY_OBJECT_OPEN',
  ObjectLoad: 'FERRY_OBJECT_LOAD',
  Rodata: 'FERRY_RODATA',
  Layout: 'FERRY_LAYOUT_MISMATCH',
  Codec: 'FERRY_CODEC',
  MapOp: 'FERRY_MAP_OP',
  MapFull: 'FERRY_MAP_FULL',
  Attach: 'FERRY_ATTACH',
  XdpUnsupported: 'FERRY_XDP_UNSUPPORTED',
  CgroupNotRoot: 'FERRY_CGROUP_NOT_ROOT',
  Closed: 'FERRY_CLOSED',
  Compile: 'FERRY_COMPILE',
  TestRun: 'FERRY_TEST_RUN',
  Netns: 'FERRY_NETNS',
  /** Something that takes one user at a time has one (ferry monitor). */
  Busy: 'FERRY_BUSY',
  Config: 'FERRY_CONFIG',
  Internal: 'FERRY_INTERNAL',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

export interface FerryErrorInit {
  code: ErrorCode;
  op: string;
  cause: string;
  hint?: string | undefined;
  errno?: number | undefined;
  /** Long diagnostic text (verifier log, compiler output) kept out of the message. */
  detail?: string | undefined;
}

export class FerryError extends Error {
  readonly code: ErrorCode;
  readonly op: string;
  readonly errno: number | undefined;
  readonly hint: string | undefined;
  readonly detail: string | undefined;

  constructor(init: FerryErrorInit) {
    super(`${init.op}: ${init.cause}${init.hint ? ` (${init.hint})` : ''}`);
    this.name = 'FerryError';
    this.code = init.code;
    this.op = init.op;
    this.errno = init.errno;
    this.hint = init.hint;
    this.detail = init.detail;
  }
}

const errnoNames = new Map<number, string>(
  Object.entries(osConstants.errno).map(([name, n]) => [n, name]),
);

/** `ENOENT` for 2; libbpf returns negative codes, either sign is accepted. */
export function errnoName(errno: number): string {
  return errnoNames.get(Math.abs(errno)) ?? `errno ${Math.abs(errno)}`;
}

const errnoText: Record<string, string> = {
  EPERM: 'operation not permitted',
  EACCES: 'permission denied',
  ENOENT: 'no such file or directory',
  EEXIST: 'already exists',
  EINVAL: 'invalid argument',
  E2BIG: 'argument list too long',
  ENOSPC: 'no space left',
  ENOMEM: 'out of memory',
  EBUSY: 'device or resource busy',
  EOPNOTSUPP: 'operation not supported',
  ENOTSUP: 'operation not supported',
  ENODEV: 'no such device',
  EBADF: 'bad file descriptor',
  ENOTDIR: 'not a directory',
  ENOSYS: 'function not implemented',
};

export function errnoMessage(errno: number): string {
  const name = errnoName(errno);
  return errnoText[name] ?? name.toLowerCase();
}

/** A hint for the errnos an operator can act on. */
export function errnoHint(errno: number): string | undefined {
  switch (errnoName(errno)) {
    case 'EPERM':
    case 'EACCES':
      return 'run as root, or grant CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN';
    case 'ENOENT':
      return 'check that the object, pin or interface exists (is bpffs mounted at the pin root?)';
    case 'ENOMEM':
      return 'raise RLIMIT_MEMLOCK or lower the map sizes';
    case 'ENOSYS':
      return 'the running kernel lacks this BPF feature';
    default:
      return undefined;
  }
}

export function codeForErrno(errno: number, fallback: ErrorCode): ErrorCode {
  switch (errnoName(errno)) {
    case 'EPERM':
    case 'EACCES':
      return ErrorCode.Permission;
    case 'ENOENT':
      return ErrorCode.NotFound;
    default:
      return fallback;
  }
}

/** Build a FerryError from a (negative or positive) errno returned by libbpf or the kernel. */
export function errnoError(op: string, errno: number, fallback: ErrorCode, hint?: string): FerryError {
  return new FerryError({
    code: codeForErrno(errno, fallback),
    op,
    cause: errnoMessage(errno),
    hint: hint ?? errnoHint(errno),
    errno: Math.abs(errno),
  });
}
