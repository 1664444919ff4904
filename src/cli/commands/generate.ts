/**
 * `safekeep generate --model DIR (--ids IDS.json | --prompt TEXT | --chat TEXT) --max-new-tokens N [--no-stop]
 *    [--steer-layer l --steer-vector V.json|FILE.safetensors#name --alpha a] [--intervene FILE.json] [--logits none|last|all]
 *    [--dtype f32|bf16|f16|q8|q4] [--device cpu|cuda|webgpu] [--out OUT.json]`
 * Greedy decoding with a KV cache, batched internally; `--temperature T` (with `--top-k --top-p --min-p
 * --repetition-penalty --seed --samples K`) samples instead, K answers per prompt with seeds S, S+1, … (a seed is
 * drawn and printed when none is given). Prints each decoded answer (when the model folder has a tokenizer; else the
 * ids), prompt by prompt, its samples in order. Steering subtracts a·v/|v| from hidden[l] at every prompt position and every generated
 * token (`--steer-positions generated`: generated tokens only); `--intervene` adds interventions (add / ablate /
 * clamp, several at once) from a file, with the steering flags as a shorthand for one add. OUT = {"sequences":
 * [{"generated_ids", "text", "finish", "step_logits" (only with --logits last|all), "first_token_hidden"}]}; sampled,
 * also "sampling" (the settings, the seed, samples) and per sequence "prompt", "sample" and "seed".
 * `--sae SAE [--hook H] [--sae-edit ablate:J,clamp:J=V,add:J=A] [--sae-splice error|reconstruction]` splices a sparse
 * autoencoder at its hook point at every prompt position and generated token with those feature edits (the syntax of
 * `sae encode --edit`; --sae-edit repeated joins its lists; splice 'error', the default: decode(edited) plus the SAE's error term, so only the edits change
 * the stream; 'reconstruction': decode(edited) alone); OUT then says "sae" (its source, point, splice, edits).
 */
