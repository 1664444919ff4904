/**
 * `npm run bench:memory [-- --budgets 1.5GB,2GB,3GB --long 3072 --threads N --keep DIR]`: does `--max-memory` hold?
 * `npm run bench:memory -- --calibrate 1x1024,4x512,...`: one forward of B×T per fresh child, VmHWM growth vs the model.
 *
 * A SmolLM2-135M-shaped random f32 checkpoint (bench/engine.ts SHAPE) is written by a child; then, for each budget
 * (and once without one), a FRESH child process creates the engine with `maxMemory`, and runs
 *   1. a long-prompt forward: one prompt of --long tokens, hidden states and logits at the last position;
 *   2. an extraction-like batch: 48 prompts of 200–420 tokens sharing a 150-token prefix through `forwardShared`
 *      (hidden state at the last token);
 *   3. greedy generate of 8 tokens on the long prompt.
 * Each child prints its plan (memory.ts `planMemory`), peak RSS (VmHWM: /proc/self/status) after imports, after the
 * session, and at the end, and the steps it ran. The table puts the peak next to the budget, so a user sees whether
 * the budget held; the same numbers calibrate memory.ts's constants (src/engine/README.md, "Memory budget").
 */
import { engineEnv } from '../src/cli/env.ts';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { peakRss } from './common.ts';

const SHAPE = {
  numLayers: 30, hiddenSize: 576, numHeads: 9, numKvHeads: 3, headDim: 64, intermediateSize: 1536, vocabSize: 49152,
  tieWordEmbeddings: true, ropeScaling: null, ropeTheta: 100000, seed: 1,
} as const;

function flag(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}
const mib = (b: number) => (b / 2 ** 20).toFixed(0);

interface ChildReport {
  budget: number | null;
  plan: Record<string, number> | null;
  rssImports: number;
  rssSession: number;
  rssLong: number;
  rssShared: number;
  rssEnd: number;
  steps: number;
  maxStepTokens: number;
  seconds: number;
}

async function child(dir: string, budgetArg: string, threads: number, long: number): Promise<void> {
  const { loadCheckpoint } = await import('../src/checkpoint/load.ts');
  const { createEngineFromCheckpoint } = await import('../src/engine/engine.ts');
  const { parseBytes } = await import('../src/engine/runtime/memory.ts');
  const ck = await loadCheckpoint(dir);
  const rssImports = peakRss();
  const budget = budgetArg === 'none' ? null : parseBytes(budgetArg);
  const t0 = performance.now();
  const engine = await createEngineFromCheckpoint(ck, { ...engineEnv(), threads, cacheDir: join(dir, 'cache'), ...(budget ? { maxMemory: budget } : {}) });
  const rssSession = peakRss();
  let steps = 0;
  let maxStepTokens = 0;
  const step = engine.step.bind(engine);
  engine.step = async (inp) => { steps++; maxStepTokens = Math.max(maxStepTokens, inp.batch * inp.width); return step(inp); };
  const V = SHAPE.vocabSize;
  const tok = (i: number, salt: number) => 3 + ((i * 7919 + salt * 104729) % (V - 3));
  const prompt = Array.from({ length: long }, (_, i) => tok(i, 0));
  try {
    await engine.forward([prompt], { hiddenAt: 'last', logitsAt: 'last' });
  } catch (e) {
    // a budget too small for the long prompt is refused with a SafekeepError: report it as the row
    process.stdout.write(`${JSON.stringify({ refused: (e as Error).message })}\n`);
    await engine.dispose();
    return;
  }
  const rssLong = peakRss();
  const head = Array.from({ length: 150 }, (_, i) => tok(i, 1));
  const prompts = Array.from({ length: 48 }, (_, k) => [...head, ...Array.from({ length: 50 + ((k * 37) % 221) }, (_, i) => tok(i, k + 2))]);
  await engine.forwardShared(prompts, { hiddenAt: 'last', logitsAt: 'none' });
  const rssShared = peakRss();
  await engine.generate([prompt], { maxNewTokens: 8, stopIds: [] });
  const report: ChildReport = {
    budget, plan: engine.memoryPlan ? { ...engine.memoryPlan } : null, rssImports, rssSession, rssLong, rssShared, rssEnd: peakRss(),
    steps, maxStepTokens, seconds: (performance.now() - t0) / 1000,
  };
  await engine.dispose();
  process.stdout.write(`${JSON.stringify(report)}\n`);
}

/** one forward of B×T tokens (hidden + logits at the last position) in a fresh process: VmHWM growth vs stepBytes */
async function calibrateChild(dir: string, threads: number, shape: string): Promise<void> {
  const { loadCheckpoint } = await import('../src/checkpoint/load.ts');
  const { createEngineFromCheckpoint } = await import('../src/engine/engine.ts');
  const { stepBytes, weightBytes } = await import('../src/engine/runtime/memory.ts');
  const ck = await loadCheckpoint(dir);
  const rssImports = peakRss();
  const engine = await createEngineFromCheckpoint(ck, { ...engineEnv(), threads, cacheDir: join(dir, 'cache') });
  const rssSession = peakRss();
  const [B, T] = shape.split('x').map(Number) as [number, number];
  const ids = Array.from({ length: B }, (_, b) => Array.from({ length: T }, (_, i) => 3 + ((i * 7919 + b * 104729) % (SHAPE.vocabSize - 3))));
  await engine.forward(ids, { hiddenAt: 'last', logitsAt: 'last' });
  const rssStep = peakRss();
  const model = stepBytes(ck.config, { batch: B, width: T, past: 0, hidden: B, logits: B }, engine.attention);
  process.stdout.write(`${JSON.stringify({ shape, rssImports, rssSession, rssStep, model, weights: weightBytes(ck.config, 'f32') })}\n`);
  await engine.dispose();
}

