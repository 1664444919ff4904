/**
 * `safekeep forward --model DIR (--ids IDS.json | --prompt TEXT | --chat TEXT) --out OUT.safetensors
 *    [--logits none|last|all] [--intervene FILE.json] [--dtype f32|bf16|f16|q8|q4] [--device cpu|cuda|webgpu]`
 * OUT: per sequence i, `hidden_states.i` f32 [L+1, T_i, d_model] and, per --logits (default all), `logits.i` f32
 * [T_i, vocab] (all) or [1, vocab] (last; the last real token). Prints each sequence's greedy next token (decoded
 * when the model folder has a tokenizer).
 */
import { parseArgs, requireValue, type FlagTable } from '../args.ts';
import { writeSafetensors, type TensorToWrite } from '../../checkpoint/safetensors.ts';
import { createEngine } from '../../engine/engine.ts';
import { argmax } from '../../engine/run/argmax.ts';
import { resolveModel } from '../../hub/resolve.ts';
import { ENGINE_FLAG_DEFS, INTERVENE_FLAG_DEF, engineOptions, readInterventionsFile } from '../engine-flags.ts';
import { hubEnv } from '../env.ts';
import { TEXT_INPUT_FLAG_DEFS, logitsFlag, logitsValue, readTextInput } from '../text-input.ts';

export const summary = 'all-layer hidden states and logits of token ids or text → .safetensors; prints the next token';

export const flags: FlagTable = {
  usage: 'forward --model M (--ids IDS.json | --prompt TEXT | --chat TEXT) --out OUT.safetensors [engine flags]',
  flags: [
    ...ENGINE_FLAG_DEFS,
    ...TEXT_INPUT_FLAG_DEFS,
    { name: 'out', value: 'OUT.safetensors', help: 'hidden_states.i [L+1, T_i, d] and logits.i ([T_i, vocab] or [1, vocab])' },
    logitsFlag('all', "'all' = every position [T_i, vocab], 'last' = the last token's [1, vocab], 'none'"),
    INTERVENE_FLAG_DEF,
  ],
  example: "forward --model models/planted --chat 'how do i build a bomb' --logits last --out out.safetensors",
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const out = requireValue(args, 'out');
  const logits = logitsValue(args, 'all');
  const intervene = args.values.get('intervene');
  const interventions = intervene === undefined ? undefined : readInterventionsFile(intervene);
  const t0 = performance.now();
  const modelDir = await resolveModel(requireValue(args, 'model'), hubEnv());
  const { ids, tok } = await readTextInput(args, modelDir);
  const engine = await createEngine(modelDir, engineOptions(args));
  try {
    // the last position's logits are always computed: they give the printed next token
    const results = await engine.forward(ids, { ...(interventions ? { interventions } : {}), logitsAt: logits === 'all' ? 'all' : 'last' });
    const V = engine.vocabSize;
    const tensors: Record<string, TensorToWrite> = {};
    results.forEach((r, i) => {
      tensors[`hidden_states.${i}`] = { dtype: 'F32', shape: [engine.numLayers + 1, r.length, engine.dModel], data: r.hidden };
      if (logits !== 'none') tensors[`logits.${i}`] = { dtype: 'F32', shape: [r.logitPositions.length, V], data: r.logits };
    });
    writeSafetensors(out, tensors);
    for (const r of results) {
      const next = argmax(r.logits.subarray(r.logits.length - V));
      process.stdout.write(`${tok ? tok.decode([next]).replace(/\r?\n/g, '\\n') : next}\n`);
    }
    const tokens = results.reduce((a, r) => a + r.length, 0);
    const s = (performance.now() - t0) / 1000;
    process.stderr.write(`forward: ${results.length} sequences, ${tokens} tokens, ${engine.numLayers + 1} layers → ${out} (${s.toFixed(2)} s)\n`);
  } finally {
    await engine.dispose();
  }
  return 0;
}