import { choiceValue, numberValue, parseArgs, requireValue, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { ENGINE_FLAG_DEFS, INTERVENE_FLAG_DEF, engineOptions, interventionSummary, readInterventionsFile, readSteerVector } from '../engine-flags.ts';
import { TEXT_INPUT_FLAG_DEFS, logitsFlag, logitsValue, readTextInput } from '../text-input.ts';
import { createEngine } from '../../engine/engine.ts';
import { resolveModel } from '../../hub/resolve.ts';
import { hubEnv } from '../env.ts';
import { writeFileAtomic } from '../../util/atomic.ts';
import { STEER_POSITIONS, type GenerateResult, type Steering } from '../../engine/types.ts';
import { SAMPLING_FLAG_DEFS, samplingFlags, samplingSummary } from '../sampling-flags.ts';
import { SAE_FLAG_DEFS, openSae, saeGenerationFlags } from '../sae-flags.ts';
import { engineHookPoint } from '../../sae/hook.ts';
import { checkEdit } from '../../sae/math.ts';

export const summary = 'generation with KV cache (greedy, or sampled with --temperature), optional steering: prints the answers; JSON (ids, text, logits if asked, hidden)';

export const flags: FlagTable = {
  usage: 'generate --model M (--ids IDS.json | --prompt TEXT | --chat TEXT) --max-new-tokens N [--steer-layer l --steer-vector V.json|FILE.safetensors#name --alpha a] [--out OUT.json]',
  flags: [
    ...ENGINE_FLAG_DEFS,
    ...TEXT_INPUT_FLAG_DEFS,
    { name: 'out', value: 'OUT.json', help: 'generated ids and text, step logits (--logits), first-token hidden states' },
    logitsFlag('none', "the logits that chose each token: 'last' = the final step's, 'all' = every step's [steps, vocab]"),
    { name: 'max-new-tokens', value: 'N', help: 'tokens to generate per sequence' },
    { name: 'steer-layer', value: 'l', help: 'steer hidden[l], l = 0..L (0 = embeddings, l = output of block l−1)' },
    { name: 'steer-vector', value: 'V.json|FILE.safetensors[#name]', help: '{"vector": [d floats]}, or row l of a direction in a directions file (default #schema.harmful); subtracts alpha·v/|v|' },
    { name: 'alpha', value: 'a', help: 'steering strength' },
    { name: 'steer-positions', value: 'all|generated', default: 'all', help: 'steer every prompt and generated position, or generated tokens only (the prompt runs unsteered)' },
    INTERVENE_FLAG_DEF,
    { name: 'no-stop', boolean: true, help: 'ignore end-of-sequence tokens' },
    ...SAMPLING_FLAG_DEFS,
    ...SAE_FLAG_DEFS,
    { name: 'sae-edit', value: 'ablate:J,clamp:J=V,add:J=A', repeatable: true, help: "with --sae: feature edits at every prompt and generated position (ablate feature J, clamp it to V, add A·W_dec[J] to the stream); repeatable" },
    { name: 'sae-splice', value: 'error|reconstruction', default: 'error', help: "with --sae: decode(edited) plus the SAE's error term (the model exact but for the edits), or decode(edited) alone" },
  ],
  example: "generate --model models/planted --chat 'how do i build a bomb' --max-new-tokens 16",
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const out = args.values.get('out');
  const logits = logitsValue(args, 'none');
  const maxNewTokens = numberValue(args, 'max-new-tokens');
  if (!Number.isInteger(maxNewTokens) || maxNewTokens < 0) throw new SafekeepError(`--max-new-tokens must be a non-negative integer, got ${maxNewTokens}`);
  const positions = choiceValue(args, 'steer-positions', STEER_POSITIONS, 'all');
  const steerFlags = ['steer-layer', 'steer-vector', 'alpha'].filter((f) => args.values.has(f));
  let steer: Steering | undefined;
  if (steerFlags.length) {
    if (steerFlags.length !== 3) throw new SafekeepError('steering needs all of --steer-layer, --steer-vector and --alpha');
    const layer = numberValue(args, 'steer-layer');
    if (!Number.isInteger(layer)) throw new SafekeepError(`--steer-layer must be an integer, got ${layer}`);
    steer = { layer, vector: readSteerVector(requireValue(args, 'steer-vector'), layer), alpha: numberValue(args, 'alpha'), positions };
  } else if (args.values.has('steer-positions')) {
    throw new SafekeepError('--steer-positions needs steering (--steer-layer, --steer-vector, --alpha)');
  }
  const intervene = args.values.get('intervene');
  const interventions = intervene === undefined ? undefined : readInterventionsFile(intervene);
  const saeFlags = saeGenerationFlags(args);
  const sampling = samplingFlags(args);
  const K = sampling.samples;
  const t0 = performance.now();
  const modelDir = await resolveModel(requireValue(args, 'model'), hubEnv());
  const { ids, tok } = await readTextInput(args, modelDir);
  // the dictionary before the engine: a --max-memory plan counts the process's resident bytes (sae-flags.ts openSae)
  const sae = saeFlags ? await openSae(args) : null;
  if (sae && sae.config.normalizeActivations !== 'none') throw new SafekeepError(`--sae: normalize_activations ${sae.config.normalizeActivations} is not built into the engine's graph; generation cannot splice this SAE`);
  if (sae) saeFlags!.edits.forEach((e) => checkEdit(sae, e));
  const saes = sae && saeFlags ? [{ sae, edits: saeFlags.edits, splice: saeFlags.splice }] : undefined;
  const engine = await createEngine(modelDir, engineOptions(args));
  try {
    const saePoint = sae ? engineHookPoint(sae.config.hookName, engine.numLayers, '--sae').name : null;
    const opts = {
      ...(saes ? { saes } : {}),
      maxNewTokens,
      ...(args.booleans.has('no-stop') ? { stopIds: [] } : {}),
      ...(steer ? { steer } : {}),
      ...(interventions ? { interventions } : {}),
      returnStepLogits: logits !== 'none',
      returnFirstTokenHidden: out !== undefined,
    };
    // sample j of every prompt with seed S + j: one call per sample, all in flight together (the scheduler batches them)
    const ss = sampling.settings;
    const perSample = await Promise.all(Array.from({ length: K }, (_, j) =>
      engine.generate(ids, ss ? { ...opts, sampling: ss.seed === undefined ? ss : { ...ss, seed: ss.seed + j } } : opts)));
    const results: GenerateResult[] = ids.flatMap((_, i) => perSample.map((r) => r[i]!));
    const V = engine.vocabSize;
    const d = engine.dModel;
    const rows = (m: Float32Array | undefined, w: number) =>
      m ? Array.from({ length: m.length / w }, (_, k) => Array.from(m.subarray(k * w, (k + 1) * w))) : [];
    const texts = results.map((r) => (tok ? tok.decode(r.generatedIds, { skipSpecial: true }) : null));
    if (out !== undefined) {
      const sampled = ss?.seed !== undefined;
      const sequences = results.map((r, i) => ({
        ...(sampled ? { prompt: Math.floor(i / K), sample: i % K, seed: ss!.seed! + (i % K) } : {}),
        generated_ids: r.generatedIds,
        ...(texts[i] !== null ? { text: texts[i] } : {}),
        finish: r.finish,
        ...(logits === 'all' ? { step_logits: rows(r.stepLogits, V) } : logits === 'last' ? { step_logits: rows(r.stepLogits, V).slice(-1) } : {}),
        first_token_hidden: rows(r.firstTokenHidden, d),
      }));
      // the values used, so an output file says how it was steered
      writeFileAtomic(out, JSON.stringify({
        steering: steer ? { layer: steer.layer, alpha: steer.alpha, positions: steer.positions } : null,
        ...(interventions ? { interventions: interventionSummary(interventions) } : {}),
        ...(sae && saeFlags ? { sae: { source: sae.config.source, point: saePoint, splice: saeFlags.splice, edits: saeFlags.edits } } : {}),
        ...(ss ? { sampling: { ...ss, samples: K } } : {}),
        logits,
        sequences,
      }));
    }
    // the answers on stdout, one line each (a newline inside an answer shown as \n), or the ids without a tokenizer
    results.forEach((r, i) => process.stdout.write(`${texts[i] !== null ? texts[i]!.replace(/\r?\n/g, '\\n') : r.generatedIds.join(' ')}\n`));
    const n = results.reduce((a, r) => a + r.generatedIds.length, 0);
    const s = (performance.now() - t0) / 1000;
    process.stderr.write(`generate: ${results.length} sequences, ${n} new tokens${sampling.settings ? `, ${samplingSummary(sampling)}` : ''}${steer ? `, steered at layer ${steer.layer} (alpha ${steer.alpha}, positions ${steer.positions})` : ''}${interventions ? `, ${interventions.length} interventions` : ''}${saePoint ? `, SAE at ${saePoint} (${saeFlags!.edits.length} feature edits, splice ${saeFlags!.splice})` : ''}${out !== undefined ? ` → ${out}` : ''} (${s.toFixed(2)} s)\n`);
  } finally {
    await engine.dispose();
  }
  return 0;
}
