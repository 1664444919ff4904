/**
 * `npm run bench:profile [-- --dtype f32|q8|q4 --threads N --prompt P --new N --batch B --model DIR --keep DIR]`: where a
 * decode step's time goes. Runs one greedy `generate` (B rows, default 1, of prompt length P, default 128; N new tokens,
 * default 32; B·P within the scheduler's step budget, so the B prefills come first and every decode step has B rows) with onnxruntime's
 * per-node profiler on, then sums the trace per op type and per node (layer numbers folded) over the decode steps:
 * ms per step, nodes per step, µs per node. An `If` node's own cost (entering the subgraph, binding its outer values,
 * copying its output) is its time minus the nodes that ran inside it, shown as "If (own)".
 *
 * The profiler costs a few µs per node (measured: 30 layers of 6 tiny Adds run in 66 µs unprofiled, ~0.4 µs a node,
 * and 30 `If`s around them add ~1 µs each), which lands in small nodes' times and in "If (own)" (it records every
 * node inside the branch): the profiled step is about twice the unprofiled one (timed first, in a separate engine on
 * the same checkpoint). Read the big rows (MatMulNBits, Gemm, attention MatMuls) as shares; take totals from the
 * unprofiled step. Without --model the SmolLM2-135M-shaped random checkpoint of `npm run bench`.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { engineEnv } from '../src/cli/env.ts';
import { createEngineFromCheckpoint } from '../src/engine/engine.ts';
import type { ComputeDType } from '../src/engine/graph/precision.ts';
import { SMOLLM2_SHAPE, flag, loadavg } from './common.ts';

interface TraceEvent { cat?: string; name: string; ts: number; dur: number; args?: { op_name?: string } }

/** Per op type and per node name (digits folded to N): total µs over the decode runs, and counts. */
function summarizeTrace(events: TraceEvent[], prefills: number) {
  const runs = events.filter((e) => e.cat === 'Session' && e.name === 'model_run').sort((a, b) => a.ts - b.ts);
  const decode = runs.slice(prefills); // the first runs are the prefills
  const inRun = (e: TraceEvent) => decode.some((r) => e.ts >= r.ts && e.ts <= r.ts + r.dur);
  const nodes = events.filter((e) => e.cat === 'Node' && e.name.endsWith('_kernel_time') && inRun(e));
  const ifs = nodes.filter((e) => e.args?.op_name === 'If');
  const inside = (e: TraceEvent) => ifs.some((f) => f !== e && e.ts >= f.ts && e.ts + e.dur <= f.ts + f.dur);
  const byOp = new Map<string, { us: number; n: number }>();
  const byName = new Map<string, { us: number; n: number }>();
  const add = (m: Map<string, { us: number; n: number }>, k: string, us: number) => {
    const v = m.get(k) ?? { us: 0, n: 0 };
    v.us += us;
    v.n++;
    m.set(k, v);
  };
  let nestedUs = 0;
  for (const e of nodes) {
    const op = e.args?.op_name ?? '?';
    if (op === 'If') continue;
    const nested = inside(e);
    if (nested) nestedUs += e.dur;
    add(byOp, op, e.dur);
    add(byName, e.name.replace(/_kernel_time$/, '').replace(/\d+/g, 'N'), e.dur);
  }
  const ifUs = ifs.reduce((s, e) => s + e.dur, 0);
  if (ifs.length) {
    byOp.set('If (own)', { us: ifUs - nestedUs, n: ifs.length });
  }
  const runUs = decode.reduce((s, r) => s + r.dur, 0);
  return { steps: decode.length, runUs, nodesPerStep: (nodes.length) / Math.max(1, decode.length), byOp, byName };
}

async function main(): Promise<void> {
  const dtype = (flag('dtype') ?? 'q4') as ComputeDType;
  const threads = Number(flag('threads') ?? 1);
  const P = Number(flag('prompt') ?? 128);
  const N = Number(flag('new') ?? 32);
  const B = Number(flag('batch') ?? 1);
  const work = flag('keep') ?? mkdtempSync(join(tmpdir(), 'safekeep-profile-'));
  const dir = flag('model') ?? join(work, 'model');
  if (!flag('model') && !existsSync(join(dir, 'config.json'))) {
    process.stderr.write(`writing a SmolLM2-135M-shaped random checkpoint to ${dir} ...\n`);
    await writeRandomCheckpoint(dir, 'llama', SMOLLM2_SHAPE);
  }
  const ck = await loadCheckpoint(dir);
  const V = ck.config.vocabSize;
  const prompts = Array.from({ length: B }, (_, b) => Array.from({ length: P }, (_, i) => 3 + ((i * 7919 + b * 104729) % (V - 3))));
  const base = { ...engineEnv(), dtype, threads, cacheDir: join(work, 'cache'), quiet: true };

  // an unprofiled step for reference (best of 3)
  const plain = await createEngineFromCheckpoint(ck, base);
  if (B * P > plain.scheduler.stepTokens) throw new Error(`--batch ${B} × --prompt ${P} exceeds the step budget (${plain.scheduler.stepTokens}): prefills would interleave with decode steps`);
  await plain.generate(prompts, { maxNewTokens: 4, stopIds: [] });
  let stepMs = Infinity;
  for (let r = 0; r < 3; r++) {
    const t0 = performance.now();
    await plain.generate(prompts, { maxNewTokens: 2, stopIds: [] });
    const t1 = performance.now();
    await plain.generate(prompts, { maxNewTokens: N, stopIds: [] });
    stepMs = Math.min(stepMs, (performance.now() - t1 - (t1 - t0)) / (N - 2));
  }
  await plain.dispose();

  const prefix = join(work, 'ort-profile');
  const engine = await createEngineFromCheckpoint(ck, { ...base, profile: prefix });
  await engine.generate(prompts, { maxNewTokens: N, stopIds: [] });
  await engine.dispose();
  const file = readdirSync(work).filter((f) => f.startsWith('ort-profile') && f.endsWith('.json')).map((f) => join(work, f)).at(-1);
  if (!file) throw new Error(`no profile trace under ${work}`);
  const s = summarizeTrace(JSON.parse(readFileSync(file, 'utf8')) as TraceEvent[], B);
  const perStep = (us: number) => (us / s.steps / 1000).toFixed(3);
  const out: string[] = [];
  out.push(`decode, ${dtype}, ${threads} thread(s), ${B} row(s) of prompt ${P}, ${s.steps} profiled steps; load ${loadavg()}`);
  out.push(`unprofiled step: ${stepMs.toFixed(2)} ms; profiled step: ${perStep(s.runUs)} ms; nodes per step: ${s.nodesPerStep.toFixed(0)}`);
  out.push('', '| op | ms/step | nodes/step | µs/node |', '| --- | --- | --- | --- |');
  for (const [op, v] of [...s.byOp].sort((a, b) => b[1].us - a[1].us)) {
    out.push(`| ${op} | ${perStep(v.us)} | ${(v.n / s.steps).toFixed(0)} | ${(v.us / v.n).toFixed(1)} |`);
  }
  out.push('', '| node (layer numbers folded) | ms/step |', '| --- | --- |');
  for (const [name, v] of [...s.byName].sort((a, b) => b[1].us - a[1].us).slice(0, 15)) out.push(`| ${name} | ${perStep(v.us)} |`);
  process.stdout.write(out.join('\n') + '\n');
  process.stderr.write(`trace: ${file}\n`);
  if (!flag('keep')) rmSync(work, { recursive: true, force: true });
}

await main();
