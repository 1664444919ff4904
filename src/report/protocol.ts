/**
 * The protocol/deviation table of docs/protocol.md (between its `protocol-table` markers), as HTML for report.html:
 * the one source of "paper's choice, ours, and the switching flag" is the Markdown file.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PROTOCOL_FILE = join(resolve(dirname(fileURLToPath(import.meta.url)), '..', '..'), 'docs', 'protocol.md');

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** Inline Markdown of a cell: `code`, **bold**, *emphasis*; everything else escaped. */
function inline(s: string): string {
  return s
    .split(/(`[^`]*`)/)
    .map((part) => (part.startsWith('`') && part.endsWith('`') && part.length >= 2
      ? `<code>${esc(part.slice(1, -1))}</code>`
      : esc(part).replace(/\*\*([^*]+)\*\*/g, '<strong>$1</strong>').replace(/\*([^*]+)\*/g, '<em>$1</em>')))
    .join('');
}

/** Cells of a Markdown table row (`\|` is a literal bar). */
export function markdownCells(line: string): string[] {
  const body = line.trim().replace(/^\|/, '').replace(/\|$/, '');
  return body.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

/** The table as an HTML <table>, or null when the file or its markers are missing. */
export function protocolTableHtml(file = PROTOCOL_FILE): string | null {
  if (!existsSync(file)) return null;
  const text = readFileSync(file, 'utf8');
  const m = /<!-- protocol-table:start -->\n([\s\S]*?)<!-- protocol-table:end -->/.exec(text);
  if (!m) return null;
  const lines = m[1]!.trim().split('\n').filter((l) => l.trim().startsWith('|'));
  if (lines.length < 3) return null;
  const head = markdownCells(lines[0]!).map((c) => `<th>${inline(c)}</th>`).join('');
  const rows = lines.slice(2).map((l) => `<tr>${markdownCells(l).map((c) => `<td>${inline(c)}</td>`).join('')}</tr>`);
  // not class "table": that CSS right-aligns and never wraps (numeric tables); this one is prose and must wrap
  return `<table class="protocol"><thead><tr>${head}</tr></thead><tbody>${rows.join('')}</tbody></table>`;
}