async function main(): Promise<void> {
  const self = fileURLToPath(import.meta.url);
  const threads = Number(flag('threads') ?? 2);
  const long = Number(flag('long') ?? 3072);
  if (flag('child')) return child(flag('child')!, flag('budget')!, threads, long);
  if (flag('calibrate-child')) return calibrateChild(flag('calibrate-child')!, threads, flag('shape')!);
  if (process.argv.includes('--write')) {
    const { writeRandomCheckpoint } = await import('../src/checkpoint/random.ts');
    await writeRandomCheckpoint(flag('write')!, 'llama', { ...SHAPE, std: 0.02 });
    return;
  }
  const keep = flag('keep');
  const root = keep ?? mkdtempSync(join(tmpdir(), 'safekeep-bench-memory-'));
  const dir = join(root, 'model');
  const node = (args: string[]) => spawnSync(process.execPath, ['--import', 'tsx', self, ...args], { encoding: 'utf8', maxBuffer: 1 << 26 });
  try {
    if (!existsSync(join(dir, 'model.safetensors'))) {
      const w = node(['--write', dir]);
      if (w.status !== 0) throw new Error(`writing the checkpoint failed: ${w.stderr}`);
    }
    if (flag('calibrate')) {
      // step growth (VmHWM after one forward − after the session) next to the model's stepBytes, per shape
      process.stdout.write('| B×T | VmHWM imports / session (MiB) | step growth (MiB) | model stepBytes (MiB) | measured / model |\n| --- | --- | --- | --- | --- |\n');
      for (const shape of flag('calibrate')!.split(',')) {
        const r = node(['--calibrate-child', dir, '--shape', shape, '--threads', String(threads)]);
        if (r.status !== 0) { process.stdout.write(`| ${shape} | failed: ${r.stderr.trim().split('\n').at(-1)} | | | |\n`); continue; }
        const c = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { rssImports: number; rssSession: number; rssStep: number; model: number };
        const grow = c.rssStep - c.rssSession;
        process.stdout.write(`| ${shape} | ${mib(c.rssImports)} / ${mib(c.rssSession)} | ${mib(grow)} | ${mib(c.model)} | ${(grow / c.model).toFixed(2)} |\n`);
      }
      return;
    }
    const budgets = (flag('budgets') ?? '1.5GB,2GB,3GB').split(',');
    process.stderr.write(`bench:memory: SmolLM2-135M shape f32, ${threads} threads, long prompt ${long} tokens; one fresh child per budget\n`);
    const rows: string[] = [];
    for (const b of ['none', ...budgets]) {
      const r = node(['--child', dir, '--budget', b, '--threads', String(threads), '--long', String(long)]);
      if (r.status !== 0) {
        const why = r.stderr.trim().split('\n').filter((l) => /Error|error/.test(l))[0] ?? r.stderr.trim().split('\n').at(-1);
        rows.push(`| ${b} | refused or failed: ${why} | | | | | |`);
        continue;
      }
      const rep = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as ChildReport | { refused: string };
      if ('refused' in rep) { rows.push(`| ${b} | refused: ${rep.refused} | | | | | | |`); continue; }
      const p = rep.plan;
      const held = rep.budget === null ? '' : rep.rssEnd <= rep.budget ? 'yes' : `NO (+${mib(rep.rssEnd - rep.budget)} MiB)`;
      rows.push(`| ${b} | ${p ? `${mib(p.weightBytes!)} / ${mib(p.stepBytes!)} / ${mib(p.prefixCacheBytes!)} | ${p.maxBatchTokens} / ${p.maxChunkTokens}` : '— | —'} | ${mib(rep.rssImports)} / ${mib(rep.rssSession)} / ${mib(rep.rssLong)} / ${mib(rep.rssShared)} | **${mib(rep.rssEnd)}** | ${held} | ${rep.steps} steps, ≤ ${rep.maxStepTokens} tokens | ${rep.seconds.toFixed(1)} |`);
      process.stderr.write(`  ${b}: peak ${mib(rep.rssEnd)} MiB\n`);
    }
    process.stdout.write([
      '| budget | plan: weights / step / prefix cache (MiB) | plan: batch / chunk tokens | VmHWM after imports / session / long forward / shared batch (MiB) | peak VmHWM (MiB) | held | steps | s |',
      '| --- | --- | --- | --- | --- | --- | --- | --- |',
      ...rows,
    ].join('\n') + '\n');
  } finally {
    if (!keep) rmSync(root, { recursive: true, force: true });
  }
}

await main();
