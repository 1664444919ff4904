/**
 * `safekeep directions import IN.gguf --out OUT.safetensors [--name N]`: a llama.cpp / repeng control vector as a
 * directions file, so `steer --direction OUT.safetensors#N`, `generate --steer-vector OUT.safetensors#N` and
 * `--intervene` use it. direction.k becomes row k+1 (hidden[k+1]), values and sign unchanged; rows the file does not
 * set are zero. Its ℓ* is the row with the largest norm. experiments/control-vector.ts has the mapping and the sign.
 */
import { basename } from 'node:path';
import { parseArgs, requireValue, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { writeDirectionsFile } from '../../experiments/directions-file.ts';
import { readControlVector } from '../../experiments/control-vector.ts';

export const summary = 'read a llama.cpp / repeng control vector (GGUF) into a directions file';

export const flags: FlagTable = {
  usage: 'directions import IN.gguf --out OUT.safetensors [--name N]',
  positionals: 'a control vector (general.architecture = controlvector, tensors direction.<k>)',
  flags: [
    { name: 'out', value: 'OUT.safetensors', help: 'the directions file to write (row k+1 = direction.k; other rows zero)' },
    { name: 'name', value: 'N', default: 'control', help: 'the direction\'s name in OUT (OUT.safetensors#N)' },
  ],
  example: 'directions import happy.gguf --out happy.safetensors',
};

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, flags);
  if (a.positionals.length !== 1) throw new SafekeepError(`usage: safekeep ${flags.usage}`);
  const src = a.positionals[0]!;
  const out = requireValue(a, 'out');
  const name = a.values.get('name') ?? 'control';
  if (!/^[\w.-]+$/.test(name)) throw new SafekeepError(`--name: letters, digits, '.', '_' or '-', got ${JSON.stringify(name)}`);
  const cv = readControlVector(src);
  const { d, data } = cv.direction;
  const norm = (l: number) => Math.hypot(...data.subarray(l * d, (l + 1) * d));
  const lStar = cv.rows.reduce((best, l) => (norm(l) > norm(best) ? l : best), cv.rows[0]!);
  writeDirectionsFile(out, { [name]: cv.direction }, {
    model: cv.modelHint ?? '',
    lStar,
    layerRule: 'imported control vector: the row with the largest norm',
    schemaPairs: 'none',
    provenance: { importedFrom: basename(src), format: 'gguf controlvector', rows: cv.rows, modelHint: cv.modelHint },
  });
  process.stdout.write(`${src} → ${out}#${name}: hidden[${cv.rows[0]}..${cv.rows.at(-1)}] (${cv.rows.length} rows set, row k+1 = direction.k), d = ${d}, ℓ* = ${lStar}${cv.modelHint ? `, model_hint ${JSON.stringify(cv.modelHint)}` : ''}\n`);
  return 0;
}
