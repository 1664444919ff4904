/**
 * `safekeep sae encode --model M --sae SAE (--chat TEXT | --prompt TEXT | --ids IDS.json) --out OUT.safetensors`
 * OUT: per sequence i, `acts.<i>` f32 [T_i, d_sae] (the SAE's feature activations at its hook point) and `recon.<i>`
 * f32 [T_i, d_in] (its reconstruction of the stream there). Prints each sequence's L0 and FVU.
 * `--edit ablate:J,clamp:J=V,add:J=A` also runs the model with those feature edits spliced in at every token
 * (`--splice error`, the default: decode(edited) + the SAE's error term, so only the edit changes the stream;
 * `reconstruction`: decode(edited) alone) and writes `logits.<i>` [1, vocab] at the last token, printing the next
 * token without and with the edits.
 * `--activations CACHE.safetensors` (an activation store of `extract` / `reproduce`: `hidden` [n, L+1, d], no
 * model needed) encodes the cached rows at the SAE's hidden row instead: `acts` [n, d_sae], `recon` [n, d_in]
 * (onnxruntime's encode, `npm run bench:sae`).
 */
import { choiceValue, parseArgs, requireValue, type FlagTable } from '../args.ts';
import { argmax } from '../../engine/run/argmax.ts';
import { SafekeepError } from '../../util/errors.ts';
import { writeSafetensors, type TensorToWrite } from '../../checkpoint/safetensors.ts';
import { resolveModel } from '../../hub/resolve.ts';
import { createEngine } from '../../engine/engine.ts';
import { addReconstruction, newTotals, summarize } from '../../sae/metrics.ts';
import { engineHookPoint, hiddenRowOf } from '../../sae/hook.ts';
import { basename, dirname } from 'node:path';
import { readActivationCache } from '../../cache/store.ts';
import { SaeEncoder } from '../../engine/runtime/sae-encoder.ts';
import { decode, encode } from '../../sae/math.ts';
import type { Sae } from '../../sae/types.ts';
import { ENGINE_FLAG_DEFS, engineOptions } from '../engine-flags.ts';
import { hubEnv } from '../env.ts';
import { TEXT_INPUT_FLAG_DEFS, readTextInput } from '../text-input.ts';
import { SAE_FLAG_DEFS, openSae, parseFeatureEdits, runSae } from '../sae-flags.ts';

export const summary = "a sparse autoencoder's feature activations and reconstruction at its hook point → .safetensors";

