/**
 * `npm run bench:probe [-- --reps 8 --prompt-tokens 700 --new-tokens 64 --judge-prompt-tokens 600 --judge-tokens 8
 *    --threads N]`
 * What a refusal probe adds to a request, against what SafeKeep's judge call adds, on the SmolLM2-135M shape
 * (random weights, bench/common.ts) through the local engine:
 *   agent        — the agent call: prefill of an agent prompt + greedy decode of the answer
 *   agent+probe  — the same call with the probe: the prefill also returns hidden[L+1, d] at the last prompt position
 *                  and a d-dimensional dot product scores it (engine haltAfterPrefill, as guardedRespond does)
 *   judge        — SafeKeep's extra call: prefill of the judge context + its few answer tokens
 *   agent (again) — the agent call once more: the A/A difference is the noise floor of the comparison
 * Calls are interleaved (rotating order) so machine load hits all three alike; medians are reported. Prints figures;
 * asserts nothing.
 */
import { engineEnv } from '../src/cli/env.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngine } from '../src/engine/engine.ts';
import { probeScore } from '../src/data/probe-file.ts';
import { SMOLLM2_SHAPE, flag, median } from './common.ts';

const reps = Number(flag('reps') ?? 8);
const promptTokens = Number(flag('prompt-tokens') ?? 700);
const newTokens = Number(flag('new-tokens') ?? 64);
const judgePromptTokens = Number(flag('judge-prompt-tokens') ?? 600);
const judgeTokens = Number(flag('judge-tokens') ?? 8);
const threads = flag('threads') ? Number(flag('threads')) : undefined;

const dir = mkdtempSync(join(tmpdir(), 'safekeep-bench-probe-'));
process.env.SAFEKEEP_CACHE ??= join(dir, '.cache');
try {
  await writeRandomCheckpoint(join(dir, 'm'), 'llama', { ...SMOLLM2_SHAPE, std: 0.02 });
  const engine = await createEngine(join(dir, 'm'), { ...engineEnv(), threads });
  const V = engine.vocabSize;
  const ids = (n: number, seed: number) => Array.from({ length: n }, (_, i) => (i * 7919 + seed * 104729) % (V - 1) + 1);
  const agentIds = ids(promptTokens, 1);
  const judgeIds = ids(judgePromptTokens, 2);
  const layer = Math.floor(engine.numLayers / 2);
  const probe = { w: Float32Array.from({ length: engine.dModel }, (_, j) => Math.sin(j)), bias: 0, layer, dModel: engine.dModel };
  let scoreMs = 0;
  const runs: Record<string, () => Promise<unknown>> = {
    agent: () => engine.generate([agentIds], { maxNewTokens: newTokens, stopIds: [] }),
    'agent+probe': () => engine.generate([agentIds], {
      maxNewTokens: newTokens, stopIds: [],
      haltAfterPrefill: (_row, h) => {
        const t0 = performance.now();
        const s = probeScore(probe, h);
        scoreMs += performance.now() - t0;
        return s > Infinity; // never halts: the cost of reading and scoring, the answer unchanged
      },
    }),
    judge: () => engine.generate([judgeIds], { maxNewTokens: judgeTokens, stopIds: [] }),
    // the agent call again, unchanged: the A/A difference is this machine's noise floor for the comparison above
    'agent (again)': () => engine.generate([agentIds], { maxNewTokens: newTokens, stopIds: [] }),
  };
  const names = Object.keys(runs);
  for (const n of names) await runs[n]!(); // warm-up (graph, arena)
  const times: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
  // CPU time of the whole process (onnxruntime's threads included): far steadier than wall time on a shared machine
  const cpu: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
  for (let r = 0; r < reps; r++) {
    for (let k = 0; k < names.length; k++) {
      const n = names[(r + k) % names.length]!;
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      await runs[n]!();
      times[n]!.push(performance.now() - t0);
      const c = process.cpuUsage(c0);
      cpu[n]!.push((c.user + c.system) / 1000);
    }
    process.stderr.write(`bench:probe ${r + 1}/${reps}\n`);
  }
  const m = Object.fromEntries(names.map((n) => [n, median(times[n]!)]));
  // paired per-rep differences: each rep ran agent and agent+probe back to back
  const diffs = times.agent!.map((t, i) => times['agent+probe']![i]! - t);
  const added = median(diffs);
  const base = m.agent!;
  const best = (n: string) => Math.min(...times[n]!);
  const bestAdded = best('agent+probe') - best('agent');
  const cm = Object.fromEntries(names.map((n) => [n, median(cpu[n]!)]));
  const cpuAdded = median(cpu.agent!.map((t, i) => cpu['agent+probe']![i]! - t));
  const noise = median(times.agent!.map((t, i) => times['agent (again)']![i]! - t));
  const noiseAbs = median(times.agent!.map((t, i) => Math.abs(times['agent (again)']![i]! - t)));
  const cpuNoise = median(cpu.agent!.map((t, i) => cpu['agent (again)']![i]! - t));
  const lines = [
    `bench:probe — SmolLM2-135M shape (random weights), ${engine.numLayers} layers, d ${engine.dModel}; agent prompt ${promptTokens} tokens + ${newTokens} generated; judge prompt ${judgePromptTokens} + ${judgeTokens}; ${reps} interleaved reps, medians`,
    `  agent call                 ${base.toFixed(1)} ms`,
    `  agent call with the probe  ${m['agent+probe']!.toFixed(1)} ms  (added, median of paired differences: ${added.toFixed(2)} ms = ${((100 * added) / base).toFixed(2)} % of the agent call; scoring alone ${(scoreMs / (reps + 1)).toFixed(3)} ms)`,
    `  best of ${reps}: agent ${best('agent').toFixed(1)} ms, with the probe ${best('agent+probe').toFixed(1)} ms (added ${bestAdded.toFixed(2)} ms = ${((100 * bestAdded) / best('agent')).toFixed(2)} %), judge ${best('judge').toFixed(1)} ms (${((100 * best('judge')) / best('agent')).toFixed(1)} %)`,
    `  SafeKeep judge call        ${m.judge!.toFixed(1)} ms  (= ${((100 * m.judge!) / base).toFixed(1)} % of the agent call, on top of it)`,
    `  CPU time (process, all threads; medians): agent ${cm.agent!.toFixed(1)} ms, with the probe ${cm['agent+probe']!.toFixed(1)} ms (added, median of paired differences: ${cpuAdded.toFixed(2)} ms = ${((100 * cpuAdded) / cm.agent!).toFixed(2)} %), judge ${cm.judge!.toFixed(1)} ms (${((100 * cm.judge!) / cm.agent!).toFixed(1)} %)`,
    `  A/A noise floor (the agent call against itself): wall ${noise.toFixed(2)} ms (median |difference| ${noiseAbs.toFixed(1)} ms = ${((100 * noiseAbs) / base).toFixed(2)} %), CPU ${cpuNoise.toFixed(2)} ms`,
    `  target: probe < 2 % of the agent call → wall ${Math.abs(added) / base < 0.02 ? 'met' : 'NOT met'}, CPU ${Math.abs(cpuAdded) / cm.agent! < 0.02 ? 'met' : 'NOT met'} on this run (wall figures need a quiet machine)`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
  await engine.dispose();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
