/**
 * report.html: one self-contained page — tables, interactive figures (vega-embed with tooltips), manifest.
 * vega, vega-lite and vega-embed are inlined from node_modules; the page loads nothing from the network.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { AnalysisResults } from '../analysis/results.ts';
import { SafekeepError } from '../util/errors.ts';
import { protocolTableHtml } from './protocol.ts';
import type { Figure } from './figures/spec.ts';
import { compactJson } from './compact-json.ts';
import { fewGroupsCaveat } from './few-groups.ts';
import { FONT_FAMILY } from './font.ts';
import { PAPER_CITATION } from './paper-numbers.ts';
import { paperSectionHtml } from './paper-section.ts';
import { escapeHtml } from './html-escape.ts';
import { saeSectionHtml } from './sae-section.ts';
import type { Table } from './tables.ts';

export { escapeHtml };

/** The browser (UMD) build of a package, found next to its resolved entry point. */
function browserBuild(pkg: string, file: string): string {
  const entry = fileURLToPath(import.meta.resolve(pkg));
  const path = join(dirname(entry), file);
  let js: string;
  try {
    js = readFileSync(path, 'utf8');
  } catch {
    throw new SafekeepError(`report.html: ${pkg}'s browser build ${file} not found (run npm ci)`);
  }
  // inside <script>, these sequences would end or confuse the script element
  if (/<\/script|<!--/i.test(js)) throw new SafekeepError(`report.html: ${pkg}/${file} cannot be inlined safely`);
  return js;
}

/** JSON safe inside <script>: no '<' survives, so no '</script>' can appear. */
function scriptJson(x: unknown): string {
  return JSON.stringify(x).replace(/</g, '\\u003c').replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029');
}

function htmlTable(t: Table): string {
  const head = `<tr>${t.header.map((h) => `<th>${escapeHtml(h)}</th>`).join('')}</tr>`;
  const body = t.display.map((r) => `<tr>${r.map((c) => `<td>${escapeHtml(c)}</td>`).join('')}</tr>`).join('\n');
  return `<section class="table" id="table-${escapeHtml(t.name)}">
<h3>${escapeHtml(t.title)}</h3>
<div class="scroll"><table><thead>${head}</thead><tbody>
${body}
</tbody></table></div>
${t.note ? `<p class="note">${escapeHtml(t.note)}</p>` : ''}
<p class="files">Files: tables/${escapeHtml(t.name)}.md, .csv, .json</p>
</section>`;
}

const CSS = `
body { font-family: '${FONT_FAMILY}', 'DejaVu Sans', Verdana, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; line-height: 1.45; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: .2em; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
.synthetic { background: #fff3cd; border: 2px solid #d4ac0d; padding: .6em 1em; font-weight: bold; }
.caveat { background: #fdf2e9; border-left: 4px solid #d35400; padding: .4em .8em; }
.missing { background: #f4f6f7; border-left: 4px solid #7f8c8d; padding: .4em .8em; }
.meta td { padding: .1em 1em .1em 0; }
.scroll { overflow-x: auto; }
table.data, .table table { border-collapse: collapse; font-size: .9em; }
.table th, .table td { border: 1px solid #ddd; padding: .3em .6em; text-align: right; white-space: nowrap; }
.table th:first-child, .table td:first-child { text-align: left; }
.table th { background: #f4f6f7; }
table.protocol { border-collapse: collapse; font-size: .85em; width: 100%; table-layout: fixed; }
.protocol th, .protocol td { border: 1px solid #ddd; padding: .3em .5em; text-align: left; vertical-align: top; white-space: normal; overflow-wrap: anywhere; }
.protocol th { background: #f4f6f7; }
.note, .caption, .files { color: #555; font-size: .9em; }
.figure { margin: 1.5em 0; }
.table td.prompts { text-align: left; white-space: normal; min-width: 24em; }
pre { background: #f8f9f9; padding: 1em; overflow-x: auto; font-size: .85em; }
`;

