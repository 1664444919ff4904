/**
 * `safekeep forward --model DIR --ids IDS.json --out OUT.safetensors [--intervene FILE.json] [--dtype f32|bf16|f16|q8|q4] [--device cpu|cuda]`
 * OUT: per sequence i, `hidden_states.i` f32 [L+1, T_i, d_model] and `logits.i` f32 [T_i, vocab] (real tokens).
 */
import { parseArgs, requireValue, type FlagTable } from '../args.ts';
import { writeSafetensors, type TensorToWrite } from '../../checkpoint/safetensors.ts';
import { ENGINE_FLAG_DEFS, INTERVENE_FLAG_DEF, openEngine, readIdsFile, readInterventionsFile } from '../engine-flags.ts';

export const summary = 'all-layer hidden states and logits of token-id sequences → .safetensors';

export const flags: FlagTable = {
  usage: 'forward --model M --ids IDS.json --out OUT.safetensors [engine flags]',
  flags: [
    ...ENGINE_FLAG_DEFS,
    { name: 'ids', value: 'IDS.json', help: '{"input_ids": [[int, ...], ...]}' },
    { name: 'out', value: 'OUT.safetensors', help: 'hidden_states.i [L+1, T_i, d] and logits.i [T_i, vocab]' },
    INTERVENE_FLAG_DEF,
  ],
  example: 'forward --model models/planted --ids ids.json --out out.safetensors',
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const ids = readIdsFile(requireValue(args, 'ids'));
  const out = requireValue(args, 'out');
  const intervene = args.values.get('intervene');
  const interventions = intervene === undefined ? undefined : readInterventionsFile(intervene);
  const t0 = performance.now();
  const engine = await openEngine(args);
  try {
    const results = await engine.forward(ids, interventions ? { interventions } : {});
    const tensors: Record<string, TensorToWrite> = {};
    results.forEach((r, i) => {
      tensors[`hidden_states.${i}`] = { dtype: 'F32', shape: [engine.numLayers + 1, r.length, engine.dModel], data: r.hidden };
      tensors[`logits.${i}`] = { dtype: 'F32', shape: [r.length, engine.vocabSize], data: r.logits };
    });
    writeSafetensors(out, tensors);
    const tokens = results.reduce((a, r) => a + r.length, 0);
    const s = (performance.now() - t0) / 1000;
    process.stderr.write(`forward: ${results.length} sequences, ${tokens} tokens, ${engine.numLayers + 1} layers → ${out} (${s.toFixed(2)} s)\n`);
  } finally {
    await engine.dispose();
  }
  return 0;
}
