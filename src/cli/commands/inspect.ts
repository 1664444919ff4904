/**
 * `safekeep inspect --model DIR|owner/name [--json]`: validates a checkpoint (config, every safetensors header,
 * every expected tensor and shape) without running it, and prints what it is.
 */
import { parseArgs, requireValue, type FlagTable } from '../args.ts';
import { checkpointDTypes, loadCheckpoint, parameterCount } from '../../checkpoint/load.ts';
import { FAMILIES } from '../../checkpoint/config.ts';
import { describeRope } from '../../checkpoint/rope.ts';
import type { ModelConfig } from '../../checkpoint/types.ts';
import { resolveModel } from '../../hub/resolve.ts';
import { hubEnv } from '../env.ts';

export const summary = 'validate a checkpoint folder (or hub id) and print family, sizes, dtypes, parameters, eos ids, RoPE, attention window, config keys read';

/** `full` or `sliding window W on layers a, b, …` (0-based layer indices, runs collapsed) */
function describeWindows(c: ModelConfig): string {
  const layers = c.attentionWindows.flatMap((w, i) => (w === null ? [] : [i]));
  if (!layers.length) return 'full causal attention on every layer';
  const w = c.attentionWindows[layers[0]!]!;
  const runs: string[] = [];
  for (let i = 0; i < layers.length; i++) {
    let j = i;
    while (j + 1 < layers.length && layers[j + 1] === layers[j]! + 1) j++;
    runs.push(i === j ? `${layers[i]}` : `${layers[i]}-${layers[j]}`);
    i = j;
  }
  const all = layers.length === c.numLayers;
  const which = layers.length === 1 ? `layer ${runs[0]}` : `layers ${runs.join(', ')}`;
  return `sliding window ${w} on ${all ? 'every layer' : `${which} (0-based; the others full causal)`}`;
}

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
  const dir = await resolveModel(requireValue(args, 'model'), hubEnv());
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
    max_position_embeddings: c.maxPositionEmbeddings,
    attention_windows: c.attentionWindows,
    config_keys: c.configKeys,
    files: [...new Set([...ck.tensors.values()].map((t) => t.file))].length,
    config_hash: ck.configHash,
  };
  if (args.booleans.has('json')) {
    process.stdout.write(JSON.stringify(info, null, 2) + '\n');
    return 0;
  }
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
    ['rope', describeRope(c.ropeTheta, c.rope)],
    ['max positions', String(c.maxPositionEmbeddings)],
    ['attention', describeWindows(c)],
    ['extras', [c.qkvBias ? 'q/k/v bias' : '', c.qkNorm ? 'q/k norm' : ''].filter(Boolean).join(', ') || '-'],
    ['config read', c.configKeys.read.join(', ')],
    ['ignored', c.configKeys.ignored.join(', ') || '-'],
  ];
  process.stdout.write(rows.map(([k, v]) => `${k.padEnd(13)} ${v}`).join('\n') + '\n');
  return 0;
}
