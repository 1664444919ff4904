/**
 * `npm run bench:generate [-- --rounds R --prompts N --new-tokens K --threads T --device cpu|cuda|webgpu --dtype f32|f16
 *    --kv-dtypes f32,f16 --embeddings host,graph --base REV --base-batches 8,32
 *    --hf-batches B,… --no-hf --no-llama --llama-batch 512 --modes M,… --mem-log PREFIX --keep DIR --json FILE]`: generation throughput on the
 * serving workload — a SmolLM2-135M-shaped random checkpoint (f32), N = 32 prompts of 151–587 tokens (random ids),
 * exactly K = 64 new tokens each (no stop ids), greedy, 2 threads — in fresh child processes, the modes interleaved
 * round by round (order reversed every other round; best of R kept, so every mode sees the same machine load):
 * - `one`: safekeep, one call at a time (what the chat backends did: each call awaited before the next);
 * - `scheduled`: safekeep, all N calls in flight on the scheduler (src/engine/run/scheduler.ts);
 * - `base batch B` for each B of --base-batches (default 8 and N): the code at --base (default fccaa3b^, the commit
 *   before the scheduler; `main` while main has none) running `generate` on B rows at a time, its best path before
 *   continuous batching (left-padded pieces of ≤ 4,096 tokens decoded in turn) — batch 8 is the peak-RSS yardstick;
 * - `llama.cpp parallel`: node-llama-cpp (bench/llama/setup.ts installs it into .cache/llama-node) on the same
 *   checkpoint as GGUF F32 (bench/llama/to_gguf.py: the same function as our f32), one context of N sequences
 *   (`sequences: N`, batch --llama-batch tokens, llama.cpp's defaults otherwise: F16 KV cache, flash attention auto),
 *   all N prompts evaluated concurrently, greedy (temperature 0), stopped at K tokens; skipped with the reason when
 *   node-llama-cpp or gguf-py cannot be set up;
 * - HF rows (`python3 bench/hf_generate.py`, the same prompt ids): transformers `generate` at batch --hf-batches
 *   (default 16, the best of 1/8/16/32 measured before) and `generate_batch` (continuous batching, paged sdpa); they
 *   need torch + transformers (pip, a developer tool) and are skipped with the reason printed without them.
 * Each safekeep child times every engine step (bench/step-timer.ts: T = 1 on a cache = decode, else prefill) and
 * prints tokens generated / s, decode-only tok/s (the N·(K − 1) tokens decode steps produce / the time in decode
 * steps), the prefill rate, peak RSS (VmHWM), and the masked attention share: of the attention slots its decode steps
 * computed, the share left of a row's start (what a paged layout with per-row lengths would skip) and the share
 * masked in all, and what that left share costs of the decode step's multiply-adds.
 * The bound: the workload's time if every prompt token ran at the scheduled run's own measured prefill rate and every
 * decode token at its measured full-batch decode rate (its steps with all N rows) — tokens/s at that time, and the
 * scheduled run's fraction of it (target ≥ 0.8); ratios against one at a time, the base rows, HF's best batched row
 * and llama.cpp parallel.
 * `--modes one,scheduled,base8,hf,llama`: only those rows (base<B> for base batch B), e.g. `--modes scheduled,base8`
 * for the peak-RSS comparison without the slow one-at-a-time row. `--mem-log PREFIX`: each safekeep child writes
 * PREFIX.<mode><kv dtype><embeddings>.jsonl (the last two when the row sets them), one line after every engine step: VmRSS / VmHWM, V8's arrayBuffers / external / heap, and the
 * scheduler's decode-row KV, prefix-store and prefill-cache bytes (what holds memory at the peak).
 * `--embeddings host,graph`: a scheduled row for each place the token embedding is looked up (EngineConfig.embeddings;
 * each KV dtype gets one per choice), the peak-RSS A/B of the host lookup against the graph's Gather.
 * `--workload table4`: the Table-4-like workload of bench/generate-table4.ts instead.
 * Results: a table on stdout and JSON in --json FILE (default <tmp>/safekeep-bench-generate[-table4].json;
 * bench:projection reads the serving workload's from there). Progress on stderr.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { SMOLLM2_SHAPE, finishBench, flag, loadavg, peakRss, runChild } from './common.ts';
import { baseRev, baseTree, fmt, interleave, maskedCells, type Mode } from './generate-rounds.ts';
import { emptyTimes, maskedFlopShare, timeSteps } from './step-timer.ts';

const here = fileURLToPath(import.meta.url);
const repo = resolve(here, '..', '..');

/** N prompt lengths spread over 151–587 (a fixed shuffle, so arrival order mixes long and short) and their ids */
export function workload(n: number, vocab: number): number[][] {
  const lengths = Array.from({ length: n }, (_, i) => 151 + Math.round((i * (587 - 151)) / Math.max(1, n - 1)));
  const order = lengths.map((_, i) => (i * 13) % n);
  let x = 12345;
  return order.map((i) => Array.from({ length: lengths[i]! }, () => { x = (x * 1103515245 + 12345) % 2 ** 31; return 3 + (x % (vocab - 3)); }));
}

