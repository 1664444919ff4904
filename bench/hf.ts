/**
 * `npm run bench:hf [-- --model DIR --threads 1,2 --rounds R --reps R --pairs P|all --rows micro,extract
 *    --python PATH --keep DIR]`: Hugging Face transformers + PyTorch and safekeep side by side on
 * the same checkpoint folder, the same work and the same threads; one fresh process per measurement, HF and safekeep
 * interleaved (order alternating per round), best of --rounds kept, ratios printed with the machine load
 * (/proc/loadavg, 1 min) seen by each process. Needs `python3` with torch and transformers (developer tool; the
 * Python side is bench/hf_bench.py); without them it says so in one line and exits 0.
 *
 * Rows:
 * - prefill 1×512 tokens/s: every layer's hidden states, logits only at the last position (HF: output_hidden_states,
 *   logits_to_keep=1; safekeep: forward hiddenAt 'all', logitsAt 'last');
 * - decode tokens/s, prompt 128, greedy, steered at hidden[15] (HF: forward hook on model.layers[14]; safekeep:
 *   steer layer 15), 46 / (t(48 new) − t(2 new));
 * - extraction, the Table 1–2 workload on the bundled pair set: every configuration and representation (chatbot,
 *   +role, +instructions, agent.schema, chatbot-long, agent.flattened, agent.pseudoword), final-prompt-token hidden
 *   states at every layer. HF: length-sorted right-padded batches with output_hidden_states (bench/hf_bench.py),
 *   token ids rendered by safekeep's prompt builder (the same ids both sides). safekeep: `safekeep extract` (the
 *   CLI, end to end: tokenizer, templates, session, shared-prefix reuse, cache files). Both timed as whole processes
 *   and HF's forward loop alone; every hidden state of both is compared (‖Δ‖ / ‖h‖ per prompt and layer ≤ 1e-4;
 *   max|Δ| / max|h| printed too: random weights at depth 30 amplify f32 rounding, ~1e-4 in the deepest layers).
 * llama.cpp rows: `npm run bench:llama` (bench/llama.ts: llama.cpp through node-llama-cpp's prebuilt binary, on a
 * GGUF it writes from the same checkpoint, checked to compute the same function; f32/q8/q4).
 *
 * Model: --model DIR (a folder with config.json, safetensors and, for the extraction row, tokenizer.json), else two
 * random f32 checkpoints written to a temp folder: the SmolLM2-135M shape (micro rows, comparable with bench:engine)
 * and the same body with Llama-3.1's tokenizer and vocabulary (128,256; extraction row, so `safekeep extract` runs
 * on it as on a real model). Writes bench/hf-results.json (git-ignored).
 */
import { engineEnv } from '../src/cli/env.ts';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SMOLLM2_SHAPE, best, finishBench, flag, loadavg, runChild as run } from './common.ts';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { readActivationCache } from '../src/cache/store.ts';
import { loadPairSet } from '../src/data/load.ts';
import { createEngineFromCheckpoint } from '../src/engine/engine.ts';
import { conditionName, parseCondition, promptCacheName, stratifiedSubset } from '../src/experiments/extract.ts';
import { PromptBuilder } from '../src/prompts/configurations.ts';
import { loadPromptTexts } from '../src/prompts/texts.ts';
import { installTokenizer, loadPromptTokenizer } from '../src/prompts/tokenizer.ts';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const me = fileURLToPath(import.meta.url);
/** the Python with torch + transformers (`--python PATH`, default python3 on PATH) */
const python = flag('python') ?? 'python3';
const pyScript = join(here, 'hf_bench.py');

/** Table 1–2 conditions: the chatbot baseline, Table 1's configurations, Table 2's representations */
export const TABLE_CONDITIONS = ['chatbot', '+role', '+instructions', 'agent.schema', 'chatbot-long', 'agent.flattened', 'agent.pseudoword'];

interface Micro { prefillTps: number; decodeSteerTps: number; prefillLoad: number; decodeLoad: number }

