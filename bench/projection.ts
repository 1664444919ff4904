/**
 * `npm run bench:projection [-- --gpus 1,8,32,64]`: projected wall time of the full paper run — 3 models ×
 * (reproduce: Tables 1–2, Figures 3–4; steer: Table 3; guard eval: Table 4) — on N GPUs as Slurm array tasks.
 *
 * Measured here: the token counts. Prompts are rendered by our own pipeline with the real Llama-3.1 and Qwen3
 * tokenizers and templates (Mistral: no tokenizer bundled, Llama-3.1 counts used as its proxy); every reproduce
 * prompt (7 prompt configurations + the first-token decode step of two of them) over the 205 bundled pairs; the
 * steering generations (evaluation pairs × harmful/benign × α); the Table 4 items (cases × 4 methods, tokens
 * estimated from characters as the shard partition does, ../shared data when present).
 * Measured earlier (src/engine/README.md, "Measured"): our prefill runs at 72 % of the raw GEMM rate of its
 * hardware; batched decode here is bound by reading the weights once per step.
 * ASSUMED (no GPU has run this code; every constant is printed and is a flag): the GPU's raw f16 GEMM rate and
 * memory bandwidth, that the 72 % carries over to ORT's CUDA kernels, decode at a fraction of the bandwidth with as many
 * sequences per step as the scheduler measured per weight read on the CPU (bench:generate; 8 assumed without it), every generation running to its max new tokens (an upper bound), each task loading the f16
 * model from the shared filesystem at a given rate, and the per-stage Slurm overhead measured on the local cluster.
 * Sharding is token-balanced, so a stage's wall time is its work / N plus overhead, until N exceeds its work items.
 *
 * One GPU, the whole run (the last table): the three models one after another, every stage on one H100 SXM (80 GB,
 * 3.35 TB/s) or H200 (141 GB, 4.8 TB/s), no Slurm. A decode step of B sequences costs the larger of reading the f16
 * weights plus the B sequences' f16 KV once (at the bandwidth fraction) and its 2·params·B multiply-adds (at the
 * prefill's GEMM efficiency) — so it is bandwidth-bound up to B ≈ GEMM rate / bandwidth. B is shown twice: the
 * scheduler's measured sequences per weight read on the CPU (a lower bound: CPU steps turn compute-bound at a few
 * rows) and --gpu-batch (ASSUMED 32: the sequences bench:generate's scheduler keeps in flight on its workload, each
 * step one weight read on a GPU). Every figure comes from the counted tokens and the printed assumptions.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { installTokenizer, type NpmTokenizer } from '../src/prompts/tokenizer.ts';
import { engineEnv } from '../src/cli/env.ts';
import { conditionName, openContext, renderRows } from '../src/experiments/extract.ts';
import { TABLE1, TABLE2 } from '../src/experiments/reproduce.ts';
import { agentHarmCases, injecAgentCases } from '../src/benchmarks/cases.ts';
import { evalItems } from '../src/eval/table4/eval.ts';
import { itemTokens } from '../src/eval/table4/shard.ts';
import { GUARD_METHODS } from '../src/guard/types.ts';
import { sharedPath } from '../test/helpers/shared.ts';

const args = process.argv.slice(2);
const opt = (name: string, fallback: string): string => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : fallback;
};
let decodeBatchSource = 'given by --decode-batch';
const A = {
  gpus: opt('gpus', '1,8,32,64').split(',').map(Number),
  /** raw dense f16 GEMM rate of one GPU, TFLOP/s (H100 SXM cuBLAS on large GEMMs: ~600) */
  gemmTflops: Number(opt('gemm-tflops', '600')),
  /** our measured engine / raw GEMM ratio (CPU, src/engine/README.md), assumed to carry over */
  efficiency: Number(opt('efficiency', '0.72')),
  /** HBM bandwidth TB/s (H100 SXM 3.35) and the fraction decode reaches */
  bandwidthTBs: Number(opt('bandwidth-tbs', '3.35')),
  bandwidthFraction: Number(opt('bandwidth-fraction', '0.5')),
  /**
   * sequences decoded per weight read: measured (bench:generate's scheduled decode-only rate ÷ its one-at-a-time
   * decode-only rate, read from --generate-json) unless given; 8 assumed when neither is there
   */
  decodeBatch: measuredDecodeBatch(),
  /** reading the f16 weights from the shared filesystem, GB/s per task */
  loadGBs: Number(opt('load-gbs', '1')),
  /** Slurm overhead per stage (queue + node start + merge job), seconds — from npm run bench:slurm */
  stageOverheadS: Number(opt('stage-overhead-s', '30')),
  alphas: Number(opt('alphas', '4')),
  maxNewTokens: Number(opt('max-new-tokens', '256')),
  judgeMaxTokens: 8,
  /** ASSUMED sequences per decode step on a GPU: the scheduler's in-flight count on bench:generate's workload */
  gpuBatch: Number(opt('gpu-batch', '32')),
};

