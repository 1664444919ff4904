/**
 * Behavioural refusal, chatbot vs agent (paper §3.1: Llama-3.1-8B refuses 58 % of harmful requests as a chatbot,
 * 3 % as an agent): greedy answers to the evaluation split's harmful requests in the chatbot configuration and in
 * the full agent configuration (JSON schemas), each labelled by the outcome classifier (refusal = refusal-substring
 * list), run as harness tasks (src/harness/generation.ts). Generations are cached under results/<model>/behavioural/
 * keyed by their exact inputs, beside the per-sample logs (log.<config>.jsonl).
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BehaviouralRefusal, BehaviouralRefusalRow } from '../analysis/results.ts';
import { wilsonInterval } from '../analysis/stats.ts';
import { loadCheckpoint } from '../checkpoint/load.ts';
import { writeFileAtomic } from '../util/atomic.ts';
import { ItemProgress } from '../util/progress.ts';
import type { ExtractContext } from './extract.ts';
import { generationBatches, generationTask } from '../harness/generation.ts';
import { writeEvalLog } from '../harness/log.ts';
import { runTask } from '../harness/runner.ts';
import { Limiter } from '../util/limit.ts';
import { callFormatOf, type CallFormat } from '../outcome/types.ts';

const BEHAVIOURAL_CONFIGS = [
  { config: 'chatbot', label: 'chatbot' },
  { config: 'agent', label: 'agent (JSON schemas)' },
] as const;

interface Generation { pairId: string; text: string; label: string }

/** Refusal rates of both configurations on the evaluation split's harmful requests. */
export async function behaviouralRefusal(ctx: ExtractContext, maxNewTokens: number): Promise<BehaviouralRefusal> {
  const outDir = join(ctx.cacheDir, '..', 'behavioural');
  mkdirSync(outDir, { recursive: true });
  const family = (await loadCheckpoint(ctx.modelDir)).config.family;
  const t = ctx.tok.family;
  const format: CallFormat = t === 'llama3' || t === 'qwen' || t === 'mistral' ? t : callFormatOf[family];
  const evalSet = new Set(ctx.split.evaluation);
  const pairs = ctx.set.pairs.filter((p) => evalSet.has(p.id));
  // both configurations' batches in flight together under one bound (--gen-concurrency): the scheduler decodes them
  // side by side; rows stay in configuration order
  const limiter = new Limiter(ctx.genConcurrency);
  const rows: BehaviouralRefusalRow[] = await Promise.all(BEHAVIOURAL_CONFIGS.map(async ({ config, label }): Promise<BehaviouralRefusalRow> => {
    const prompts = pairs.map((p) => ctx.builder.render(p.harmful.prompt, p.tools, config, 'schema'));
    const file = join(outDir, `generations.${config}.jsonl`);
    const key = JSON.stringify({ hashes: prompts.map((p) => p.hash), maxNewTokens, model: ctx.baseManifest.model });
    let gens: Generation[] | null = null;
    if (existsSync(file)) {
      const lines = readFileSync(file, 'utf8').trim().split('\n');
      if ((JSON.parse(lines[0]!) as { key?: string }).key === key) gens = lines.slice(1).map((l) => JSON.parse(l) as Generation);
    }
    if (!gens) {
      const progress = new ItemProgress(`behavioural refusal (${config})`, pairs.length, { quiet: ctx.quiet });
      const task = generationTask<Generation>({
        name: 'behavioural', solver: config, model: { generate: (ids, o) => ctx.engine.generate(ids, o), decode: (ids) => ctx.tok.decode(ids) },
        options: { maxNewTokens }, format, row: (p, g) => ({ pairId: p.id, text: g.text, label: g.label }),
      });
      let shown = 0;
      const run = await runTask(task, generationBatches(pairs.map((p, i) => ({ id: p.id, text: prompts[i]!.text, ids: prompts[i]!.ids!, tools: config === 'agent' ? p.tools : [] })), 8), {
        limiter,
        onProgress: (done) => { const n = Math.min(pairs.length, done * 8); progress.add(n - shown); shown = n; },
      });
      progress.finish();
      gens = run.results.flat().map((x) => x.row);
      writeFileAtomic(file, [JSON.stringify({ key }), ...gens.map((g) => JSON.stringify(g))].join('\n') + '\n');
      writeEvalLog(join(outDir, `log.${config}.jsonl`), {
        header: { format: 'safekeep-log', task: `behavioural/${config}`, protocol: { maxNewTokens, config, requests: 'harmful, evaluation split' }, context: { model: ctx.baseManifest.model } },
        samples: run.samples,
      });
    }
    const refusals = gens.filter((g) => g.label === 'refusal').length;
    const iv = wilsonInterval(refusals, gens.length);
    return { config, label, n: gens.length, refusals, rate: gens.length ? refusals / gens.length : 0, lo: iv.lo, hi: iv.hi };
  }));
  return { requests: `harmful requests of the evaluation split (${pairs.length})`, maxNewTokens, rows };
}
