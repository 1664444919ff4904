/**
 * `safekeep hooks --model M [--pattern GLOB[,GLOB]] [--json]`: a model's hook points — every name
 * `runWithCache` / `runWithHooks`, the server's `hooks` and `--intervene` accept — with each one's shape per sequence,
 * whether it can be edited, its TransformerLens name (`model.hook_dict`) and the residual-stream index it equals
 * (resid_pre of block l = hidden[l], resid_post = hidden[l+1]). `--pattern` shows what globs select.
 */
import { parseArgs, requireValue, type FlagTable } from '../args.ts';
import { loadCheckpoint } from '../../checkpoint/load.ts';
import { EDITABLE_POINTS, parseHookName, resolveHookNames, transformerLensName, allHookNames, type HookPoint } from '../../engine/graph/hooks.ts';
import { resolveModel } from '../../hub/resolve.ts';
import { hubEnv } from '../env.ts';

export const summary = 'list a model\'s hook points (names, shapes, editable, TransformerLens names), as model.hook_dict does';

export const flags: FlagTable = {
  usage: 'hooks --model M [--pattern GLOB[,GLOB]] [--json]',
  flags: [
    { name: 'model', value: 'M', help: 'checkpoint folder or Hugging Face repo id' },
    { name: 'pattern', value: 'GLOB[,GLOB]', default: 'every hook point', help: 'only the names these select (blocks.*.attn_out, blocks.1*.z: `*` within one dot-separated part)' },
    { name: 'json', boolean: true, help: 'print JSON: {name: {shape, editable, transformerLens, hidden}}' },
  ],
  example: 'hooks --model models/planted --pattern blocks.*.resid_post',
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const dir = await resolveModel(requireValue(args, 'model'), hubEnv());
  const c = (await loadCheckpoint(dir)).config;
  const pattern = args.values.get('pattern');
  const names = pattern === undefined ? allHookNames(c) : resolveHookNames(pattern.split(','), c);
  const shapeOf = (p: HookPoint): Array<string | number> => (p === 'z' ? ['T', c.numHeads, c.headDim] : p === 'pattern' ? [c.numHeads, 'T', 'S'] : ['T', c.hiddenSize]);
  const rows = names.map((name) => {
    const { layer, point } = parseHookName(name, c);
    const hidden = point === 'resid_pre' ? `hidden[${layer}]` : point === 'resid_post' ? `hidden[${layer + 1}]` : null;
    return { name, shape: shapeOf(point), editable: EDITABLE_POINTS.includes(point), transformerLens: transformerLensName(layer, point), hidden };
  });
  if (args.booleans.has('json')) {
    process.stdout.write(JSON.stringify(Object.fromEntries(rows.map(({ name, ...r }) => [name, r])), null, 2) + '\n');
    return 0;
  }
  const table = [['name', 'shape per sequence', 'edit', 'TransformerLens', 'residual stream'],
    ...rows.map((r) => [r.name, `[${r.shape.join(', ')}]`, r.editable ? 'yes' : 'no', r.transformerLens, r.hidden ?? ''])];
  const widths = table[0]!.map((_, k) => Math.max(...table.map((r) => r[k]!.length)));
  process.stdout.write(`${dir}: ${c.numLayers} blocks, d_model ${c.hiddenSize}, ${c.numHeads} heads × head_dim ${c.headDim}; `
    + `${rows.length} hook points (T = tokens, S = attended keys; pattern is read-only)\n`);
  for (const r of table) process.stdout.write(`${r.map((x, k) => x.padEnd(widths[k]!)).join('  ').trimEnd()}\n`);
  return 0;
}