/**
 * The effective decode batch of the scheduler as measured by `npm run bench:generate` (its JSON, --generate-json
 * FILE, default where that bench writes it): decode-only tokens/s with every call in flight ÷ one call at a time —
 * how many sequences one decode step's weight read serves. On the CPU it measured decode steps turn compute-bound
 * at a few rows, so this is a lower bound for a GPU, whose steps stay bandwidth-bound to far larger batches.
 */
function measuredDecodeBatch(): number {
  if (args.includes('--decode-batch')) return Number(opt('decode-batch', '8'));
  const file = opt('generate-json', join(tmpdir(), 'safekeep-bench-generate.json'));
  try {
    const j = JSON.parse(readFileSync(file, 'utf8')) as { modes: Record<string, { mode: string; decodeTps: number }> };
    const by = (m: string) => Object.values(j.modes).find((x) => x.mode === m);
    const one = by('one');
    const sched = by('scheduled');
    if (one && sched && one.decodeTps > 0 && sched.decodeTps > 0) {
      const b = sched.decodeTps / one.decodeTps;
      decodeBatchSource = `measured by bench:generate (${file}): scheduled decode ${sched.decodeTps.toFixed(1)} tok/s ÷ one at a time ${one.decodeTps.toFixed(1)} = ${b.toFixed(2)} sequences per weight read`;
      return b;
    }
  } catch { /* no measurement */ }
  decodeBatchSource = `ASSUMED 8 (no bench:generate result at ${file}; run npm run bench:generate first or pass --decode-batch)`;
  return 8;
}
/** kvBytes: f16 K and V per token, all layers (layers × kv heads × head_dim × 2 × 2 B), from each model's config */
const MODELS: Array<{ name: string; tokenizer: NpmTokenizer; family: 'llama' | 'qwen3'; vocab: number; params: number; kvBytes: number; proxy?: string }> = [
  { name: 'Llama-3.1-8B-Instruct', tokenizer: 'llama3', family: 'llama', vocab: 128256, params: 8.03e9, kvBytes: 32 * 8 * 128 * 4 },
  { name: 'Qwen3-8B', tokenizer: 'qwen3', family: 'qwen3', vocab: 151936, params: 8.19e9, kvBytes: 36 * 8 * 128 * 4 },
  { name: 'Mistral-7B-Instruct-v0.3', tokenizer: 'llama3', family: 'llama', vocab: 128256, params: 7.25e9, kvBytes: 32 * 8 * 128 * 4, proxy: 'Llama-3.1 token counts' },
];

/** the one-GPU rows: ASSUMED peak figures (dense f16 GEMM as for the N-GPU table; HBM per the data sheets) */
const GPUS = [
  { name: 'H100 SXM 80 GB', bandwidthTBs: 3.35, memGB: 80 },
  { name: 'H200 141 GB', bandwidthTBs: 4.8, memGB: 141 },
];

/**
 * A stage's work: prompt tokens, generated tokens (each one sequence-step of decode), decode steps at the run's
 * decode batch, work items, and the mean context a decode step reads (prompt + half the new tokens).
 */
interface Work { prefill: number; decodeSteps: number; items: number; generated: number; meanContext: number }