/** child: one safekeep mode on the serving workload (`--root`: the tree whose engine runs) */
async function servingChild(): Promise<Record<string, unknown>> {
  const root = flag('root')!;
  const mode = flag('mode')!;
  const n = Number(flag('prompts') ?? 32);
  const K = Number(flag('new-tokens') ?? 64);
  const { createEngine } = await import(pathToFileURL(join(root, 'src', 'engine', 'engine.ts')).href) as typeof import('../src/engine/engine.ts');
  // device, weight and KV dtypes only for this tree's engine (a base revision may not know them)
  const own = {
    ...(flag('device') ? { device: flag('device') as 'cpu' | 'cuda' | 'webgpu' } : {}),
    ...(flag('dtype') ? { dtype: flag('dtype') as 'f32' | 'f16' } : {}),
    ...(flag('kv-dtype') ? { kvDType: flag('kv-dtype') as 'f32' | 'f16' } : {}),
    ...(flag('embeddings') ? { embeddings: flag('embeddings') as 'host' | 'graph' } : {}),
  };
  const engine = await createEngine(flag('model')!, { threads: Number(flag('threads') ?? 2), cacheDir: flag('cache')!, quiet: true, ...own });
  const prompts = workload(n, engine.vocabSize);
  const times = timeSteps(engine);
  const memLog = flag('mem-log') ? memSampler(engine) : null;
  // warm-up (graph load, first-run allocations) outside the timed part, then the step times reset
  await engine.generate([prompts[0]!.slice(0, 32)], { maxNewTokens: 2, stopIds: [] });
  Object.assign(times, emptyTimes());
  const opts = { maxNewTokens: K, stopIds: [] as number[] };
  const t0 = performance.now();
  let generated = 0;
  if (mode === 'one') {
    for (const p of prompts) generated += (await engine.generate([p], opts))[0]!.generatedIds.length;
  } else {
    // scheduled: every row at once; base batch B: B rows at a time
    const B = mode === 'batch' ? Number(flag('batch') ?? n) : n;
    for (let i = 0; i < n; i += B) for (const r of await engine.generate(prompts.slice(i, i + B), opts)) generated += r.generatedIds.length;
  }
  const wallS = (performance.now() - t0) / 1000;
  const full = times.decodeSteps.filter((x) => x.batch === n).map((x) => x.s).sort((a, b) => a - b);
  const fullStepS = full.length ? full[Math.floor(full.length / 2)]! : NaN;
  if (memLog) writeFileSync(flag('mem-log')!, memLog.map((r) => JSON.stringify(r)).join('\n') + '\n');
  const out = {
    mode, wallS, generated, promptTokens: prompts.reduce((s, p) => s + p.length, 0),
    tps: generated / wallS, decodeTps: n * (K - 1) / times.decodeS, prefillTps: times.prefillTokens / times.prefillS,
    fullBatchDecodeTps: n / fullStepS, fullBatchSteps: full.length, decodeSteps: times.decodeSteps.length,
    slots: times.slots, maskedFlops: maskedFlopShare(SMOLLM2_SHAPE, times.slots), peakRss: peakRss(), load: loadavg(),
  };
  await engine.dispose();
  return out;
}

/**
 * `--mem-log FILE` (scheduled/batch children): after every engine step one line of what holds memory then — VmRSS /
 * VmHWM, anonymous and file-backed resident bytes (RssAnon / RssFile: mmapped weight pages are the latter), V8's arrayBuffers / external, and the scheduler's own buffers (decode rows' KV, prefix-store blocks, the
 * batch-1 prefill caches alive) — so the peak can be attributed.
 */
