/** The concise stdout summary of a reproduce run: ℓ*, Table 1 and Table 2 at ℓ*, Schema-Direction cosine at ℓ*, behavioural refusal. */
import type { AnalysisResults, TableRow } from '../analysis/results.ts';
import { fewGroupsCaveat } from '../report/few-groups.ts';

const f3 = (x: number): string => x.toFixed(3);

function rows(title: string, t: readonly TableRow[]): string[] {
  return [
    title,
    ...t.map((r) => `  ${r.label.padEnd(32)} AUROC ${f3(r.cross.auroc)} [${f3(r.cross.lo)}, ${f3(r.cross.hi)}]  own ${f3(r.within.auroc)}  (n=${r.cross.n})`),
  ];
}

export function summarizeResults(res: AnalysisResults): string {
  const l = res.lStar.layer;
  const out = [
    `${res.model}${res.synthetic ? ' (SYNTHETIC planted model)' : ''}: ${res.layers - 1} layers, d_model ${res.dModel}; ℓ* = ${l} (${res.lStar.method})`,
    ...rows(`Table 1 — chatbot refusal direction at ℓ* scoring each configuration:`, res.table1),
    ...rows(`Table 2 — tool-spec representations:`, res.table2),
  ];
  if (res.schemaCosines) {
    const s = res.schemaCosines;
    out.push(`Schema Direction cosine with refusal direction at ℓ*: harmful ${f3(s.harmful[l]!)}, benign ${f3(s.benign[l]!)} (random 95% band [${f3(s.randomBand.lo[l]!)}, ${f3(s.randomBand.hi[l]!)}])`);
  }
  if (res.behavioural) {
    const pct = (x: number) => (100 * x).toFixed(1);
    out.push(`Behavioural refusal (${res.behavioural.requests}): ${res.behavioural.rows.map((r) => `${r.label} ${pct(r.rate)}% [${pct(r.lo)}, ${pct(r.hi)}] (${r.refusals}/${r.n})`).join(', ')}`);
  }
  const caveat = fewGroupsCaveat(res);
  if (caveat) out.push(caveat);
  return out.join('\n');
}
