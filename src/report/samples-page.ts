/**
 * The trajectory browser of an evaluation log: one HTML page beside the log whose table has a row per sample and a
 * column per solver (method / configuration); each cell shows the sample's main score and opens that sample's
 * trajectory — every model call with the messages it saw, its reply and tool calls, tokens and latency, and every
 * score with its scorer. Self-contained (no network), written atomically.
 */
import { writeFileAtomic } from '../util/atomic.ts';
import type { EvalLog, SampleLog } from '../harness/log.ts';
import { escapeHtml as esc } from './html.ts';

const cellText = (s: SampleLog): string => s.scores.map((x) => String(x.value)).slice(0, 2).join(' · ');
const anchor = (i: number): string => `s-${i}`;

function trajectory(s: SampleLog, i: number): string {
  const calls = s.calls.map((c, k) => {
    const msgs = c.messages.map((m) => `<div class="msg"><b>${esc(String(m.role ?? ''))}</b><pre>${esc(typeof m.content === 'string' ? m.content : JSON.stringify(m.content ?? m.tool_calls ?? ''))}</pre></div>`).join('');
    const calls = c.toolCalls.length ? `<pre>${esc(JSON.stringify(c.toolCalls, null, 1))}</pre>` : '';
    return `<div class="call"><h4>call ${k + 1}: ${esc(c.purpose)}${c.tools.length ? ` (tools: ${esc(c.tools.join(', '))})` : ''}${c.prefix !== undefined ? ` — prefix “${esc(c.prefix)}”` : ''}</h4>${msgs}`
      + `<div class="reply"><b>reply</b> (${c.promptTokens} + ${c.completionTokens} tokens, ${c.latencyMs.toFixed(0)} ms${c.cached ? ', cached' : ''}, ${esc(c.finish)})<pre>${esc(c.content)}</pre>${calls}</div></div>`;
  }).join('');
  const scores = s.scores.map((x) => `<tr><td>${esc(x.scorer)}</td><td>${esc(String(x.value))}</td><td>${esc(x.explanation ?? '')}</td></tr>`).join('');
  return `<details id="${anchor(i)}"><summary>${esc(s.solver)} × ${esc(s.sample)} — ${esc(cellText(s))}</summary>`
    + `<table class="scores"><tr><th>scorer</th><th>value</th><th>explanation</th></tr>${scores}</table>${calls}</details>`;
}

export function samplesPage(log: EvalLog): string {
  const solvers = [...new Set(log.samples.map((s) => s.solver))];
  const samples = [...new Set(log.samples.map((s) => s.sample))];
  const at = new Map(log.samples.map((s, i) => [`${s.solver}\u0000${s.sample}`, i]));
  const rows = samples.map((id) => `<tr><td>${esc(id)}</td>${solvers.map((sv) => {
    const i = at.get(`${sv}\u0000${id}`);
    return `<td>${i === undefined ? '–' : `<a href="#${anchor(i)}">${esc(cellText(log.samples[i]!))}</a>`}</td>`;
  }).join('')}</tr>`).join('\n');
  return `<!doctype html><html><head><meta charset="utf-8"><title>${esc(log.header.task)} — samples</title><style>
body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top}
pre{white-space:pre-wrap;margin:2px 0 6px;background:#f6f6f6;padding:4px}details{margin:6px 0}.call{margin-left:1em}h4{margin:8px 0 2px}
</style></head><body><h1>${esc(log.header.task)}: every sample</h1>
<p>A cell shows the sample's scores (first scorer first); it opens the sample's trajectory below.</p>
<table class="grid"><tr><th>sample</th>${solvers.map((s) => `<th>${esc(s)}</th>`).join('')}</tr>
${rows}</table>
<h2>Trajectories</h2>
${log.samples.map(trajectory).join('\n')}
<script>const open=()=>{const d=document.getElementById(location.hash.slice(1));if(d&&d.tagName==='DETAILS')d.open=true;};addEventListener('hashchange',open);open();</script>
</body></html>
`;
}

export function writeSamplesPage(path: string, log: EvalLog): void {
  writeFileAtomic(path, samplesPage(log));
}