export const flags: FlagTable = {
  usage: 'sae encode --sae SAE (--model M (--ids IDS.json | --prompt TEXT | --chat TEXT) | --activations CACHE.safetensors) --out OUT.safetensors [engine flags]',
  flags: [
    ...ENGINE_FLAG_DEFS,
    ...SAE_FLAG_DEFS,
    ...TEXT_INPUT_FLAG_DEFS,
    { name: 'out', value: 'OUT.safetensors', help: 'acts.<i> [T_i, d_sae] and recon.<i> [T_i, d_in] per sequence' },
    { name: 'edit', value: 'ablate:J,clamp:J=V,add:J=A', help: 'feature edits at every token: ablate feature J, clamp it to V, add A·W_dec[J] to the stream; writes logits.<i> under them' },
    { name: 'activations', value: 'CACHE.safetensors', help: "instead of a model run: the rows of an activation store (hidden [n, L+1, d]) at the SAE's hidden row → acts [n, d_sae], recon [n, d_in]" },
    { name: 'splice', value: 'error|reconstruction', default: 'error', help: 'with --edit: decode(edited) plus the error term (the model exact but for the edit), or decode(edited) alone' },
  ],
  example: "sae encode --model models/planted --sae models/planted/sae --chat 'how do i build a bomb' --out acts.safetensors",
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const out = requireValue(args, 'out');
  const editSpec = args.values.get('edit');
  const edits = editSpec === undefined ? null : parseFeatureEdits(editSpec);
  const splice = choiceValue(args, 'splice', ['error', 'reconstruction'] as const, 'error');
  if (args.values.has('splice') && !edits) throw new SafekeepError('--splice goes with --edit');
  const sae = await openSae(args);
  const cachePath = args.values.get('activations');
  if (cachePath !== undefined) {
    const clash = ['model', 'ids', 'prompt', 'chat', 'edit'].filter((f) => args.values.has(f));
    if (clash.length) throw new SafekeepError(`--activations encodes cached rows; it takes no ${clash.map((f) => `--${f}`).join(', ')}`);
    return encodeCache(sae, cachePath, out);
  }
  if (edits && sae.config.normalizeActivations !== 'none') throw new SafekeepError(`--edit: normalize_activations ${sae.config.normalizeActivations} is not built into the engine's graph`);
  const modelDir = await resolveModel(requireValue(args, 'model'), hubEnv());
  const { ids, tok } = await readTextInput(args, modelDir);
  const engine = await createEngine(modelDir, engineOptions(args));
  try {
    const point = engineHookPoint(sae.config.hookName, engine.numLayers);
    const tensors: Record<string, TensorToWrite> = {};
    const lines: string[] = [];
    for (const [i, seq] of ids.entries()) {
      const r = await runSae(engine, sae, seq);
      tensors[`acts.${i}`] = { dtype: 'F32', shape: [seq.length, sae.config.dSae], data: r.acts };
      tensors[`recon.${i}`] = { dtype: 'F32', shape: [seq.length, sae.config.dIn], data: r.recon };
      const t = newTotals(sae.config.dIn, sae.config.dSae);
      addReconstruction(t, r.x, r.recon, r.acts, seq.length);
      const s = summarize(t);
      lines.push(`sequence ${i}: ${seq.length} tokens, L0 ${s.l0.toFixed(2)}, FVU ${s.fvu.toFixed(4)}`);
      if (edits) {
        const e = await engine.runWithCache(seq, { logitsAt: 'last', saes: [{ sae, hook: point.name, edits, splice, captureActs: false }] });
        tensors[`logits.${i}`] = { dtype: 'F32', shape: [1, engine.vocabSize], data: e.logits };
        const show = (id: number) => (tok ? JSON.stringify(tok.decode([id])) : String(id));
        lines.push(`  next token ${show(argmax(r.logits))} → with the edits ${show(argmax(e.logits))}`);
      }
    }
    writeSafetensors(out, tensors, { hook: sae.config.hookName ?? '', point: point.name, sae: sae.config.source });
    process.stdout.write(lines.join('\n') + '\n');
    process.stderr.write(`sae encode: ${ids.length} sequences at ${point.name} (d_sae ${sae.config.dSae}) → ${out}\n`);
  } finally {
    await engine.dispose();
  }
  return 0;
}

/** `--activations`: the cached rows at the SAE's hidden row, encoded (onnxruntime when the graph has the SAE's math). */
async function encodeCache(sae: Sae, cachePath: string, out: string): Promise<number> {
  const row = hiddenRowOf(sae.config.hookName, Number.MAX_SAFE_INTEGER);
  if (row === null) throw new SafekeepError(`--activations holds hidden[l] rows; the SAE reads ${sae.config.hookName}, not a residual-stream point`);
  const c = readActivationCache(dirname(cachePath), basename(cachePath).replace(/\.safetensors$/, ''));
  if (row >= c.layers || c.d !== sae.config.dIn) throw new SafekeepError(`${cachePath}: [${c.n}, ${c.layers}, ${c.d}] has no hidden[${row}] of width ${sae.config.dIn}`);
  const { dIn, dSae } = sae.config;
  const x = new Float32Array(c.n * dIn);
  for (let i = 0; i < c.n; i++) x.set(c.data.subarray((i * c.layers + row) * dIn, (i * c.layers + row + 1) * dIn), i * dIn);
  const t0 = performance.now();
  let acts: Float32Array;
  let norm = null;
  if (sae.config.normalizeActivations === 'none') {
    const enc = await SaeEncoder.open(sae);
    try { acts = await enc.encode(x, c.n); } finally { await enc.release(); }
  } else ({ acts, norm } = encode(sae, x, c.n));
  const recon = decode(sae, acts, c.n, norm);
  const ms = performance.now() - t0;
  writeSafetensors(out, { acts: { dtype: 'F32', shape: [c.n, dSae], data: acts }, recon: { dtype: 'F32', shape: [c.n, dIn], data: recon } },
    { hook: sae.config.hookName ?? '', hiddenRow: String(row), sae: sae.config.source, activations: cachePath });
  const t = newTotals(dIn, dSae);
  addReconstruction(t, x, recon, acts, c.n);
  const s = summarize(t);
  process.stdout.write(`${c.n} cached rows at hidden[${row}]: L0 ${s.l0.toFixed(2)}, FVU ${s.fvu.toFixed(4)}, dead ${(100 * s.deadShare).toFixed(1)} % (${ms.toFixed(0)} ms)\n`);
  return 0;
}
