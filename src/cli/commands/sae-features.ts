/**
 * `safekeep sae features --sae SAE --direction FILE#NAME [--top N] [--json FILE] [--activations CACHE.safetensors]`
 * The features that make up a direction at the SAE's hook (`blocks.l.hook_resid_post` reads row l+1 of the
 * directions file, `blocks.l.hook_resid_pre` row l): ranked by the cosine of their decoder row with it, and, with an
 * activation cache of labelled rows (`extract` / `reproduce`: keys `<pair>:harmful` / `<pair>:benign`), by
 * attribution (mean activation difference harmful − benign × decoder projection on the direction), each leading
 * feature with the three cached prompts it is most active on.
 * JSON: { sae, hook, direction, hiddenRow, features: [{index, cosine}] best first, attribution?: [...],
 * topActivating?: { feature: [{key, activation}] } }.
 */
import { basename, dirname } from 'node:path';
import { numberValue, parseArgs, requireValue, type FlagTable } from '../args.ts';
import { readActivationCache } from '../../cache/store.ts';
import { directionFromFile } from '../../experiments/directions-file.ts';
import { decoderCosines, featureAttribution, topActivatingRows } from '../../sae/features.ts';
import { SaeEncoder } from '../../engine/runtime/sae-encoder.ts';
import { hiddenRowOf } from '../../sae/hook.ts';
import { writeFileAtomic, writeJsonAtomic } from '../../util/atomic.ts';
import { renderSvg, svgToPng } from '../../report/render.ts';
import { saeFeaturesFigure } from '../../report/figures/sae-features.ts';
import { SafekeepError } from '../../util/errors.ts';
import { SAE_FLAG_DEFS, openSae } from '../sae-flags.ts';

export const summary = 'the SAE features that make up a direction: decoder-row cosines, and attribution over cached activations';

