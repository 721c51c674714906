// ferry cleanup-kube-proxy on a node that kube-proxy left (src/sandbox/fixtures/
// kube-proxy-leftovers.ts): iptables in both families and both backends, nftables tables.
// Its leftover REJECT for a NodePort without endpoints refuses a client's connection to the
// node until the cleanup; kubelet's chains and the node's own rules stay.
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { KEPT_CHAINS, KUBE_PROXY_NFT, REJECTED_NODE_PORT, kubeProxyIptables } from '../../src/sandbox/fixtures/kube-proxy-leftovers.js';
import { Testbed, type Host } from '../../src/sandbox/netns/testbed.js';
import { startWorkloads } from '../../src/sandbox/workloads/spawn.js';
import { isKubeProxyChain } from '../../src/sys/kube-proxy-leftovers.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';

const FERRY = join(REPO_ROOT, 'bin', 'ferry.js');
const SAVERS = ['iptables-nft-save', 'ip6tables-nft-save', 'iptables-legacy-save', 'ip6tables-legacy-save'];
let tb: Testbed;
let node: Host;
let client: Host;

beforeAll(async () => {
  tb = await Testbed.create();
  node = await tb.addHost('node');
  client = await tb.addHost('client');
  await tb.link({ host: client, ifname: 'eth0', address: '10.0.30.2/24' }, { host: node, ifname: 'eth0', address: '10.0.30.21/24' });
  await startWorkloads(node, [{ kind: 'whoami', port: REJECTED_NODE_PORT, name: 'node' }]);
});
afterAll(async () => {
  await tb?.destroy();
});

const chains = async (saver: string) => [...(await node.execOk([saver])).matchAll(/^:(\S+)/gm)].map((m) => m[1]!);
const ferry = (...args: string[]) => node.exec([process.execPath, FERRY, 'cleanup-kube-proxy', ...args]);
const connect = async () => (await client.exec(['curl', '-sS', '--max-time', '2', `http://10.0.30.21:${REJECTED_NODE_PORT}/`])).code;

describeWith(['root', 'netns'], 'ferry cleanup-kube-proxy', () => {
  it('removes kube-proxy\'s chains and tables, and nothing else; the NodePort it rejected answers', async () => {
    for (const [restore, family] of [['iptables-nft-restore', 4], ['ip6tables-nft-restore', 6], ['iptables-legacy-restore', 4], ['ip6tables-legacy-restore', 6]] as const) {
      await node.execOk([restore], { input: kubeProxyIptables(family) });
    }
    await node.execOk(['nft', '-f', '-'], { input: KUBE_PROXY_NFT });
    expect(await connect()).toBe(7); // refused: kube-proxy's REJECT

    const dry = await ferry();
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(/would remove:/);
    for (const v of ['iptables (nf_tables)', 'ip6tables (nf_tables)', 'iptables (legacy)', 'ip6tables (legacy)']) {
      expect(dry.stdout).toContain(`${v} filter: 6 chains`);
      expect(dry.stdout).toContain(`${v} nat: 8 chains`);
      expect(dry.stdout).toContain(`${v} mangle: 1 chains (KUBE-PROXY-CANARY)`);
    }
    expect(dry.stdout).toMatch(/nftables: table ip kube-proxy\n.*nftables: table ip6 kube-proxy/);
    expect(await connect()).toBe(7); // a dry run changes nothing

    const done = await ferry('--yes');
    expect(done.code, done.stderr).toBe(0);
    expect(done.stdout).toMatch(/removed:/);
    for (const saver of SAVERS) {
      const left = await chains(saver);
      expect(left.filter(isKubeProxyChain), saver).toEqual([]);
      for (const kept of KEPT_CHAINS) expect(left, `${saver} ${kept}`).toContain(kept);
      const rules = await node.execOk([saver]);
      expect(rules).toContain('-A INPUT -p tcp -m tcp --dport 22 -j NODE-SSH');
      expect(rules).toContain('-A INPUT -j KUBE-FIREWALL');
      expect(rules).toMatch(/-A POSTROUTING -o eth9 -j NODE-EGRESS/);
    }
    const tables = await node.execOk(['nft', 'list', 'tables']);
    expect(tables).not.toMatch(/kube-proxy/);
    expect(tables).toContain('table inet node-firewall');
    expect(await connect()).toBe(0);

    const again = await ferry('--yes');
    expect(again.stdout).toBe('no kube-proxy rules on this node\n');
  });
});
