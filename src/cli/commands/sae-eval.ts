/**
 * `safekeep sae eval --model M --sae SAE [--data pairs|agentharm|PATH] [--limit N] [--json FILE]`
 * How well the dictionary reconstructs the model's stream at its hook on the paper's prompts (each pair's harmful
 * and benign request, rendered in a configuration of the paper as `extract` renders it: `--config chatbot` by
 * default, `--config agent --repr schema|flattened` with the tools): FVU, L0, the share of dead features, and the
 * next-token cross-entropy increase when the reconstruction replaces the stream, and SAELens's CE loss score against
 * the stream zeroed there (src/sae/metrics.ts).
 * `--ids / --prompt / --chat` evaluate those sequences instead.
 */
import { choiceValue, numberValue, parseArgs, requireValue, type FlagTable } from '../args.ts';
import { CONFIGS, PromptBuilder, REPRS } from '../../prompts/configurations.ts';
import { loadPromptTexts } from '../../prompts/texts.ts';
import { resolveTemplateKwargs } from '../../prompts/thinking.ts';
import { createEngine } from '../../engine/engine.ts';
import { loadPairSet } from '../../data/load.ts';
import { resolveModel } from '../../hub/resolve.ts';
import { loadPromptTokenizer } from '../../prompts/tokenizer.ts';
import { engineHookPoint } from '../../sae/hook.ts';
import { addCe, addReconstruction, newTotals, nextTokenCe, summarize } from '../../sae/metrics.ts';
import { writeJsonAtomic } from '../../util/atomic.ts';
import { SafekeepError } from '../../util/errors.ts';
import { ItemProgress } from '../../util/progress.ts';
import { ENGINE_FLAG_DEFS, engineOptions } from '../engine-flags.ts';
import { dataDirsEnv, hubEnv, quietEnv } from '../env.ts';
import { TEXT_INPUT_FLAG_DEFS, readTextInput } from '../text-input.ts';
import { SAE_FLAG_DEFS, openSae, replacedLogits, runSae } from '../sae-flags.ts';

export const summary = "a sparse autoencoder's FVU, L0, dead features and CE increase when spliced in, on the paper's prompts";

export const flags: FlagTable = {
  usage: 'sae eval --model M --sae SAE [--data pairs|agentharm|PATH] [--config chatbot|agent] [--repr schema|flattened] [--limit N] [--json FILE] [engine flags]',
  flags: [
    ...ENGINE_FLAG_DEFS,
    ...SAE_FLAG_DEFS,
    { name: 'data', value: 'pairs|agentharm|PATH', default: 'pairs', help: "pair set whose requests are the evaluation prompts (each pair's harmful and benign request)" },
    { name: 'limit', value: 'N', default: '32', help: 'at most this many prompts' },
    { name: 'config', value: CONFIGS.join('|'), default: 'chatbot', help: "the prompt configuration (as extract renders it)" },
    { name: 'repr', value: 'schema|flattened|pseudoword', default: 'schema', help: 'the tools of the agent configuration' },
    ...TEXT_INPUT_FLAG_DEFS,
    { name: 'json', value: 'FILE', help: 'the figures as JSON' },
  ],
  example: 'sae eval --model models/planted --sae models/planted/sae --data pairs',
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const limit = numberValue(args, 'limit', 32);
  if (!Number.isInteger(limit) || limit < 1) throw new SafekeepError(`--limit must be a positive integer, got ${limit}`);
  const sae = await openSae(args);
  const modelDir = await resolveModel(requireValue(args, 'model'), hubEnv());
  let sequences: number[][];
  let source: string;
  if (['ids', 'prompt', 'chat'].some((f) => args.values.has(f))) {
    if (args.values.has('data')) throw new SafekeepError('give --data or --ids / --prompt / --chat, not both');
    sequences = (await readTextInput(args, modelDir)).ids;
    source = 'command line';
  } else {
    const set = await loadPairSet(args.values.get('data') ?? 'pairs', dataDirsEnv());
    const tok = await loadPromptTokenizer(modelDir);
    const config = choiceValue(args, 'config', CONFIGS, 'chatbot');
    const repr = choiceValue(args, 'repr', REPRS, 'schema');
    const builder = new PromptBuilder(tok, { texts: loadPromptTexts(), templateKwargs: resolveTemplateKwargs(tok.template, undefined).kwargs });
    const requests = set.pairs.flatMap((p) => [{ text: p.harmful.prompt, tools: p.tools }, { text: p.benign.prompt, tools: p.tools }]).slice(0, limit);
    sequences = requests.map((r) => builder.render(r.text, r.tools, config, repr).ids!);
    source = `${set.name}, ${config === 'agent' ? `agent.${repr}` : config} (${requests.length} prompts)`;
  }
  const engine = await createEngine(modelDir, engineOptions(args));
  try {
    const point = engineHookPoint(sae.config.hookName, engine.numLayers);
    const totals = newTotals(sae.config.dIn, sae.config.dSae);
    // three passes (clean with the SAE, the reconstruction in, the stream zeroed), each over every prompt: one graph
    // session per pass; only each prompt's CE sums (and, for an SAE that normalizes its input, its reconstruction) are kept
    const progress = new ItemProgress('sae eval', 3 * sequences.length, { unit: 'forwards', quiet: quietEnv() });
    const V = engine.vocabSize;
    const clean: { sum: number; n: number }[] = [];
    const recons: (Float32Array | undefined)[] = [];
    for (const ids of sequences) {
      const r = await runSae(engine, sae, ids, 'all');
      addReconstruction(totals, r.x, r.recon, r.acts, ids.length);
      clean.push(nextTokenCe(r.logits, ids, V));
      recons.push(sae.config.normalizeActivations === 'none' ? undefined : r.recon);
      progress.add(1);
    }
    const spliced: { sum: number; n: number }[] = [];
    for (const [i, ids] of sequences.entries()) {
      spliced.push(nextTokenCe(await replacedLogits(engine, sae, ids, 'reconstruction', recons[i]), ids, V));
      recons[i] = undefined;
      progress.add(1);
    }
    for (const [i, ids] of sequences.entries()) {
      addCe(totals, clean[i]!, spliced[i]!, nextTokenCe(await replacedLogits(engine, sae, ids, 'zero'), ids, V));
      progress.add(1);
    }
    progress.finish();
    const s = summarize(totals);
    process.stdout.write([
      `SAE ${sae.config.source} at ${point.name} (${sae.config.architecture}, d_sae ${sae.config.dSae}) on ${source}, ${s.tokens} tokens:`,
      `  FVU ${s.fvu.toFixed(4)}   L0 ${s.l0.toFixed(2)}   dead features ${(100 * s.deadShare).toFixed(1)} %`,
      `  next-token CE ${s.ceClean.toFixed(4)} clean → ${s.ceSpliced.toFixed(4)} spliced (increase ${s.ceIncrease.toFixed(4)}); ${s.ceZero.toFixed(4)} with the stream zeroed: CE loss score ${s.ceLossScore.toFixed(4)}`,
    ].join('\n') + '\n');
    const json = args.values.get('json');
    if (json) writeJsonAtomic(json, { sae: sae.config.source, hook: sae.config.hookName, point: point.name, data: source, ...s }, 1);
  } finally {
    await engine.dispose();
  }
  return 0;
}
