/**
 * report.html's section on SAE features (`reproduce --sae DIR`): per direction, a table over the conditions of
 * Figures 3–4 of the leading features (by decoder-row cosine, then by attribution in the condition) with the prompts
 * each is most active on. Without an SAE the section is still there and says that none was given, and how to give one
 * (class `missing`, not `caveat`: the report's caveats are about the reliability of its numbers).
 */
import type { AnalysisResults, SaeFeatureRow } from '../analysis/results.ts';
import { escapeHtml } from './html-escape.ts';

export const SAE_SECTION_ID = 'sae-features';

const num = (x: number): string => (Math.abs(x) >= 1e-3 || x === 0 ? x.toFixed(4) : x.toExponential(2));

function prompts(f: SaeFeatureRow): string {
  if (!f.top.length) return '<span class="note">inactive on every prompt</span>';
  return f.top.map((t) => `<div><code>${escapeHtml(t.key)}</code> ${num(t.activation)}${t.text ? ` — ${escapeHtml(t.text)}` : ''}</div>`).join('');
}

/** the section's HTML; '' for a results shell without activations (an endpoint-only run) */
export function saeSectionHtml(res: AnalysisResults): string {
  if (res.dModel <= 0) return '';
  const s = res.saeFeatures;
  const head = `<h2 id="${SAE_SECTION_ID}">SAE features of the refusal and Schema Directions</h2>`;
  if (!s) {
    return `${head}\n<p class="missing" id="sae-features-none">No SAE was given, so this run lists no SAE features. Run <code>safekeep reproduce --sae DIR</code> (a dictionary at ℓ* = ${res.lStar.layer}, e.g. <code>make-model planted --sae</code>'s <code>models/planted/sae</code>; the caches are reused) for the top features of the refusal and Schema Directions in each condition of Figures 3–4, with the prompts they are most active on.</p>`;
  }
  const cond = new Map(s.conditions.map((c) => [c.name, c]));
  const tables = s.directions.map((d) => {
    const rows = s.panels.filter((p) => p.direction === d.name).flatMap((p) => {
      const c = cond.get(p.condition);
      const where = escapeHtml(c ? `${c.figure}: ${c.label}` : p.condition);
      const line = (by: string, f: SaeFeatureRow, rank: number) =>
        `<tr><td>${where}</td><td>${by} ${rank + 1}</td><td>#${f.index}</td><td>${num(f.cosine)}</td><td>${num(f.attribution)}</td><td>${num(f.meanDiff)}</td><td class="prompts">${prompts(f)}</td></tr>`;
      return [...p.byCosine.map((f, i) => line('cosine', f, i)), ...p.byAttribution.map((f, i) => line('attribution', f, i))];
    });
    return `<section class="table" id="sae-${escapeHtml(d.name)}">
<h3>${escapeHtml(d.label)} (<code>${escapeHtml(d.name)}</code>)</h3>
<div class="scroll"><table><thead><tr><th>condition</th><th>rank</th><th>feature</th><th>decoder cosine</th><th>attribution</th><th>Δ mean activation</th><th>most active on (activation)</th></tr></thead><tbody>
${rows.join('\n')}
</tbody></table></div>
</section>`;
  });
  const conditions = s.conditions.map((c) => `${c.figure}: ${c.label}, n = ${c.n}`).join('; ');
  return `${head}
<p>Dictionary <code>${escapeHtml(s.sae)}</code> at <code>${escapeHtml(s.hook)}</code> (hidden[${s.hiddenRow}], ${s.dSae} features); ℓ* = ${res.lStar.layer}. Per direction and condition: the top ${s.top} features by decoder-row cosine with the direction, then the top ${s.top} by |attribution| ((harmful − benign mean activation in the condition) × decoder projection on the unit direction); each with the ${s.k} prompts of the condition it is most active on, read at the position the condition's cache holds (the last prompt token, or the first generated token — the states the directions and projections are computed from). Conditions: ${escapeHtml(conditions)}.</p>
${s.note ? `<p class="missing">${escapeHtml(s.note)}</p>` : ''}
${tables.join('\n')}`;
}

/** The same section for report.md: per direction and condition, the leading features by cosine with their top prompt keys. */
export function saeSectionMarkdown(res: AnalysisResults): string[] {
  if (res.dModel <= 0) return [];
  const s = res.saeFeatures;
  if (!s) return ['## SAE features of the refusal and Schema Directions', '', 'No SAE was given (`reproduce --sae DIR` lists them).', ''];
  const cond = new Map(s.conditions.map((c) => [c.name, `${c.figure}: ${c.label}`]));
  const lines = ['## SAE features of the refusal and Schema Directions', '', `Dictionary \`${s.sae}\` at \`${s.hook}\` (hidden[${s.hiddenRow}]; ℓ* = ${res.lStar.layer}).${s.note ? ` ${s.note}` : ''}`, ''];
  for (const d of s.directions) {
    lines.push(`### ${d.label}`, '', '| condition | feature (cosine, attribution) | most active on |', '| --- | --- | --- |');
    for (const p of s.panels.filter((x) => x.direction === d.name)) {
      for (const f of p.byCosine) {
        lines.push(`| ${cond.get(p.condition) ?? p.condition} | #${f.index} (${num(f.cosine)}, ${num(f.attribution)}) | ${f.top.map((t) => `${t.key} ${num(t.activation)}`).join('; ') || 'inactive on every prompt'} |`);
      }
    }
    lines.push('');
  }
  return lines;
}
