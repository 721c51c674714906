// Which source line a JIT-compiled instruction came from, for a profile's samples in a
// loaded program (bench/packet-profile.ts): the kernel's line info of the program
// (bpf_prog_info: each line-info record's instruction and its address in the JIT image),
// and the source text of each instruction from `bpftool prog dump xlated ... linum` (the
// machine's bpftool disassembles no JIT code: it is built without libbfd).
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { libbpf } from '../src/ebpf/libbpf.js';
import { kernelStruct } from '../src/ebpf/skb-context.js';

const require = createRequire(import.meta.url);
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const koffi: any = require('koffi');

/** The source line of each JIT address that starts a line-info record, sorted by address. */
export interface JitedLines {
  /** The source line ("file:line  text") of the instruction at `ip`, if in the program. */
  lineAt(ip: bigint): string | undefined;
}

const LINE_INFO_SIZE = 16; // struct bpf_line_info: insn_off, file_name_off, line_off, line_col

/** The line map of the program loaded at `fd`. */
export function jitedLines(fd: number): JitedLines {
  const layout = kernelStruct('bpf_prog_info');
  const at = (m: string) => layout.offset(m);
  const first = Buffer.alloc(layout.size);
  if (libbpf().objGetInfoByFd(fd, first) < 0) throw new Error('bpf_prog_info: the program is gone');
  const nLines = first.readUInt32LE(at('nr_line_info'));
  const nJited = first.readUInt32LE(at('nr_jited_line_info'));
  if (!nLines || nLines !== nJited) throw new Error(`the program has no JIT line info (${nLines} records, ${nJited} addresses)`);
  const lineBuf = koffi.alloc('uint8_t', nLines * LINE_INFO_SIZE);
  const addrBuf = koffi.alloc('uint8_t', nJited * 8);
  let records: Buffer;
  let addrs: bigint[];
  try {
    const info = Buffer.alloc(layout.size);
    info.writeUInt32LE(nLines, at('nr_line_info'));
    info.writeUInt32LE(LINE_INFO_SIZE, at('line_info_rec_size'));
    info.writeBigUInt64LE(koffi.address(lineBuf), at('line_info'));
    info.writeUInt32LE(nJited, at('nr_jited_line_info'));
    info.writeUInt32LE(8, at('jited_line_info_rec_size'));
    info.writeBigUInt64LE(koffi.address(addrBuf), at('jited_line_info'));
    if (libbpf().objGetInfoByFd(fd, info) < 0) throw new Error('bpf_prog_info: the line info could not be read');
    records = Buffer.from(koffi.decode(lineBuf, 'uint8_t', nLines * LINE_INFO_SIZE));
    // As bytes: a kernel address is past 2^53, which a JS number cannot hold exactly.
    const raw = Buffer.from(koffi.decode(addrBuf, 'uint8_t', nJited * 8));
    addrs = Array.from({ length: nJited }, (_, i) => raw.readBigUInt64LE(i * 8));
  } finally {
    koffi.free(lineBuf);
    koffi.free(addrBuf);
  }
  const source = xlatedSource(first.readUInt32LE(at('id')));
  const table = addrs.map((addr, i) => ({ addr, line: source.get(records.readUInt32LE(i * LINE_INFO_SIZE)) ?? '?' })).sort((a, b) => (a.addr < b.addr ? -1 : a.addr > b.addr ? 1 : 0));
  return {
    lineAt(ip) {
      let lo = 0;
      let hi = table.length - 1;
      if (!table.length || ip < table[0]!.addr) return undefined;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (table[mid]!.addr <= ip) lo = mid;
        else hi = mid - 1;
      }
      return table[lo]!.line;
    },
  };
}

/** Instruction index → its source line, from the translated program's dump. */
function xlatedSource(id: number): Map<number, string> {
  const out = execFileSync('bpftool', ['prog', 'dump', 'xlated', 'id', String(id), 'linum'], { encoding: 'utf8', maxBuffer: 2 ** 28 });
  const map = new Map<number, string>();
  let src = '?';
  for (const l of out.split('\n')) {
    const s = /^; (.*?)\s*\[file:\S*?([^/\s]+) line_num:(\d+)/.exec(l);
    if (s) {
      src = `${s[2]}:${s[3]}  ${s[1]!.trim().slice(0, 100)}`;
      continue;
    }
    const i = /^\s*(\d+): \(/.exec(l);
    if (i) map.set(Number(i[1]), src);
  }
  return map;
}