/** safekeep's side of the micro rows, in this (fresh) process */
async function safekeepMicro(dir: string, threads: number, reps: number, cacheDir: string): Promise<Micro> {
  const ck = await loadCheckpoint(dir);
  const c = ck.config;
  const engine = await createEngineFromCheckpoint(ck, { ...engineEnv(), dtype: 'f32', threads, cacheDir });
  const prompt = Array.from({ length: 512 }, (_, i) => 3 + ((i * 7919) % (c.vocabSize - 3)));
  await engine.forward([prompt.slice(0, 64)], { hiddenAt: 'all', logitsAt: 'last' });
  const s = await best(reps, () => engine.forward([prompt], { hiddenAt: 'all', logitsAt: 'last' }));
  const prefillLoad = loadavg();
  const steer = { layer: 15, vector: Float32Array.from({ length: c.hiddenSize }, (_, i) => Math.sin(i)), alpha: 4 };
  const p128 = prompt.slice(0, 128);
  await engine.generate([p128], { maxNewTokens: 4, stopIds: [], steer });
  const t2 = await best(reps, () => engine.generate([p128], { maxNewTokens: 2, stopIds: [], steer }));
  const t48 = await best(reps, () => engine.generate([p128], { maxNewTokens: 48, stopIds: [], steer }));
  await engine.dispose();
  return { prefillTps: 512 / s, decodeSteerTps: 46 / (t48 - t2), prefillLoad, decodeLoad: loadavg() };
}

/** the token ids of every Table 1–2 condition for `pairs` pairs (round-robin over categories, as `--limit`) */
async function renderConditions(modelDir: string, pairs: number | 'all'): Promise<{ conditions: Record<string, number[][]>; nPairs: number; limit?: number }> {
  const b = new PromptBuilder(await loadPromptTokenizer(modelDir), { texts: loadPromptTexts() });
  const set = await loadPairSet('pairs');
  const ps = pairs === 'all' ? set.pairs : stratifiedSubset(set.pairs, pairs);
  const conditions: Record<string, number[][]> = {};
  for (const name of TABLE_CONDITIONS) {
    const c = parseCondition(name);
    conditions[conditionName(c)] = ps.flatMap((p) => (['harmful', 'benign'] as const).map((k) => b.render(p[k].prompt, p.tools, c.config, c.repr ?? 'schema').ids!));
  }
  return { conditions, nPairs: ps.length, ...(pairs === 'all' ? {} : { limit: pairs }) };
}

/**
 * Worst relative L2 error over the [n, L+1] hidden-state vectors of two [n, L+1, d] arrays (‖a − b‖ / ‖b‖ per
 * vector), and max|Δ| / max|h| over all values.
 */
export function hiddenDiff(a: Float32Array, b: Float32Array, d: number): { relL2: number; maxAbs: number } {
  if (a.length !== b.length) return { relL2: Infinity, maxAbs: Infinity };
  let relL2 = 0;
  let dmax = 0;
  let hmax = 0;
  for (let v = 0; v < a.length; v += d) {
    let dd = 0;
    let hh = 0;
    for (let i = v; i < v + d; i++) {
      const x = a[i]! - b[i]!;
      dd += x * x;
      hh += b[i]! * b[i]!;
      dmax = Math.max(dmax, Math.abs(x));
      hmax = Math.max(hmax, Math.abs(b[i]!));
    }
    if (hh > 0) relL2 = Math.max(relL2, Math.sqrt(dd / hh));
  }
  return { relL2, maxAbs: dmax / hmax };
}

const fmt = (x: number, digits = 1) => (Number.isFinite(x) ? x.toFixed(digits) : '—');

