// The API server unreachable for a while, with changes made meanwhile (they land in its
// store, as writes to another API server replica would): the datapath must not change
// during the outage, the agents must stay alive (their /livez healthy, never restarted),
// and once it is back they must apply the changes quickly.
import { HTTP_NODEPORT, httpStatus, servedTable, startSteadyLoad, waitFor, type LoadReport, type ReliabilityCluster, sleep } from './cluster.js';

export const LATE_NODEPORT = 30190;
const LATE_CLUSTER_IP = '10.96.0.190';

export interface OutageResult {
  seconds: number;
  /** Checks during the outage: the served table compared with the one before, /livez, the agent's pid. */
  checks: number;
  tableChanged: number;
  livezFailed: number;
  agentRestarted: boolean;
  /** From the API server's return to the change in node-1's maps, and to its NodePort answering. */
  convergedMs: number;
  answeringMs: number;
  load: LoadReport;
}

export async function outageScenario(c: ReliabilityCluster, opts: { seconds: number }): Promise<OutageResult> {
  const { sb, node1 } = c;
  const livez = () => httpStatus(node1.host, 'http://127.0.0.1:10256/livez');
  const pid = sb.agents.get(node1.name)!.pid;
  const before = servedTable(c, node1);
  const load = startSteadyLoad(c);
  let checks = 0;
  let tableChanged = 0;
  let livezFailed = 0;
  let convergedMs = -1;
  let answeringMs = -1;
  try {
    await sleep(2000);
    await sb.api.stop();
    // Made while the API server is away (straight into its store, so with the cluster IP
    // its allocator would have given): a new NodePort Service.
    sb.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'late', namespace: 'default' }, spec: { type: 'NodePort', clusterIP: LATE_CLUSTER_IP, clusterIPs: [LATE_CLUSTER_IP], selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080, protocol: 'TCP', nodePort: LATE_NODEPORT }] } });
    for (const end = Date.now() + opts.seconds * 1000; Date.now() < end; ) {
      await sleep(Math.min(5000, Math.max(0, end - Date.now())));
      checks++;
      if (JSON.stringify(servedTable(c, node1)) !== JSON.stringify(before)) tableChanged++;
      if ((await livez()) !== '200') livezFailed++;
    }
    await sb.api.start();
    const back = Date.now();
    await waitFor('node-1 programs the new Service with its backends', () => servedTable(c, node1).some((l) => l.includes(`:${LATE_NODEPORT}/`) && !l.endsWith('→ ')), Boolean, 60_000, 20);
    convergedMs = Date.now() - back;
    await waitFor('the new NodePort answers', () => httpStatus(sb.net.client, `http://${node1.ip}:${LATE_NODEPORT}/`), (s) => s === '200', 60_000, 20);
    answeringMs = Date.now() - back;
    await sleep(2000);
  } catch (e) {
    await load.stop();
    throw e;
  } finally {
    if (!sb.api.listening) await sb.api.start();
  }
  const report = await load.stop();
  // The old Service still answers on its NodePort (nothing was lost).
  await waitFor('web still answers', () => httpStatus(sb.net.client, `http://${node1.ip}:${HTTP_NODEPORT}/`), (s) => s === '200', 10_000);
  sb.store.delete('services', 'default', 'late');
  return { seconds: opts.seconds, checks, tableChanged, livezFailed, agentRestarted: sb.agents.get(node1.name)?.pid !== pid || sb.agents.get(node1.name)?.child.exitCode !== null, convergedMs, answeringMs, load: report };
}
