import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { AGENT_NODE_FLAGS, DEFAULT_CONFIG, configFromEnv, loadConfig, mergeConfig } from '../../src/agent/config.js';
import { REPO_ROOT } from '../harness/paths.js';

describe('agent configuration', () => {
  it('layers file, environment and flags, later winning', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ferry-cfg-'));
    const file = join(dir, 'ferry.yaml');
    writeFileSync(file, 'nodeName: from-file\ndevices: [eth0, eth1]\nsyncPeriodSeconds: 10\nmapSizes:\n  conntrack: 262144\n');
    const cfg = loadConfig({ file, env: { FERRY_SYNC_PERIOD_SECONDS: '20', NODE_NAME: 'ignored-when-file-sets-it' }, flags: { logLevel: 'debug' } });
    expect(cfg).toMatchObject({ nodeName: 'from-file', devices: ['eth0', 'eth1'], syncPeriodSeconds: 20, logLevel: 'debug' });
    expect(cfg.mapSizes.conntrack).toBe(262144);
    expect(cfg.mapSizes.services).toBe(DEFAULT_CONFIG.mapSizes.services);
  });

  it('reads NODE_NAME as the DaemonSet passes it', () => {
    expect(loadConfig({ env: { NODE_NAME: 'n1' } }).nodeName).toBe('n1');
    expect(configFromEnv({ FERRY_DEVICES: 'eth0,bond0' })).toEqual({ devices: 'eth0,bond0' });
  });

  it.each([
    [{ syncPeriodSeconds: 0 }, 'config syncPeriodSeconds (from flags): is 0 (an integer in 1..86400)'],
    [{ snatIPv4: '10.0.0.300' }, 'config snatIPv4 (from flags): is "10.0.0.300" (an IPv4 address)'],
    [{ snatIPv6: '10.0.0.1' }, 'config snatIPv6 (from flags): is "10.0.0.1" (an IPv6 address)'],
    [{ snatIPv6: 'fe80::1%eth0' }, 'config snatIPv6 (from flags): is "fe80::1%eth0" (an IPv6 address)'],
    [{ healthzBindAddress: 'nope' }, 'config healthzBindAddress (from flags): is "nope" (HOST:PORT, e.g. 0.0.0.0:10256, or "" to disable)'],
    [{ devices: 'a-very-long-interface-name' }, 'config devices (from flags): has an entry that is an interface name longer than 15 characters (interface names (at most 15 characters) or patterns such as enp.*)'],
    [{ mapSizes: { cache: 5 } }, /^config mapSizes\.cache \(from flags\): is not a map size \(services, backends, /],
    [{ logLevel: 'loud' }, 'config logLevel (from flags): is "loud" (trace, debug, info, warn or error)'],
    [{ colour: 'blue' }, /^config colour: is not a setting \(from flags\) \(settings: nodeName, /],
    [{ snatPortMin: 65000, snatPortMax: 62000 }, 'config snatPortMin: 65000 is above snatPortMax 62000 (min ≤ max)'],
  ])('says which key is wrong, how, and what is allowed: %j', (input, message) => {
    expect(() => mergeConfig(DEFAULT_CONFIG, input, 'flags')).toThrow(message);
  });

  it('requires a node name', () => {
    expect(() => loadConfig({ env: {} })).toThrow(/config nodeName: is not set \(set --node-name, FERRY_NODE_NAME or NODE_NAME/);
  });

  it('the DaemonSet runs the agent with the V8 flags the benchmark measured', () => {
    const docs = parseAllDocuments(readFileSync(join(REPO_ROOT, 'deploy', 'kubernetes', 'base', 'agent.yaml'), 'utf8')).map((d) => d.toJSON() as { kind?: string; spec?: { template: { spec: { containers: Array<{ name: string; command?: string[] }> } } } });
    const agent = docs.find((d) => d?.kind === 'DaemonSet')!.spec!.template.spec.containers.find((c) => c.name === 'agent')!;
    expect(agent.command).toEqual(['node', ...AGENT_NODE_FLAGS, '/opt/ferry/bin/ferry.js', 'agent', '--config', '/etc/ferry/ferry.yaml']);
  });

  it('the DaemonSet\'s configuration loads, chooses its devices, keeps metrics on loopback, and probes /readyz before /livez', () => {
    type Doc = { kind?: string; data?: Record<string, string>; spec?: { template: { spec: { containers: Array<{ name: string; startupProbe?: { httpGet: { path: string } }; readinessProbe?: { httpGet: { path: string } }; livenessProbe?: { httpGet: { path: string }; initialDelaySeconds?: number } }> } } } };
    const docs = parseAllDocuments(readFileSync(join(REPO_ROOT, 'deploy', 'kubernetes', 'base', 'agent.yaml'), 'utf8')).map((d) => d.toJSON() as Doc);
    const file = join(mkdtempSync(join(tmpdir(), 'ferry-cm-')), 'ferry.yaml');
    writeFileSync(file, docs.find((d) => d?.kind === 'ConfigMap')!.data!['ferry.yaml']!);
    const cfg = loadConfig({ file, env: { NODE_NAME: 'n' } });
    expect(cfg.devices).toEqual([]);
    expect(cfg.metricsBindAddress).toBe('127.0.0.1:10249');
    const agent = docs.find((d) => d?.kind === 'DaemonSet')!.spec!.template.spec.containers.find((c) => c.name === 'agent')!;
    expect([agent.startupProbe?.httpGet.path, agent.readinessProbe?.httpGet.path, agent.livenessProbe?.httpGet.path]).toEqual(['/readyz', '/readyz', '/livez']);
    expect(agent.livenessProbe?.initialDelaySeconds).toBeUndefined();
  });

  it('checks the full sync period', () => {
    expect(loadConfig({ env: { NODE_NAME: 'n', FERRY_FULL_SYNC_PERIOD_SECONDS: '600' } }).fullSyncPeriodSeconds).toBe(600);
    expect(() => loadConfig({ env: { NODE_NAME: 'n', FERRY_FULL_SYNC_PERIOD_SECONDS: '1' } })).toThrow(/fullSyncPeriodSeconds/);
  });

  it('takes acceleration none, native or best-effort, and nothing else', () => {
    expect(loadConfig({ env: { NODE_NAME: 'n' } }).acceleration).toBe('none');
    expect(loadConfig({ env: { NODE_NAME: 'n', FERRY_ACCELERATION: 'best-effort' } }).acceleration).toBe('best-effort');
    expect(() => loadConfig({ env: { NODE_NAME: 'n', FERRY_ACCELERATION: 'generic' } })).toThrow(/acceleration .*"generic".*none, native, best-effort/);
  });

  it('takes tcAttach auto, tcx or clsact, and nothing else', () => {
    expect(loadConfig({ env: { NODE_NAME: 'n' } }).tcAttach).toBe('auto');
    expect(loadConfig({ env: { NODE_NAME: 'n', FERRY_TC_ATTACH: 'clsact' } }).tcAttach).toBe('clsact');
    expect(() => loadConfig({ env: { NODE_NAME: 'n', FERRY_TC_ATTACH: 'tcf' } })).toThrow(/tcAttach .*"tcf".*auto, tcx, clsact/);
  });
});