async function main(): Promise<void> {
  const mode = flag('mode');
  if (mode === 'safekeep-micro') {
    const r = await safekeepMicro(flag('model')!, Number(flag('threads')), Number(flag('reps') ?? 3), flag('cache')!);
    process.stdout.write(JSON.stringify(r) + '\n');
    return;
  }
  const check = spawnSync(python, [pyScript, 'check'], { encoding: 'utf8' });
  if (check.status !== 0) {
    const why = check.error ? `${python} not found` : (check.stdout || check.stderr || '').trim().split('\n').at(-1);
    process.stdout.write(`bench:hf: skipped — ${python} cannot import torch and transformers (${why}); pip install torch transformers safetensors to compare\n`);
    return;
  }
  const versions = JSON.parse(check.stdout.trim()) as { torch: string; transformers: string };
  const threadsList = (flag('threads') ?? [...new Set([1, Math.min(2, availableParallelism())])].join(',')).split(',').map(Number);
  const rounds = Number(flag('rounds') ?? 3);
  const reps = Number(flag('reps') ?? 3);
  const pairsFlag = flag('pairs') ?? '8';
  const pairs = pairsFlag === 'all' ? 'all' : Number(pairsFlag);
  const rows = (flag('rows') ?? 'micro,extract').split(',');
  const keep = flag('keep');
  const work = keep ? resolve(keep) : mkdtempSync(join(tmpdir(), 'safekeep-bench-hf-'));
  mkdirSync(work, { recursive: true });
  const cacheDir = join(work, 'cache');
  const env = { ...process.env, SAFEKEEP_QUIET: '1', SAFEKEEP_CACHE: cacheDir };
  const loads: number[] = [];
  const out: string[] = [];
  const results: Record<string, unknown> = { date: new Date().toISOString(), versions, rounds, reps };
  try {
    let microDir = flag('model') ? resolve(flag('model')!) : join(work, 'smollm2-shape');
    let extractDir = flag('model') ? microDir : join(work, 'smollm2-body-llama3-vocab');
    if (!flag('model')) {
      if (!existsSync(join(microDir, 'model.safetensors'))) {
        process.stderr.write(`writing a SmolLM2-135M-shaped random checkpoint to ${microDir} ...\n`);
        await writeRandomCheckpoint(microDir, 'llama', SMOLLM2_SHAPE);
      }
      if (rows.includes('extract') && !existsSync(join(extractDir, 'model.safetensors'))) {
        process.stderr.write(`writing the same body with Llama-3.1's tokenizer and vocabulary to ${extractDir} ...\n`);
        // std 0.02 (HF's initializer_range) instead of the default 0.1: speed does not depend on the values, and at 0.1
        // thirty random layers amplify f32 rounding chaotically (≈1e-4 apart at the deepest layer for any two
        // summation orders), which would hide a real mismatch
        await writeRandomCheckpoint(extractDir, 'llama', { ...SMOLLM2_SHAPE, std: 0.02, vocabSize: 128256, bosTokenId: 128000, eosTokenId: [128001, 128008, 128009] });
        const tpl = join(root, '..', 'shared', 'templates', 'llama-3.1-instruct.jinja');
        await installTokenizer(extractDir, 'llama3', existsSync(tpl) ? { template: readFileSync(tpl, 'utf8') } : {});
      }
    }
    microDir = resolve(microDir);
    extractDir = resolve(extractDir);
    const head = `bench:hf — HF transformers ${versions.transformers} + torch ${versions.torch} vs safekeep (onnxruntime), f32, fresh process per figure, interleaved, best of ${rounds} rounds × ${reps} reps`;
    out.push(head);
    process.stderr.write(`${head}\n`);

    if (rows.includes('micro')) {
      const micro: Record<number, { hf: Micro | null; sk: Micro | null }> = {};
      for (const t of threadsList) micro[t] = { hf: null, sk: null };
      const keepBest = (prev: Micro | null, m: Micro): Micro => prev ? {
        prefillTps: Math.max(prev.prefillTps, m.prefillTps), decodeSteerTps: Math.max(prev.decodeSteerTps, m.decodeSteerTps),
        prefillLoad: m.prefillTps > prev.prefillTps ? m.prefillLoad : prev.prefillLoad, decodeLoad: m.decodeSteerTps > prev.decodeSteerTps ? m.decodeLoad : prev.decodeLoad,
      } : m;
      for (let r = 0; r < rounds; r++) {
        for (const t of threadsList) {
          const sides = r % 2 === 0 ? ['hf', 'sk'] as const : ['sk', 'hf'] as const;
          for (const side of sides) {
            process.stderr.write(`round ${r + 1}/${rounds}, ${t} thread(s): ${side === 'hf' ? 'HF' : 'safekeep'} micro (load ${loadavg()}) ...\n`);
            const m = side === 'hf'
              ? run(python, [pyScript, 'micro', '--model', microDir, '--threads', String(t), '--reps', String(reps)], 'HF micro', env).json as unknown as Micro
              : run(process.execPath, ['--import', 'tsx', me, '--mode', 'safekeep-micro', '--model', microDir, '--threads', String(t), '--reps', String(reps), '--cache', cacheDir], 'safekeep micro', env).json as unknown as Micro;
            loads.push(m.prefillLoad, m.decodeLoad);
            micro[t]![side] = keepBest(micro[t]![side], m);
          }
        }
      }
      out.push('', `micro rows: ${flag('model') ? microDir : 'SmolLM2-135M shape (30 layers, d 576, 9/3 heads, vocab 49152, tied), random f32 weights'}`);
      out.push('| | threads | HF | safekeep | safekeep / HF | load (HF / safekeep) |', '| --- | --- | --- | --- | --- | --- |');
      for (const t of threadsList) {
        const { hf, sk } = micro[t]!;
        out.push(`| prefill 1×512, all hidden states, logits at the last position (tok/s) | ${t} | ${fmt(hf!.prefillTps, 0)} | ${fmt(sk!.prefillTps, 0)} | ${(sk!.prefillTps / hf!.prefillTps).toFixed(2)}× | ${hf!.prefillLoad} / ${sk!.prefillLoad} |`);
        out.push(`| decode, prompt 128, steered (tok/s) | ${t} | ${fmt(hf!.decodeSteerTps)} | ${fmt(sk!.decodeSteerTps)} | ${(sk!.decodeSteerTps / hf!.decodeSteerTps).toFixed(2)}× | ${hf!.decodeLoad} / ${sk!.decodeLoad} |`);
      }
      results.micro = micro;
    }

    if (rows.includes('extract')) {
      const { conditions, nPairs, limit } = await renderConditions(extractDir, pairs);
      const idsPath = join(work, 'extract-ids.json');
      writeFileSync(idsPath, JSON.stringify({ conditions }));
      const nPrompts = Object.values(conditions).reduce((s, c) => s + c.length, 0);
      const nTokens = Object.values(conditions).reduce((s, c) => s + c.reduce((a, x) => a + x.length, 0), 0);
      const hfOut = join(work, 'hf-hidden');
      const skResults = join(work, 'results');
      const model = extractDir.split('/').at(-1)!;
      const table: string[] = [];
      const perThreads: Record<number, unknown> = {};
      let worst = 0;
      let worstAbs = 0;
      const diffs: Record<string, { relL2: number; maxAbs: number }> = {};
      const bounds: string[] = [];
      let reuse = { promptTokens: 0, computedTokens: 0, ratio: 0 };
      for (const t of threadsList) {
        let hfBest: { wallS: number; forwardS: number; load: number } | null = null;
        let skBest: { wallS: number; load: number } | null = null;
        for (let r = 0; r < rounds; r++) {
          for (const side of r % 2 === 0 ? ['hf', 'sk'] : ['sk', 'hf']) {
            process.stderr.write(`round ${r + 1}/${rounds}, extraction (${nPrompts} prompts, ${nTokens} tokens, ${t} thread(s)): ${side === 'hf' ? 'HF' : 'safekeep extract'} (load ${loadavg()}) ...\n`);
            if (side === 'hf') {
              const { json, wallS } = run(python, [pyScript, 'extract', '--model', extractDir, '--threads', String(t), '--ids', idsPath, '--out', hfOut], 'HF extract', env);
              const cur = { wallS, forwardS: json.forwardS as number, load: json.load as number };
              loads.push(cur.load);
              if (!hfBest || cur.wallS < hfBest.wallS) hfBest = cur;
            } else {
              rmSync(skResults, { recursive: true, force: true }); // a fresh extraction each round (the cache would resume)
              const args = [join(root, 'bin', 'safekeep.mjs'), 'extract', '--model', extractDir, '--configs', 'chatbot,+role,+instructions,agent,chatbot-long',
                '--repr', 'schema,flattened,pseudoword', '--results', skResults, '--threads', String(t), ...(limit !== undefined ? ['--limit', String(limit)] : [])];
              const tt = performance.now();
              const r2 = spawnSync(process.execPath, args, { encoding: 'utf8', env, maxBuffer: 64 << 20 });
              const wallS = (performance.now() - tt) / 1000;
              if (r2.status !== 0) throw new Error(`safekeep extract failed (exit ${r2.status}): ${r2.stderr.trim().split('\n').slice(-5).join('\n')}`);
              const cur = { wallS, load: loadavg() };
              loads.push(cur.load);
              if (!skBest || cur.wallS < skBest.wallS) skBest = cur;
            }
          }
        }
        reuse = plannedTokens(join(skResults, model, 'cache'), Object.keys(conditions));
        // every hidden state of both (the last run of each at this thread count), per condition
        for (const name of Object.keys(conditions)) {
          const sk = readActivationCache(join(skResults, model, 'cache'), promptCacheName(parseCondition(name)));
          const buf = readFileSync(join(hfOut, `${name}.f32`));
          const dd = hiddenDiff(sk.data, new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4), sk.d);
          diffs[name] = { relL2: Math.max(diffs[name]?.relL2 ?? 0, dd.relL2), maxAbs: Math.max(diffs[name]?.maxAbs ?? 0, dd.maxAbs) };
          worst = Math.max(worst, dd.relL2);
          worstAbs = Math.max(worstAbs, dd.maxAbs);
        }
        table.push(`| whole process, s (prompts/s) | ${t} | ${fmt(hfBest!.wallS)} (${fmt(nPrompts / hfBest!.wallS, 2)}) | ${fmt(skBest!.wallS)} (${fmt(nPrompts / skBest!.wallS, 2)}) | ${(hfBest!.wallS / skBest!.wallS).toFixed(2)}× | ${hfBest!.load} / ${skBest!.load} |`);
        table.push(`| HF forward loop alone vs whole safekeep process, s | ${t} | ${fmt(hfBest!.forwardS)} | ${fmt(skBest!.wallS)} | ${(hfBest!.forwardS / skBest!.wallS).toFixed(2)}× | |`);
        const perToken = { hf: nTokens / hfBest!.forwardS, safekeep: reuse.computedTokens / skBest!.wallS };
        bounds.push(`${t} thread(s): per computed token HF ${fmt(perToken.hf, 0)} tok/s (forward loop), safekeep ${fmt(perToken.safekeep, 0)} tok/s (whole process) → `
          + `${reuse.ratio.toFixed(2)} × ${(perToken.safekeep / perToken.hf).toFixed(2)} = ${(reuse.ratio * perToken.safekeep / perToken.hf).toFixed(2)}× the forward loop; `
          + `5× would need safekeep at ${fmt((5 / reuse.ratio) * perToken.hf, 0)} tok/s per computed token`);
        perThreads[t] = { hf: hfBest, safekeep: skBest, perToken };
      }
      out.push('', `extraction row: Table 1–2 workload, ${TABLE_CONDITIONS.length} conditions × ${2 * nPairs} prompts (${nPairs} pairs${limit !== undefined ? ` of the bundled set; --pairs all for all` : ', the whole bundled set'}) = ${nPrompts} prompts, ${nTokens} tokens; ${flag('model') ? extractDir : 'SmolLM2-135M body with the Llama-3.1 tokenizer/vocabulary (128,256), random f32 (std 0.02)'}`);
      out.push('| | threads | HF (length-sorted batches, output_hidden_states) | safekeep extract | safekeep / HF | load (HF / safekeep) |', '| --- | --- | --- | --- | --- | --- |', ...table);
      out.push(`tokens computed: HF every prompt token (${nTokens}); safekeep ${reuse.computedTokens} of ${reuse.promptTokens} (shared-prefix reuse, the manifests' plan: ${reuse.ratio.toFixed(2)}× fewer). `
        + 'The end-to-end ratio is that reuse factor times the per-token speed ratio:', ...bounds.map((b) => `- ${b}`));
      out.push(`hidden states, all ${nPrompts} prompts × every layer: worst ‖Δ‖/‖h‖ per vector ${worst.toExponential(1)} (${worst <= 1e-4 ? 'equal within 1e-4' : 'NOT EQUAL: > 1e-4'}), max|Δ|/max|h| ${worstAbs.toExponential(1)}; per condition ${Object.entries(diffs).map(([k, v]) => `${k} ${v.relL2.toExponential(1)}`).join(', ')}`);
      results.extract = { nPairs, nPrompts, nTokens, reuse, perThreads, diffs };
      if (worst > 1e-4) process.exitCode = 1;
    }
    finishBench(join(here, 'hf-results.json'), results, out, loads);
  } finally {
    if (!keep) rmSync(work, { recursive: true, force: true });
  }
}

/** The shared-prefix plan of a safekeep extraction, summed over its conditions' manifests (`reuse`). */
function plannedTokens(cacheDir: string, names: readonly string[]): { promptTokens: number; computedTokens: number; ratio: number } {
  let promptTokens = 0;
  let computedTokens = 0;
  for (const name of names) {
    const m = JSON.parse(readFileSync(join(cacheDir, `${promptCacheName(parseCondition(name))}.json`), 'utf8')) as { reuse?: { promptTokens: number; computedTokens: number } };
    if (!m.reuse) throw new Error(`${name}: the safekeep manifest has no reuse plan`);
    promptTokens += m.reuse.promptTokens;
    computedTokens += m.reuse.computedTokens;
  }
  return { promptTokens, computedTokens, ratio: promptTokens / computedTokens };
}

await main();
