/**
 * docs/protocol.md: the deviation table parses, is embedded in report.html, names SafeHarbor as not implemented,
 * and every switching flag it names exists in some command's flag table.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { markdownCells, PROTOCOL_FILE, protocolTableHtml } from '../src/report/protocol.ts';
import { buildHtml } from '../src/report/html.ts';
import type { FlagTable } from '../src/cli/args.ts';
import { repoRoot } from './helpers/shared.ts';
import { syntheticResults } from './helpers/report-results.ts';

const text = readFileSync(PROTOCOL_FILE, 'utf8');
const block = /<!-- protocol-table:start -->\n([\s\S]*?)<!-- protocol-table:end -->/.exec(text)![1]!;
const rows = block.trim().split('\n').slice(2).map(markdownCells);

test('protocol table: four columns, a row for each choice a run makes, SafeHarbor marked not implemented', () => {
  assert.ok(rows.length >= 15);
  for (const r of rows) assert.equal(r.length, 4, r.join(' | '));
  const choices = rows.map((r) => r[0]!);
  for (const c of ['Data', 'Split', 'Schema Direction', 'ℓ*', 'Scores', 'Steering positions', 'Output label: refusal', 'Output label: valid', 'InjecAgent metrics', 'Baseline: SafeHarbor']) {
    assert.ok(choices.some((x) => x.startsWith(c)), `row '${c}' missing`);
  }
  assert.match(rows.find((r) => r[0]!.includes('SafeHarbor'))![2]!, /not implemented/);
  assert.match(text, /## SafeHarbor\n/);
});

test('every flag the protocol table names exists in a command flag table', async () => {
  const known = new Set<string>();
  const dir = join(repoRoot, 'src', 'cli', 'commands');
  for (const f of readdirSync(dir).filter((x) => x.endsWith('.ts'))) {
    const mod = (await import(join(dir, f))) as { flags?: FlagTable };
    for (const fl of mod.flags?.flags ?? []) known.add(fl.name);
  }
  const named = rows.flatMap((r) => [...r.join(' ').matchAll(/`--([a-z-]+)/g)].map((m) => m[1]!));
  assert.ok(named.length >= 10);
  for (const n of named) assert.ok(known.has(n), `--${n} is in docs/protocol.md but in no command's flag table`);
});

test('report.html embeds the protocol table', () => {
  const html = buildHtml(syntheticResults(), [], []);
  const table = protocolTableHtml()!;
  assert.ok(html.includes(table));
  assert.match(table, /<td>Baseline: SafeHarbor<\/td>/);
  assert.match(table, /<code>--steer-positions generated<\/code>/);
  assert.match(table, /<code>--data pairs\|agentharm\|PATH<\/code>/);
});