export const flags: FlagTable = {
  usage: 'sae features --sae SAE --direction FILE#NAME [--top N] [--json FILE] [--figure FILE.svg|png] [--activations CACHE.safetensors]',
  flags: [
    ...SAE_FLAG_DEFS,
    { name: 'direction', value: 'FILE#NAME', help: 'a directions file (reproduce: directions.safetensors) and the direction in it (default schema.harmful)' },
    { name: 'top', value: 'N', default: '20', help: 'features printed' },
    { name: 'json', value: 'FILE', help: 'every feature, best first, as JSON' },
    { name: 'figure', value: 'FILE.svg|FILE.png', help: 'the --top features as a bar chart (cosine, and attribution with --activations)' },
    { name: 'activations', value: 'CACHE.safetensors', help: "an activation cache of labelled rows (hidden [n, L+1, d]; rows '<pair>:harmful' / '<pair>:benign'): rank by attribution too" },
  ],
  example: 'sae features --sae models/planted/sae --direction runs/planted/directions.safetensors#schema.harmful --top 5',
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const spec = requireValue(args, 'direction');
  const top = numberValue(args, 'top', 20);
  if (!Number.isInteger(top) || top < 1) throw new SafekeepError(`--top must be a positive integer, got ${top}`);
  const sae = await openSae(args);
  const row = hiddenRowOf(sae.config.hookName, Number.MAX_SAFE_INTEGER);
  if (row === null) throw new SafekeepError(`--direction rows are hidden[l]; the SAE reads ${sae.config.hookName}, not a residual-stream point`);
  const { v, name } = directionFromFile(spec, row, sae.config.dIn);
  const features = decoderCosines(sae, v);
  let attribution: Awaited<ReturnType<typeof featureAttribution>> | undefined;
  let topRows: Map<number, { key: string; activation: number }[]> | undefined;
  const cachePath = args.values.get('activations');
  let keys: string[] = [];
  if (cachePath !== undefined) {
    const c = readActivationCache(dirname(cachePath), basename(cachePath).replace(/\.safetensors$/, ''));
    if (row >= c.layers || c.d !== sae.config.dIn) throw new SafekeepError(`${cachePath}: [${c.n}, ${c.layers}, ${c.d}] has no hidden[${row}] of width ${sae.config.dIn}`);
    keys = ((c.manifest.rows ?? []) as { key?: unknown }[]).map((r) => String(r.key ?? ''));
    const labelled = keys.map((k, i) => [i, k.endsWith(':harmful') ? 1 : k.endsWith(':benign') ? 0 : -1] as const).filter(([, y]) => y >= 0);
    const x = new Float32Array(labelled.length * c.d);
    labelled.forEach(([i], k) => x.set(c.data.subarray((i * c.layers + row) * c.d, (i * c.layers + row + 1) * c.d), k * c.d));
    // onnxruntime's encode where the graph has the SAE's math (no input normalization), else the TypeScript one
    const encoder = sae.config.normalizeActivations === 'none' ? await SaeEncoder.open(sae) : null;
    try {
      const encodeRows = encoder ? (b: Float32Array, m: number) => encoder.encode(b, m) : undefined;
      attribution = await featureAttribution(sae, v, x, labelled.map(([, y]) => y), encodeRows);
      // the prompts each leading feature fires on most (by cosine, then by attribution)
      const lead = [...new Set([...features.slice(0, top), ...attribution.slice(0, top)].map((f) => f.index))];
      const tops = await topActivatingRows(sae, x, labelled.length, lead, 3, encodeRows);
      topRows = new Map([...tops].map(([f, list]) => [f, list.map((r) => ({ key: keys[labelled[r.row]![0]]!, activation: r.activation }))]));
    } finally {
      await encoder?.release();
    }
  }
  const lines = [`${name} at hidden[${row}] (${sae.config.hookName}), ${sae.config.dSae} features; by decoder cosine:`];
  const fires = (j: number) => (topRows?.get(j)?.length ? `  most active on ${topRows.get(j)!.map((r) => `${r.key} (${r.activation.toFixed(3)})`).join(', ')}` : '');
  for (const f of features.slice(0, top)) lines.push(`  feature ${String(f.index).padStart(6)}  cosine ${f.cosine.toFixed(4)}${fires(f.index)}`);
  if (attribution) {
    lines.push('by attribution (harmful − benign mean activation × decoder projection):');
    for (const f of attribution.slice(0, top)) lines.push(`  feature ${String(f.index).padStart(6)}  attribution ${f.attribution.toFixed(4)}  (Δact ${f.meanDiff.toFixed(4)}, projection ${f.projection.toFixed(4)})${fires(f.index)}`);
  }
  process.stdout.write(lines.join('\n') + '\n');
  const figure = args.values.get('figure');
  if (figure) {
    if (!/\.(svg|png)$/i.test(figure)) throw new SafekeepError(`--figure ${figure}: give a .svg or .png file`);
    const byIndex = new Map((attribution ?? []).map((f) => [f.index, f.attribution]));
    const bars = features.slice(0, top).map((f) => ({ index: f.index, cosine: f.cosine, ...(byIndex.has(f.index) ? { attribution: byIndex.get(f.index)! } : {}) }));
    const svg = await renderSvg(saeFeaturesFigure(name, sae.config.hookName ?? `hidden[${row}]`, bars).spec);
    if (/\.svg$/i.test(figure)) writeFileAtomic(figure, svg);
    else writeFileAtomic(figure, Buffer.from(svgToPng(svg)));
  }
  const json = args.values.get('json');
  if (json) {
    writeJsonAtomic(json, {
      sae: sae.config.source, hook: sae.config.hookName, direction: name, hiddenRow: row,
      features: features.map((f) => ({ index: f.index, cosine: f.cosine })), ...(attribution ? { attribution } : {}),
      ...(topRows ? { topActivating: Object.fromEntries(topRows) } : {}),
    }, 1);
  }
  return 0;
}