const dir = mkdtempSync(join(tmpdir(), 'bench-projection-'));
const engine = { ...engineEnv(), cacheDir: process.env.SAFEKEEP_CACHE ?? join(dir, '.graphs'), quiet: true };
try {
  const counted = new Map<string, { reproduce: Work; steer: Work }>();
  for (const tk of ['llama3', 'qwen3'] as const) {
    const m = MODELS.find((x) => x.tokenizer === tk && !x.proxy)!;
    const model = join(dir, tk);
    await writeRandomCheckpoint(model, m.family, { numLayers: 1, hiddenSize: 16, numHeads: 2, numKvHeads: 1, intermediateSize: 32, vocabSize: m.vocab, seed: 1 });
    await installTokenizer(model, tk);
    // the real chat templates (tool-calling) from ../shared when present
    const template = sharedPath('templates', tk === 'llama3' ? 'llama-3.1-instruct.jinja' : 'qwen3.jinja');
    const ctx = await openContext({ model, data: 'pairs', results: join(dir, 'results'), engine, ...(template ? { template } : {}) });
    const seen = new Set<string>();
    const reproduce: Work = { prefill: 0, decodeSteps: 0, items: 0, generated: 0, meanContext: 0 };
    let steerPrompt = { harmful: 0, benign: 0 };
    for (const c of [{ config: 'chatbot', repr: null } as const, ...TABLE1.map((x) => x.c), ...TABLE2.map((x) => x.c)]) {
      if (seen.has(conditionName(c))) continue;
      seen.add(conditionName(c));
      const rows = renderRows(ctx, c);
      reproduce.prefill += rows.reduce((s, r) => s + r.ids.length, 0);
      reproduce.items += rows.length;
      // agent.schema / agent.flattened also decode the first generated token (one step per batch of rows)
      if (c.config === 'agent' && c.repr !== 'pseudoword') { reproduce.decodeSteps += Math.ceil(rows.length / A.decodeBatch); reproduce.generated += rows.length; }
      if (c.config === 'agent' && c.repr === 'schema') {
        const ev = new Set(ctx.split.evaluation);
        for (const r of rows) if (ev.has(r.key.slice(0, r.key.lastIndexOf(':')))) steerPrompt[r.key.endsWith(':harmful') ? 'harmful' : 'benign'] += r.ids.length;
      }
    }
    const evalPairs = ctx.split.evaluation.length;
    await ctx.engine.dispose();
    reproduce.meanContext = reproduce.prefill / Math.max(1, reproduce.items);
    const steer: Work = {
      prefill: A.alphas * (steerPrompt.harmful + steerPrompt.benign),
      decodeSteps: A.alphas * 2 * Math.ceil(evalPairs / A.decodeBatch) * A.maxNewTokens,
      items: A.alphas * 2 * Math.ceil(evalPairs / A.decodeBatch),
      generated: A.alphas * 2 * evalPairs * A.maxNewTokens,
      meanContext: (steerPrompt.harmful + steerPrompt.benign) / Math.max(1, 2 * evalPairs) + A.maxNewTokens / 2,
    };
    counted.set(tk, { reproduce, steer });
    console.log(`${tk}: reproduce ${reproduce.items} prompts, ${reproduce.prefill} prompt tokens; steer ${evalPairs} eval pairs × 2 × ${A.alphas} α: ${steer.prefill} prompt tokens + ≤ ${A.maxNewTokens} new tokens each`);
  }
  // Table 4: AgentHarm + InjecAgent cases × 4 methods (character-estimated tokens, like the shard partition)
  const ah = sharedPath('data', 'agentharm');
  const ia = sharedPath('data', 'injecagent');
  const cases = [...(ah ? agentHarmCases(ah) : []), ...(ia ? injecAgentCases(ia) : [])];
  const items = evalItems(cases, GUARD_METHODS);
  const guardPrompt = items.reduce((s, it) => s + itemTokens(it, 0, 0), 0);
  const judged = items.filter((it) => it.method === 'safejudge' || it.method === 'safekeep').length;
  const guard: Work = {
    prefill: guardPrompt,
    // agent outputs (≤ max tokens) for every item, judge verdicts (≤ 8 tokens) for judged ones, in batches of 8
    decodeSteps: Math.ceil(items.length / A.decodeBatch) * A.maxNewTokens + Math.ceil(judged / A.decodeBatch) * A.judgeMaxTokens,
    items: items.length,
    generated: items.length * A.maxNewTokens + judged * A.judgeMaxTokens,
    meanContext: guardPrompt / Math.max(1, items.length + judged) + A.maxNewTokens / 2,
  };
  console.log(`Table 4: ${cases.length} cases${ah && ia ? '' : ' (../shared data missing: partial)'} × ${GUARD_METHODS.length} methods = ${items.length} items, ~${guardPrompt} prompt tokens (char estimate)`);

  console.log('\nassumptions (flags):', JSON.stringify(A));
  console.log(`decode batch: ${decodeBatchSource}`);
  const rows: string[] = [];
  let total1 = 0;
  const perStage: Array<{ work: number; items: number; load: number }> = [];
  for (const m of MODELS) {
    const c = counted.get(m.tokenizer)!;
    const prefillS = (tokens: number): number => (tokens * 2 * m.params) / (A.efficiency * A.gemmTflops * 1e12);
    const stepS = (2 * m.params) / (A.bandwidthFraction * A.bandwidthTBs * 1e12);
    const load = (2 * m.params) / 1e9 / A.loadGBs;
    for (const [stage, w] of [['reproduce', c.reproduce], ['steer', c.steer], ['guard eval', guard]] as const) {
      const s = prefillS(w.prefill) + w.decodeSteps * stepS;
      total1 += s;
      perStage.push({ work: s, items: w.items, load });
      rows.push(`| ${m.name}${m.proxy ? ` (${m.proxy})` : ''} | ${stage} | ${(w.prefill / 1e6).toFixed(2)} M | ${w.decodeSteps} | ${(s / 60).toFixed(1)} min |`);
    }
  }
  console.log(`\n| model | stage | prompt tokens | decode steps (batch ${A.decodeBatch.toFixed(1)}) | 1-GPU compute |\n| --- | --- | --- | --- | --- |`);
  console.log(rows.join('\n'));
  console.log(`\n1 GPU, compute only: ${(total1 / 3600).toFixed(2)} h (H100-class at the flags above; an H200's 4.8 TB/s would shorten the decode share by ${(1 - A.bandwidthTBs / 4.8).toFixed(2)} of it)`);
  console.log('\n| GPUs (array tasks per stage) | projected wall time, 9 stages one after another | if the 3 models run side by side (N/3 GPUs each) |\n| --- | --- | --- |');
  for (const n of A.gpus) {
    // stages run one after another on all N GPUs: each = max(work/N, one item) + model load + overhead
    const seq = perStage.reduce((s, st) => s + st.work / Math.min(n, st.items) + st.load + A.stageOverheadS, 0);
    const per = Math.max(1, Math.floor(n / 3));
    const side = Math.max(...[0, 1, 2].map((k) => perStage.slice(3 * k, 3 * k + 3).reduce((s, st) => s + st.work / Math.min(per, st.items) + st.load + A.stageOverheadS, 0)));
    console.log(`| ${n} | ${(seq / 60).toFixed(1)} min | ${n >= 3 ? `${(side / 60).toFixed(1)} min` : '–'} |`);
  }

  // one GPU, the whole run: the three models one after another, each stage's model load once, no Slurm
  console.log(`\nOne GPU, the whole paper run (3 models × reproduce + extraction, steer sweep ${A.alphas} α, Table 4 with ${A.maxNewTokens}-token answers), stages in turn, no Slurm; `
    + `decode step of B sequences = max((2·params + B·context·KV bytes) / (${A.bandwidthFraction} × bandwidth), 2·params·B / (${A.efficiency} × ${A.gemmTflops} TFLOP/s)):`);
  console.log('\n| GPU | decode sequences per step (B) | reproduce + extraction | steer | Table 4 | model loads | whole run | decode step bound by | peak KV at B (GB, 8B f16 weights 16 GB) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  const oneGpu: Record<string, number> = {};
  for (const g of GPUS) {
    for (const [label, B] of [[`${A.decodeBatch.toFixed(1)} (measured on the CPU)`, A.decodeBatch], [`${A.gpuBatch} (ASSUMED: the scheduler's in-flight count)`, A.gpuBatch]] as const) {
      const byStage = { reproduce: 0, steer: 0, guard: 0, load: 0 };
      let bound = { bandwidth: 0, compute: 0 };
      let peakKv = 0;
      for (const m of MODELS) {
        const c = counted.get(m.tokenizer)!;
        const prefillS = (tokens: number): number => (tokens * 2 * m.params) / (A.efficiency * A.gemmTflops * 1e12);
        for (const [stage, w] of [['reproduce', c.reproduce], ['steer', c.steer], ['guard', guard]] as const) {
          const bw = (2 * m.params + B * w.meanContext * m.kvBytes) / (A.bandwidthFraction * g.bandwidthTBs * 1e12);
          const fl = (2 * m.params * B) / (A.efficiency * A.gemmTflops * 1e12);
          const steps = w.generated / B;
          bound[bw >= fl ? 'bandwidth' : 'compute'] += steps;
          byStage[stage] += prefillS(w.prefill) + steps * Math.max(bw, fl);
          byStage.load += (2 * m.params) / 1e9 / A.loadGBs;
          peakKv = Math.max(peakKv, (B * (w.meanContext + A.maxNewTokens / 2) * m.kvBytes) / 1e9);
        }
      }
      const total = byStage.reproduce + byStage.steer + byStage.guard + byStage.load;
      oneGpu[`${g.name} B=${B.toFixed(1)}`] = total;
      const h = (x: number) => (x >= 3600 ? `${(x / 3600).toFixed(2)} h` : `${(x / 60).toFixed(1)} min`);
      console.log(`| ${g.name} | ${label} | ${h(byStage.reproduce)} | ${h(byStage.steer)} | ${h(byStage.guard)} | ${h(byStage.load)} | **${h(total)}** | ${bound.bandwidth >= bound.compute ? 'bandwidth' : 'compute'} | ${peakKv.toFixed(1)}${peakKv + 16.4 > g.memGB ? ' (does NOT fit)' : ''} |`);
    }
  }
  console.log('\nAssumptions of the one-GPU table (flags): GEMM rate, efficiency, bandwidth fraction and load rate as above; every generation runs to its budget (no early stop: an upper bound); '
    + 'no prefix-cache or response-cache savings counted (the Table 4 prompts share system prompts and tool specs, and Base\'s agent call equals SafeKeep\'s execution call when the judge passes: both lower the figure); '
    + 'InjecAgent\'s data-stealing step 2 calls not counted (they run only after a step-1 success). Measured: the token counts above (our tokenizers and templates), and the CPU decode batch.');
} finally {
  rmSync(dir, { recursive: true, force: true });
}
