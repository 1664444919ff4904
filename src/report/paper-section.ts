/**
 * report.html's "The paper's figures" section: every table of the seed paper (§3.1, Tables 1–4) as the paper reports
 * it, with the model(s) and data each came from, so a reader sees the paper's numbers even where this run measured
 * no counterpart (Table 4 is measured by `guard eval`, whose tables print the same figures in columns of their own).
 */
import { paperModel, paperNumbers, type PaperNumbers } from './paper-numbers.ts';

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

function table(title: string, source: string, header: readonly string[], rows: readonly (readonly string[])[]): string {
  return `<section class="table paper"><h3>${esc(title)}</h3><div class="scroll"><table><thead><tr>${header.map((h) => `<th>${esc(h)}</th>`).join('')}</tr></thead><tbody>
${rows.map((r) => `<tr>${r.map((c) => `<td>${esc(c)}</td>`).join('')}</tr>`).join('\n')}
</tbody></table></div><p class="note">${esc(source)}</p></section>`;
}

const src = (t: { models: readonly string[]; data: string }): string => `Model(s): ${t.models.join(', ')}. Data: ${t.data}.`;

function sections(p: PaperNumbers, model: string): string[] {
  const t = p.tables;
  const s31 = t.section_3_1;
  const out = [
    table(s31.title, src(s31), ['Measure', 'Paper'], [
      ['Refusal of harmful requests, chatbot', `${s31.refusal_percent.chatbot}%`], ['Refusal of harmful requests, agent', `${s31.refusal_percent.agent}%`],
      ...Object.entries(s31.auroc).map(([k, v]) => [`Refusal-direction AUROC, ${k.replace(/_/g, ' ')}`, v.toFixed(3)]),
    ]),
    ...[t.table_1, t.table_2].map((x) => table(x.title, src(x), ['Row', ...x.models], Object.entries(x.rows).map(([k, v]) => [k, ...v.map((y) => y.toFixed(3))]))),
    table(t.table_3.title, src(t.table_3), ['α', 'Refusal %', 'Harmful exec. %', 'Invalid %'], t.table_3.rows.map((r) => r.map(String))),
  ];
  const t4 = t.table_4;
  const mine = paperModel(model, Object.keys(t4.rows));
  for (const [m, methods] of Object.entries(t4.rows)) {
    if (mine && m !== mine) continue;
    out.push(table(`${t4.title} — ${m}`, src({ models: [m], data: t4.data }), ['Method', ...t4.column_labels], Object.entries(methods).map(([k, v]) => [k, ...v.map((y) => y.toFixed(1))])));
  }
  return out;
}

/** The section's HTML, or '' without the project's data file. */
export function paperSectionHtml(model: string): string {
  const p = paperNumbers();
  if (!p) return '';
  const mine = paperModel(model, Object.keys(p.tables.table_4.rows));
  return `<h2>The paper's figures</h2>
<p class="note">As reported in ${esc(p.paper.short)}, “${esc(p.paper.title)}” (data/paper/paper-numbers.json)${mine ? `; Table 4 for ${esc(mine)}, the paper's model this run matches` : ''}. The measured tables above print the same figures in a column beside ours.</p>
${sections(p, model).join('\n')}`;
}
