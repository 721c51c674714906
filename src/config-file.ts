// Settings from the places both commands read them: a YAML file, then the environment
// (FERRY_SOME_KEY for someKey), then flags. Each command checks its own keys; this file
// only reads, and names where a value came from.
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { ErrorCode, FerryError } from './errors.js';

export function configError(key: string, what: string, allowed: string): FerryError {
  return new FerryError({ code: ErrorCode.Config, op: `config ${key}`, cause: what, hint: allowed });
}

/** HOST:PORT, [v6]:PORT or :PORT. */
export const isHostPort = (s: string) => {
  const m = /^(\d{1,3}(\.\d{1,3}){3}|\[[0-9a-f:]+\]|[a-z0-9.-]*):(\d{1,5})$/i.exec(s);
  return m !== null && Number(m[3]) <= 65535;
};

/** A YAML mapping of settings (an empty file is an empty mapping). */
export function readConfigFile(file: string): Record<string, unknown> {
  let doc: unknown;
  try {
    doc = parseYaml(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new FerryError({ code: ErrorCode.Config, op: `read config ${file}`, cause: (e as Error).message, hint: 'a YAML mapping of settings' });
  }
  if (doc !== null && (typeof doc !== 'object' || Array.isArray(doc))) throw configError(file, 'is not a YAML mapping', 'key: value pairs');
  return (doc ?? {}) as Record<string, unknown>;
}

export const envName = (key: string) => `FERRY_${key.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()}`;

/** FERRY_NODE_NAME=… → nodeName, for the keys given; `json` keys hold JSON. */
export function settingsFromEnv(env: NodeJS.ProcessEnv, keys: readonly string[], json: readonly string[] = []): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of keys) {
    const v = env[envName(key)];
    if (v === undefined) continue;
    if (!json.includes(key)) out[key] = v;
    else {
      try {
        out[key] = JSON.parse(v);
      } catch (e) {
        throw configError(`${key} (from ${envName(key)})`, `is not JSON: ${(e as Error).message}`, 'a JSON object');
      }
    }
  }
  return out;
}

/** A boolean setting: true/false, or the strings "true"/"false" (environment, flags). */
export function booleanSetting(where: string, value: unknown): boolean {
  const b = typeof value === 'string' ? (value === 'true' ? true : value === 'false' ? false : undefined) : value;
  if (typeof b !== 'boolean') throw configError(where, `is ${JSON.stringify(value)}`, 'true or false');
  return b;
}

/** An integer setting within [lo, hi], from a number or a numeric string. */
export function integerSetting(where: string, value: unknown, lo: number, hi: number): number {
  const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < lo || n > hi) throw configError(where, `is ${JSON.stringify(value)}`, `an integer in ${lo}..${hi}`);
  return n;
}

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export function logLevelSetting(where: string, value: unknown): LogLevel {
  if (!LOG_LEVELS.includes(value as LogLevel)) throw configError(where, `is ${JSON.stringify(value)}`, `${LOG_LEVELS.slice(0, -1).join(', ')} or ${LOG_LEVELS.at(-1)}`);
  return value as LogLevel;
}

export function hostPortSetting(where: string, value: unknown): string {
  if (typeof value !== 'string' || (value !== '' && !isHostPort(value))) throw configError(where, `is ${JSON.stringify(value)}`, 'HOST:PORT, e.g. 0.0.0.0:10256, or "" to disable');
  return value;
}