function memSampler(engine: { step(inp: never): Promise<unknown>; scheduler?: unknown }): Record<string, number | string>[] {
  const rows: Record<string, number | string>[] = [];
  const step = engine.step.bind(engine) as (inp: unknown) => Promise<unknown>;
  const kb = (re: RegExp) => Number(re.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? NaN) * 1024;
  (engine as { step: (inp: unknown) => Promise<unknown> }).step = async (inp: unknown) => {
    const out = await step(inp);
    const held = (engine.scheduler as undefined | { heldKvBytes?: () => { decodeKv: number; prefixStore: number; prefillKv: number } })?.heldKvBytes?.();
    const m = process.memoryUsage();
    const i = inp as { width: number; batch: number };
    rows.push({
      kind: i.width === 1 ? 'decode' : 'prefill', batch: i.batch, width: i.width,
      rss: kb(/VmRSS:\s+(\d+) kB/), hwm: kb(/VmHWM:\s+(\d+) kB/), rssAnon: kb(/RssAnon:\s+(\d+) kB/), rssFile: kb(/RssFile:\s+(\d+) kB/), arrayBuffers: m.arrayBuffers, external: m.external, heapUsed: m.heapUsed,
      rowKv: held?.decodeKv ?? 0, prefixStore: held?.prefixStore ?? 0, prefillCaches: held?.prefillKv ?? 0,
    });
    return out;
  };
  return rows;
}

/** child: llama.cpp with N parallel sequences on the GGUF F32 of the same checkpoint */
async function llamaChild(): Promise<Record<string, unknown>> {
  const { loadLlamaCpp } = await import('./llama/setup.ts');
  const n = Number(flag('prompts') ?? 32);
  const K = Number(flag('new-tokens') ?? 64);
  const threads = Number(flag('threads') ?? 2);
  const prompts = workload(n, Number(flag('vocab')));
  const llama = await loadLlamaCpp();
  const model = await llama.loadModel({ modelPath: flag('gguf')!, gpuLayers: 0 });
  // contextSize is per sequence in node-llama-cpp (it sizes the KV cache contextSize × sequences)
  const ctx = await model.createContext({
    contextSize: Math.max(...prompts.map((p) => p.length)) + K + 8, sequences: n, batchSize: Number(flag('llama-batch') ?? 512),
    threads: { ideal: threads, min: threads },
  });
  const seqs = prompts.map(() => ctx.getSequence());
  const gen = async (i: number, p: number[]): Promise<number> => {
    let k = 0;
    for await (const _ of seqs[i]!.evaluate(p, { temperature: 0, yieldEogToken: true })) if (++k >= K) break;
    return k;
  };
  await gen(0, prompts[0]!.slice(0, 32)); // warm-up
  await seqs[0]!.clearHistory();
  const t0 = performance.now();
  const counts = await Promise.all(prompts.map((p, i) => gen(i, p)));
  const wallS = (performance.now() - t0) / 1000;
  const generated = counts.reduce((a, b) => a + b, 0);
  const out = { mode: 'llama', wallS, generated, promptTokens: prompts.reduce((s, p) => s + p.length, 0), tps: generated / wallS, shortRows: counts.filter((c) => c < K).length, threadsSeen: ctx.currentThreads, peakRss: peakRss(), load: loadavg() };
  await llama.dispose();
  return out;
}

/** why llama.cpp cannot run here, or null (node-llama-cpp installed by bench/llama/setup.ts, gguf-py importable) */
function llamaSetup(): string | null {
  if (process.argv.includes('--no-llama')) return '--no-llama';
  const py = spawnSync('python3', ['-c', 'import gguf, numpy'], { encoding: 'utf8' });
  if (py.status !== 0) return 'python3 cannot import gguf and numpy (bench/llama/to_gguf.py writes the GGUF): pip install gguf numpy';
  return null;
}

