/**
 * `safekeep inspect --model DIR|owner/name [--json]`: validates a checkpoint (config, every safetensors header,
 * every expected tensor and shape) without running it, and prints what it is.
 */
import { parseArgs, requireValue, type FlagTable } from '../args.ts';
import { checkpointDTypes, loadCheckpoint, parameterCount } from '../../checkpoint/load.ts';
import { FAMILIES } from '../../checkpoint/config.ts';
import { resolveModel } from '../../hub/resolve.ts';

export const summary = 'validate a checkpoint folder (or hub id) and print family, sizes, dtypes, parameters, eos ids';

export const flags: FlagTable = {
  usage: 'inspect --model M [--json]',
  flags: [
    { name: 'model', value: 'M', help: 'checkpoint folder or Hugging Face repo id' },
    { name: 'json', boolean: true, help: 'print JSON' },
  ],
  example: 'inspect --model models/planted',
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const dir = await resolveModel(requireValue(args, 'model'));
  const ck = await loadCheckpoint(dir);
  const c = ck.config;
  const info = {
    dir: ck.dir,
    family: c.family,
    architecture: FAMILIES[c.family].architecture,
    layers: c.numLayers,
    d_model: c.hiddenSize,
    heads: c.numHeads,
    kv_heads: c.numKvHeads,
    head_dim: c.headDim,
    intermediate: c.intermediateSize,
    vocab: c.vocabSize,
    dtypes: checkpointDTypes(ck),
    parameters: parameterCount(ck),
    eos_ids: c.eosTokenIds,
    bos_id: c.bosTokenId,
    tied_embeddings: c.tieWordEmbeddings,
    rope: { theta: c.ropeTheta, ...c.rope },
    files: [...new Set([...ck.tensors.values()].map((t) => t.file))].length,
    config_hash: ck.configHash,
  };
  if (args.booleans.has('json')) {
    process.stdout.write(JSON.stringify(info, null, 2) + '\n');
    return 0;
  }
  const rope = c.rope.type === 'llama3'
    ? `llama3 (theta ${c.ropeTheta}, factor ${c.rope.factor}, low ${c.rope.lowFreqFactor}, high ${c.rope.highFreqFactor}, original ${c.rope.originalMaxPositionEmbeddings})`
    : `default (theta ${c.ropeTheta})`;
  const rows: [string, string][] = [
    ['model', ck.dir],
    ['family', `${c.family} (${info.architecture})`],
    ['layers', String(c.numLayers)],
    ['d_model', String(c.hiddenSize)],
    ['heads', `${c.numHeads} (${c.numKvHeads} KV, head_dim ${c.headDim})`],
    ['intermediate', String(c.intermediateSize)],
    ['vocab', String(c.vocabSize)],
    ['dtype', info.dtypes.join(', ')],
    ['parameters', `${info.parameters} (${(info.parameters / 1e6).toFixed(1)}M)`],
    ['eos ids', c.eosTokenIds.length ? c.eosTokenIds.join(', ') : '(none)'],
    ['tied lm_head', c.tieWordEmbeddings ? 'yes' : 'no'],
    ['rope', rope],
    ['extras', [c.qkvBias ? 'q/k/v bias' : '', c.qkNorm ? 'q/k norm' : ''].filter(Boolean).join(', ') || '-'],
  ];
  process.stdout.write(rows.map(([k, v]) => `${k.padEnd(13)} ${v}`).join('\n') + '\n');
  return 0;
}
