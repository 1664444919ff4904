/**
 * `safekeep directions export FILE.safetensors[#name] --gguf OUT.gguf [--model-hint H]`: one direction of a
 * directions file (what `reproduce` writes) as a llama.cpp control vector, for `llama-cli --control-vector OUT.gguf`
 * or repeng's `ControlVector.import_gguf`. Row l (hidden[l]) becomes direction.(l−1), values and sign unchanged;
 * rows 0 and 1 have no llama.cpp layer and are left out (said on stderr). experiments/control-vector.ts has the
 * mapping and the sign.
 */
import { parseArgs, requireValue, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { DEFAULT_DIRECTION, namedDirection } from '../../experiments/directions-file.ts';
import { controlLayerOfRow, writeControlVector } from '../../experiments/control-vector.ts';

export const summary = 'write one direction as a llama.cpp / repeng control vector (GGUF)';

export const flags: FlagTable = {
  usage: 'directions export FILE.safetensors[#name] --gguf OUT.gguf [--model-hint H]',
  positionals: `a directions file and the direction in it (default #${DEFAULT_DIRECTION})`,
  flags: [
    { name: 'gguf', value: 'OUT.gguf', help: 'the control vector to write: direction.<l−1> = row l for l = 2..L (llama.cpp adds it to block l−1\'s output)' },
    { name: 'model-hint', value: 'H', default: "the directions file's model", help: 'controlvector.model_hint (llama.cpp does not read it; repeng shows it)' },
  ],
  example: 'directions export results/planted/directions.safetensors#refusal.chatbot --gguf refusal.gguf',
};

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, flags);
  if (a.positionals.length !== 1) throw new SafekeepError(`usage: safekeep ${flags.usage}`);
  const out = requireValue(a, 'gguf');
  const { path, name, direction, metadata } = namedDirection(a.positionals[0]!);
  const hint = a.values.get('model-hint') ?? metadata.model ?? '';
  const { written, dropped } = writeControlVector(out, direction, hint);
  if (dropped.length) process.stderr.write(`directions export: rows ${dropped.join(', ')} (hidden[0] = embeddings, hidden[1] = block 0's output) have no llama.cpp control-vector layer; not written\n`);
  process.stdout.write(`${name} from ${path} → ${out}: direction.${controlLayerOfRow(written[0]!)}..direction.${controlLayerOfRow(written.at(-1)!)} = hidden[${written[0]}..${written.at(-1)}], d = ${direction.d}, model_hint ${JSON.stringify(hint)}\n`);
  return 0;
}