export function buildHtml(res: AnalysisResults, figures: readonly Figure[], tables: readonly Table[]): string {
  const figs = figures.map((f, i) => {
    const { $schema: _drop, ...spec } = f.spec as unknown as { $schema?: string } & Record<string, unknown>;
    return { id: `fig-${i}`, name: f.name, spec };
  });
  // dModel 0: a results shell of an endpoint-only run, which knows no activations
  const meta: [string, string][] = res.dModel > 0
    ? [
      ['Model', res.model],
      ['Layers (hidden states incl. embeddings)', String(res.layers)],
      ['d_model', String(res.dModel)],
      ['ℓ* (peak refusal layer)', `${res.lStar.layer} (rule ${res.lStar.rule ?? 'cv'}) — ${res.lStar.method}`],
    ]
    : [['Model', res.model], ['Activations', res.lStar.method]];
  if (res.bootstrap.reps > 0) {
    const groups = res.bootstrap.groups === undefined ? 'groups of pairs (scenarios)' : `${res.bootstrap.groups} evaluation groups (scenarios, else pairs)`;
    meta.push(['Intervals', `${res.bootstrap.reps} paired bootstrap resamples of ${groups}, seed ${res.bootstrap.seed}, ${Math.round(res.bootstrap.level * 100)}% percentile`]);
  }
  const caveat = res.dModel > 0 ? fewGroupsCaveat(res) : null;
  const protocol = protocolTableHtml();
  const vegaJs = browserBuild('vega', 'vega.min.js');
  const vlJs = browserBuild('vega-lite', 'vega-lite.min.js');
  const embedJs = browserBuild('vega-embed', 'vega-embed.min.js');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>safekeep report — ${escapeHtml(res.model)}</title>
<style>${CSS}</style>
</head>
<body>
<h1>safekeep report — ${escapeHtml(res.model)}</h1>
${res.synthetic ? '<p class="synthetic">SYNTHETIC: these numbers come from planted activations with a known answer, not from a real model.</p>' : ''}
<p>Reproduction of ${escapeHtml(PAPER_CITATION)}: refusal separability across input formats (Tables 1–2), the Schema Direction (Figure 3), first-token projections (Figure 4)${res.steering?.length ? ' and steering (Table 3)' : ''}${res.probe ? '; activation refusal probes and the guard comparison (base, SafeKeep, refusal probe, both)' : ''}${res.s3 ? '; the S³ multi-stage defense evaluation (stage-specific safety skills, a guard agent, recovery)' : ''}.</p>
<table class="meta">${meta.map(([k, v]) => `<tr><td>${escapeHtml(k)}</td><td>${escapeHtml(v)}</td></tr>`).join('')}</table>
${caveat ? `<p class="caveat">${escapeHtml(caveat)}</p>` : ''}
${(res.notes ?? []).map((n) => `<p class="note">${escapeHtml(n)}</p>`).join('\n')}
<h2>Figures</h2>
${figures.map((f, i) => `<section class="figure"><h3>${escapeHtml(f.title)}</h3><div id="fig-${i}" class="vega" data-name="${escapeHtml(f.name)}"></div><p class="caption">${escapeHtml(f.caption)} Files: figures/${escapeHtml(f.name)}.svg, .png</p></section>`).join('\n')}
<h2>Tables</h2>
${tables.map(htmlTable).join('\n')}
${saeSectionHtml(res)}
${paperSectionHtml(res.model)}
${protocol ? `<h2>Protocol: paper vs this run's defaults</h2>\n<p class="note">From docs/protocol.md; the values this run used are in the manifest below (<code>protocol</code>).</p>\n${protocol}` : ''}
<h2>Manifest</h2>
<pre>${escapeHtml(compactJson(res.manifest))}</pre>
<script>${vegaJs}</script>
<script>${vlJs}</script>
<script>${embedJs}</script>
<script>
(function () {
  var figs = ${scriptJson(figs)};
  var jobs = figs.map(function (f) {
    return vegaEmbed('#' + f.id, f.spec, { mode: 'vega-lite', actions: false, renderer: 'svg' });
  });
  Promise.all(jobs).then(function () { document.body.setAttribute('data-rendered', String(figs.length)); },
    function (e) { console.error('figure failed: ' + e); document.body.setAttribute('data-rendered', 'error'); });
})();
</script>
</body>
</html>
`;
}