async function servingMain(): Promise<void> {
  const rounds = Number(flag('rounds') ?? 1);
  const n = Number(flag('prompts') ?? 32);
  const K = Number(flag('new-tokens') ?? 64);
  const threads = Number(flag('threads') ?? 2);
  const keep = flag('keep');
  const dir = keep ? resolve(keep) : mkdtempSync(join(tmpdir(), 'safekeep-bench-gen-'));
  mkdirSync(dir, { recursive: true });
  try {
    const model = join(dir, 'model');
    if (!existsSync(join(model, 'config.json'))) {
      process.stderr.write('writing the SmolLM2-shaped random checkpoint…\n');
      await writeRandomCheckpoint(model, 'llama', SMOLLM2_SHAPE);
    }
    const rev = baseRev();
    const base = baseTree(dir, rev);
    const baseBatches = (flag('base-batches') ?? `8,${n}`).split(',').map(Number).filter((b, i, xs) => b > 0 && b <= n && xs.indexOf(b) === i);
    const hfOk = !process.argv.includes('--no-hf') && spawnSync('python3', ['-c', 'import torch, transformers'], { encoding: 'utf8' }).status === 0;
    const idsFile = join(dir, 'ids.json');
    writeFileSync(idsFile, JSON.stringify(workload(n, SMOLLM2_SHAPE.vocabSize)));
    const notes: string[] = [];
    let llamaWhy = llamaSetup();
    const gguf = join(dir, 'model-f32.gguf');
    if (llamaWhy === null) {
      try {
        const { ensureLlamaNode } = await import('./llama/setup.ts');
        ensureLlamaNode();
        if (!existsSync(gguf)) {
          process.stderr.write('converting the checkpoint to GGUF F32 (bench/llama/to_gguf.py)…\n');
          runChild('python3', [join(repo, 'bench', 'llama', 'to_gguf.py'), model, gguf, '--type', 'f32'], 'to_gguf.py');
        }
      } catch (e) {
        llamaWhy = (e as Error).message.split('\n')[0]!;
      }
    }
    const node = (args: string[], what: string) => runChild(process.execPath, ['--import', 'tsx', here, '--child', ...args], what).json;
    // PREFIX.<mode><kv dtype><embeddings>.jsonl (the row's own flags, when given)
    const valueOf = (extra: string[], f: string) => { const i = extra.indexOf(f); return i >= 0 ? extra[i + 1]! : ''; };
    const memLog = (mode: string, extra: string[]) => flag('mem-log') ? ['--mem-log', `${flag('mem-log')}.${mode}${valueOf(extra, '--kv-dtype')}${valueOf(extra, '--embeddings')}.jsonl`] : [];
    const sk = (root: string, mode: string, cache: string, extra: string[] = []) => () =>
      node(['--root', root, '--mode', mode, '--model', model, '--cache', join(dir, cache), '--threads', String(threads), '--prompts', String(n), '--new-tokens', String(K), ...extra, ...memLog(mode, extra)], mode);
    const hf = (args: string[], name: string) => () =>
      runChild('python3', [join(repo, 'bench', 'hf_generate.py'), ...args, '--model', model, '--threads', String(threads), '--ids', idsFile, '--new-tokens', String(K)], name).json;
    const baseName = (b: number) => `base (${rev}) generate batch ${b}`;
    const hfNames = (flag('hf-batches') ?? '16').split(',').map((b) => ({ name: `HF transformers generate batch ${b}`, b }));
    const LLAMA = `llama.cpp parallel (${n} sequences, F32)`;
    const SCHED = `safekeep scheduled (${n} in flight)`;
    const ONE = 'safekeep, one call at a time';
    // --device cpu|cuda|webgpu, --dtype f32|f16 for this tree's rows; --kv-dtypes f32,f16: a scheduled row per KV dtype
    // (the first is SCHED, the one the bound is computed for), so peak memory shows both ways
    const device = flag('device') ?? 'cpu';
    const dtype = flag('dtype') ?? (device === 'cpu' ? 'f32' : 'f16');
    const ownArgs = ['--device', device, '--dtype', dtype];
    const kvs = (flag('kv-dtypes') ?? '').split(',').filter(Boolean);
    const kvArgs = (kv: string | undefined) => (kv ? ['--kv-dtype', kv] : []);
    // --embeddings host,graph: where the embedding is looked up (EngineConfig.embeddings), a scheduled row per choice
    // and KV dtype; the first choice's rows are the ones named as usual
    const embs = (flag('embeddings') ?? '').split(',').filter(Boolean);
    const embArgs = (e: string | undefined) => (e ? ['--embeddings', e] : []);
    /** the scheduled row of KV dtype `kv` (its name's suffix `kvName`) for each embedding choice after the first */
    const otherEmbs = (kv: string | undefined, kvName: string) => embs.slice(1).map((e) => ({
      name: `${SCHED}${kvName}, embeddings ${e}`, run: sk(repo, 'scheduled', 'cache', [...ownArgs, ...kvArgs(kv), ...embArgs(e)]),
    }));
    const modes: Mode[] = [
      { name: ONE, run: sk(repo, 'one', 'cache', [...ownArgs, ...kvArgs(kvs[0]), ...embArgs(embs[0])]) },
      ...('root' in base ? baseBatches.map((b) => ({ name: baseName(b), run: sk(base.root, 'batch', 'cache-base', ['--batch', String(b)]) })) : []),
      ...(hfOk ? [...hfNames.map((h) => ({ name: h.name, run: hf(['batch', '--batch', h.b], h.name), optional: true })),
        { name: 'HF generate_batch (continuous batching, paged sdpa)', run: hf(['cb'], 'HF cb'), optional: true }] : []),
      ...(llamaWhy === null ? [{ name: LLAMA, run: () => node(['--mode', 'llama', '--gguf', gguf, '--vocab', String(SMOLLM2_SHAPE.vocabSize), '--threads', String(threads), '--prompts', String(n), '--new-tokens', String(K), ...(flag('llama-batch') ? ['--llama-batch', flag('llama-batch')!] : [])], 'llama.cpp'), optional: true }] : []),
      { name: SCHED, run: sk(repo, 'scheduled', 'cache', [...ownArgs, ...kvArgs(kvs[0]), ...embArgs(embs[0])]) },
      ...otherEmbs(kvs[0], ''),
      ...kvs.slice(1).flatMap((kv) => [{ name: `${SCHED}, KV ${kv}`, run: sk(repo, 'scheduled', 'cache', [...ownArgs, ...kvArgs(kv), ...embArgs(embs[0])]) }, ...otherEmbs(kv, `, KV ${kv}`)]),
    ];
    // --modes one,scheduled,base8,…: only those rows (base<B> for a base batch; hf, llama for theirs)
    const only = flag('modes')?.split(',');
    const keyOf = (m: Mode) => m.name.startsWith(SCHED) ? 'scheduled' : m.name === ONE ? 'one' : m.name.startsWith('base') ? `base${m.name.split(' ').at(-1)}` : m.name.startsWith('HF') ? 'hf' : 'llama';
    if (only) modes.splice(0, modes.length, ...modes.filter((m) => only.includes(keyOf(m))));
    const loads: number[] = [];
    const { best, skipped } = interleave(modes, rounds, loads);
    const out = [`bench:generate — SmolLM2-135M shape (random), safekeep rows ${dtype} on ${device}${kvs.length ? ` (KV ${kvs.join(' / ')})` : ''}, others f32 on the CPU, ${threads} threads, ${n} prompts of 151–587 tokens, exactly ${K} new tokens, greedy; best of ${rounds} round(s), fresh processes, interleaved`, '',
      '| | tokens generated / s | decode-only tok/s | prefill tok/s | peak RSS | wall s | decode attention slots masked: left of start / all | left-masked share of decode multiply-adds | 1-min load |',
      '| --- | --- | --- | --- | --- | --- | --- | --- | --- |'];
    for (const m of modes) {
      const j = best.get(m.name);
      if (!j) continue;
      out.push(`| ${m.name} | ${fmt(j.tps)} | ${fmt(j.decodeTps)} | ${fmt(j.prefillTps, 0)} | ${((j.peakRss as number) / 1e9).toFixed(2)} GB | ${fmt(j.wallS)} | ${maskedCells(j)} | ${j.load} |`);
    }
    const perRound = modes.filter((m) => (best.get(m.name)?.peakRssRounds as number[] | undefined)?.length);
    if (rounds > 1 && perRound.length) {
      out.push('', `peak RSS in each round (GB, in round order): ${perRound.map((m) => `${m.name} ${(best.get(m.name)!.peakRssRounds as number[]).map((x) => (x / 1e9).toFixed(3)).join(' / ')}`).join('; ')}`);
    }
    const s = best.get(SCHED)!;
    const tps = (name: string) => best.get(name)?.tps as number | undefined;
    const boundS = (s.promptTokens as number) / (s.prefillTps as number) + n * (K - 1) / (s.fullBatchDecodeTps as number);
    const boundTps = (s.generated as number) / boundS;
    const fraction = (s.tps as number) / boundTps;
    out.push('', `bound (scheduled run's own rates: prefill ${fmt(s.prefillTps, 0)} tok/s, decode with all ${n} rows ${fmt(s.fullBatchDecodeTps)} tok/s over ${s.fullBatchSteps} such steps): `
      + `${fmt(boundTps)} tok/s → scheduled reaches ${fmt(fraction, 2)} of it (target ≥ 0.8: ${Number.isFinite(fraction) ? (fraction >= 0.8 ? 'met' : 'NOT met') : 'no full-batch decode step measured'})`);
    const ratio = (what: string, other: number | undefined, target?: number) => {
      if (other === undefined || !Number.isFinite(other)) return;
      const r = (s.tps as number) / other;
      out.push(`scheduled / ${what}: ${fmt(r, 2)}×${target !== undefined ? ` (target ≥ ${target}×: ${r >= target ? 'met' : 'NOT met'})` : ''}`);
    };
    ratio('one at a time', tps(ONE));
    if ('root' in base) for (const b of baseBatches) ratio(`base batch ${b}`, tps(baseName(b)));
    else notes.push(`base rows skipped: ${base.skip}`);
    const hfRows = modes.filter((m) => m.name.startsWith('HF') && best.has(m.name));
    const hfBest = hfRows.sort((a, b) => (tps(b.name)! - tps(a.name)!))[0];
    if (hfBest) ratio(`HF's best batched row (${hfBest.name})`, tps(hfBest.name), 2);
    ratio('llama.cpp parallel', tps(LLAMA), 1);
    const b8 = best.get(baseName(8));
    if (b8) {
      const [a, b] = [s.peakRss as number, b8.peakRss as number];
      out.push(`peak RSS: scheduled ${(a / 1e9).toFixed(2)} GB vs base batch 8 ${(b / 1e9).toFixed(2)} GB (target: no higher: ${a <= b ? 'met' : 'NOT met'})`);
    }
    const l = best.get(LLAMA);
    if (l && (l.shortRows as number) > 0) out.push(`llama.cpp: ${l.shortRows} of ${n} sequences ended before ${K} tokens (an end-of-generation token); its tokens/s counts the tokens it generated`);
    if (process.argv.includes('--no-hf')) notes.push('HF rows skipped: --no-hf');
    else if (!hfOk) notes.push('HF rows skipped: python3 cannot import torch + transformers (pip install torch transformers safetensors to add them)');
    if (llamaWhy !== null) notes.push(`llama.cpp row skipped: ${llamaWhy}`);
    for (const x of skipped) notes.push(`row skipped (failed): ${x}`);
    out.push(...notes, `masked attention: the decode steps attend over their whole KV buffer (capacity + 1 slots per row); "left of start" are the slots before a row's first real slot (a longer row sets the buffer's length), "all" adds the unused capacity right of the filled length; multiply-adds: attention 4·heads·head_dim per slot and layer against the linear layers' 2·params per row`);
    finishBench(flag('json') ?? join(tmpdir(), 'safekeep-bench-generate.json'), { modes: Object.fromEntries(best), scheduled: s, boundTps, fraction, base: rev }, out, loads);
  } finally {
    if (!keep) rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const workloadName = flag('workload') ?? 'serving';
  if (workloadName !== 'serving' && workloadName !== 'table4') throw new Error(`--workload serving|table4, got ${workloadName}`);
  if (process.argv.includes('--child')) {
    // the Table-4 module only in its own children: it loads the data and tokenizer stack (@huggingface/transformers),
    // which held ~180 MB of every other child's peak RSS (safekeep's and llama.cpp's alike) before a step ran
    const mode = flag('mode');
    const t4 = () => import('./generate-table4.ts');
    const r = mode === 'llama' ? await llamaChild() : mode === 't4-new' ? await (await t4()).table4NewChild() : mode === 't4-base' ? await (await t4()).table4BaseChild() : await servingChild();
    process.stdout.write(JSON.stringify(r) + '\n');
    return;
  }
  if (workloadName === 'table4') return (await import('./generate-table4.ts')).table4Main(here);
  return servingMain();
}

await main();
