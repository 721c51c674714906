// FERRY_CPU_PROFILE: a CPU profile of the agent's start (node --cpu-prof cannot be used: its
// timer signals interrupt the BPF verifier at load).
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';

/** The inspector's CPU profiler, started now; stopTo writes a .cpuprofile (Chrome DevTools, speedscope). */
export async function startCpuProfile(): Promise<{ stopTo(file: string): Promise<void> }> {
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  return {
    async stopTo(file: string) {
      const { profile } = await session.post('Profiler.stop');
      writeFileSync(file, JSON.stringify(profile));
      session.disconnect();
    },
  };
}
