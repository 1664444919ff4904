/**
 * Figure 3: per layer, cosine of the Schema Direction R_c(ℓ) (harmful, benign) with the chatbot refusal direction,
 * against a random-direction band and a label-permutation band.
 */
import type { TopLevelSpec } from 'vega-lite';
import type { AnalysisResults } from '../../analysis/results.ts';
import { CONFIG, COLORS } from '../theme.ts';
import { type Figure, LAYER_X, lStarRule } from './spec.ts';

const HARMFUL = 'Harmful requests: cos(R_harmful, r)';
const BENIGN = 'Benign requests: cos(R_benign, r)';
const RANDOM = 'Random unit vectors, 95% band';
const PERMUTED = 'Label-permuted refusal direction vs R_harmful, 95% band';

/**
 * A permutation band at least this wide (of the 2 that cosines span) excludes almost nothing: the activations vary
 * in too few dimensions there (the planted model's do), so shuffled labels give directions parallel to any other.
 */
const UNINFORMATIVE_WIDTH = 1.5;

/** "1–4" / "1, 3" for the caption */
function layerList(ls: readonly number[]): string {
  const contiguous = ls.every((l, i) => i === 0 || l === ls[i - 1]! + 1);
  return contiguous && ls.length > 2 ? `${ls[0]}–${ls[ls.length - 1]}` : ls.join(', ');
}

/** the caption's sentence on layers whose permutation band is uninformative, or '' */
export function permutationCaveat(band: { lo: readonly number[]; hi: readonly number[] } | undefined): string {
  if (!band) return '';
  const wide = band.lo.flatMap((lo, l) => (band.hi[l]! - lo >= UNINFORMATIVE_WIDTH ? [l] : []));
  if (!wide.length) return '';
  return ` At layer${wide.length === 1 ? '' : 's'} ${layerList(wide)} the permutation band spans nearly all of [−1, 1]: the chatbot activations vary in too few dimensions there for shuffled labels to give a null that excludes anything, so read ${wide.length === 1 ? 'that layer' : 'those layers'} against the random-direction band.`;
}

export function schemaCosineFigure(res: AnalysisResults): Figure | null {
  const sc = res.schemaCosines;
  if (!sc) return null;
  const lines = sc.harmful.flatMap((h, layer) => [
    { layer, series: HARMFUL, category: 'harmful', cosine: h },
    { layer, series: BENIGN, category: 'benign', cosine: sc.benign[layer]! },
  ]);
  const bands = sc.randomBand.lo.flatMap((lo, layer) => {
    const out = [{ layer, series: RANDOM, lo, hi: sc.randomBand.hi[layer]! }];
    if (sc.permutationBand) out.push({ layer, series: PERMUTED, lo: sc.permutationBand.lo[layer]!, hi: sc.permutationBand.hi[layer]! });
    return out;
  });
  const domain = [HARMFUL, BENIGN, RANDOM, ...(sc.permutationBand ? [PERMUTED] : [])];
  const range = [COLORS.harmful, COLORS.benign, COLORS.random, ...(sc.permutationBand ? [COLORS.permutation] : [])];
  const color = { field: 'series', type: 'nominal', title: null, scale: { domain, range } } as const;
  const spec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: {
      text: `Schema Direction vs refusal direction — ${res.model}`,
      subtitle: `R_c(ℓ) = mean over category c of h_schema(ℓ) − h_flattened(ℓ); n = ${sc.n.harmful} harmful, ${sc.n.benign} benign requests; ℓ* = ${res.lStar.layer}`,
    },
    width: 560,
    height: 300,
    config: CONFIG,
    layer: [
      {
        data: { values: bands },
        mark: { type: 'area', opacity: 0.25 },
        encoding: {
          x: LAYER_X,
          y: { field: 'lo', type: 'quantitative', title: 'Cosine with the chatbot refusal direction r(ℓ)' },
          y2: { field: 'hi' },
          color,
          tooltip: [
            { field: 'series', title: 'band' },
            { field: 'layer', title: 'layer' },
            { field: 'lo', title: '2.5%', format: '.3f' },
            { field: 'hi', title: '97.5%', format: '.3f' },
          ],
        },
      },
      {
        data: { values: lines },
        mark: { type: 'line', point: true, strokeWidth: 2 },
        encoding: {
          x: { field: 'layer', type: 'quantitative' },
          y: { field: 'cosine', type: 'quantitative' },
          color,
          // benign dashed, so that coinciding lines stay distinguishable
          strokeDash: { field: 'category', type: 'nominal', scale: { domain: ['harmful', 'benign'], range: [[1, 0], [6, 4]] }, legend: null },
          tooltip: [
            { field: 'series', title: 'series' },
            { field: 'layer', title: 'layer' },
            { field: 'cosine', title: 'cosine', format: '.3f' },
          ],
        },
      },
      lStarRule(res.lStar.layer),
    ],
  } as TopLevelSpec;
  return {
    name: 'figure3-schema-cosine',
    title: 'Figure 3 — the Schema Direction points against refusal',
    caption:
      'Per layer, the cosine between the Schema Direction (mean shift from flattened prose to JSON schemas for the same requests) and the chatbot refusal direction. Shaded: 95% bands of two null baselines. Dashed line: ℓ*.' +
      permutationCaveat(sc.permutationBand),
    spec,
  };
}
