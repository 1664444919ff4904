/**
 * The concise closing note of a run: the recovered numbers at ℓ*, one line each, for stdout and report.md.
 */
import type { AnalysisResults, AurocCI } from '../analysis/results.ts';
import { fewGroupsCaveat } from './few-groups.ts';

const ci = (e: AurocCI): string => `${e.auroc.toFixed(3)} [${e.lo.toFixed(3)}, ${e.hi.toFixed(3)}]`;

export function summaryLines(res: AnalysisResults): string[] {
  const l = res.lStar.layer;
  // dModel 0: an endpoint-only results shell (no activations, no ℓ*)
  const lines = [res.dModel > 0 ? `${res.model}${res.synthetic ? ' (SYNTHETIC)' : ''}: ℓ* = ${l} of ${res.layers - 1} (${res.lStar.method})` : `${res.model}: ${res.lStar.method}`];
  if (res.table1.length) lines.push(`Table 1, chatbot direction at ℓ*: ${res.table1.map((r) => `${r.label} ${ci(r.cross)}`).join('; ')}`);
  if (res.table2.length) lines.push(`Table 2, chatbot direction at ℓ*: ${res.table2.map((r) => `${r.label} ${ci(r.cross)}`).join('; ')}`);
  const sc = res.schemaCosines;
  if (sc) {
    lines.push(
      `Schema Direction at ℓ*: cos(R_harmful, r) = ${sc.harmful[l]!.toFixed(3)}, cos(R_benign, r) = ${sc.benign[l]!.toFixed(3)}; random 95% band [${sc.randomBand.lo[l]!.toFixed(3)}, ${sc.randomBand.hi[l]!.toFixed(3)}]`,
    );
  }
  if (res.firstToken?.length) {
    lines.push(`First-token projection at ℓ*: ${res.firstToken.map((f) => `${f.category}/${f.representation} ${f.mean[l]!.toFixed(2)} ± ${f.sd[l]!.toFixed(2)}`).join('; ')}`);
  }
  for (const s of res.steering ?? []) {
    lines.push(
      `Steering (${s.requests}, layer ${s.layer}): ${s.rows.map((r) => `${r.condition === undefined ? `α=${r.alpha}` : `intervene ${r.condition}`}: refusal ${((100 * r.counts.refusal) / r.n).toFixed(1)}%, valid ${((100 * r.counts.valid) / r.n).toFixed(1)}%, invalid ${((100 * r.counts.invalid) / r.n).toFixed(1)}%`).join('; ')}`,
    );
  }
  for (const r of res.s3?.runs ?? []) {
    const pct = (k: number, n: number) => (n ? ((100 * k) / n).toFixed(1) : '–');
    lines.push(`S³ (${r.bench}, ${r.tasks} tasks): ${r.configs.map((c) => `${c.config}: ASR ${pct(c.asr.k, c.asr.n)}%, benign ${pct(c.benign.k, c.benign.n)}%`).join('; ')}`);
  }
  const caveat = res.dModel > 0 ? fewGroupsCaveat(res) : null;
  if (caveat) lines.push(caveat);
  return lines;
}
