/**
 * The paper's own figures beside ours: the project's data file (data/paper/paper-numbers.json) holds the same figures as
 * the notes in ../shared (checked when present), the tables and report.html print them with model and data, the
 * citation names the paper by its title, and nothing of it needs ../shared.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { buildTables } from '../src/report/tables.ts';
import { PAPER_TITLE, paperModel, paperNumbers } from '../src/report/paper-numbers.ts';
import { writeReport } from '../src/report/write-report.ts';
import { markdownTable } from '../src/eval/table4/table.ts';
import { syntheticResults } from './helpers/report-results.ts';
import { repoRoot, sharedPath } from './helpers/shared.ts';

test('the project data file carries the seed figures the shared notes list (model and data per table)', (t) => {
  const p = paperNumbers()!;
  assert.equal(p.paper.title, PAPER_TITLE);
  for (const x of Object.values(p.tables)) {
    assert.ok(x.models.length > 0 && x.data.length > 10, `${x.title}: model and data named`);
  }
  const notes = sharedPath('notes', 'paper-numbers.json');
  if (!notes) return t.skip('needs ../shared/notes/paper-numbers.json to cross-check (set SAFEKEEP_SHARED); not present here');
  const src = JSON.parse(readFileSync(notes, 'utf8')).safekeep_paper;
  assert.equal(src.title, p.paper.title);
  assert.deepEqual(p.tables.table_1.rows, src.table_1_auroc_by_configuration.rows);
  assert.deepEqual(p.tables.table_2.rows, src.table_2_auroc_by_tool_specification.rows);
  assert.deepEqual(p.tables.table_3.rows, src.table_3_steering_llama.rows);
  assert.deepEqual(p.tables.table_4.rows, src.table_4.rows);
  assert.deepEqual(p.tables.section_3_1.refusal_percent, src.section_3_1_llama.behavioural_refusal_harmful);
});

test('model names map to the paper column of the same family and size, and nothing else', () => {
  const models = ['Llama3.1-8B-Instruct', 'Qwen3-8B', 'Mistral-7B-Instruct-v0.3'];
  assert.equal(paperModel('meta-llama/Llama-3.1-8B-Instruct', models), 'Llama3.1-8B-Instruct');
  assert.equal(paperModel('Qwen--Qwen3-8B', models), 'Qwen3-8B');
  assert.equal(paperModel('Qwen--Qwen3-0.6B', models), null);
  assert.equal(paperModel('planted', models), null);
});

test('Tables 1–3 print the paper figure of the same row beside the measured one', () => {
  const tables = buildTables(syntheticResults());
  const t1 = tables.find((t) => t.name === 'table1')!;
  const col = t1.header.findIndex((h) => h.startsWith('Paper AUROC'));
  assert.ok(col > 0, t1.header.join(' | '));
  // the planted model matches no paper model: every model's figure, in the file's order
  const tools = t1.display.find((r) => r[0]!.startsWith('+ tools'))!;
  assert.equal(tools[col], '0.740 / 0.786 / 0.815');
  const t2 = tables.find((t) => t.name === 'table2')!;
  const flat = t2.display.find((r) => r[0]!.startsWith('Flattened'))!;
  assert.equal(flat[t2.header.findIndex((h) => h.startsWith('Paper AUROC'))], '0.885 / 0.845 / 0.898');
  const t3 = tables.find((t) => t.name === 'table3-steering')!;
  assert.equal(t3.display[1]!.at(-1), '47.5 / 45.0 / 7.5'); // α = 4
  assert.match(t3.note!, /Llama3\.1-8B-Instruct/);
});

test('Table 4 prints the matched model\'s paper row beside each method', () => {
  const rate = (k: number, n: number) => ({ k, n, p: k / n, lo: 0, hi: 1 });
  const s = [{ method: 'safekeep', metrics: { refusal: rate(1, 2), acc: rate(1, 2) }, n: 2, judged: 0, flagged: 0, unparseable: 0, judgeLatencyMs: { mean: 0, p50: 0, p99: 0 }, judgeTokensPerRequest: 0 }];
  const md = markdownTable('agentharm', 'Qwen/Qwen3-8B', s as never);
  assert.match(md, /Paper AgentHarm Refusal % \(Qwen3-8B\)/);
  assert.match(md, /\| 73\.3 \| 83\.8 \|/); // SafeKeep, Qwen3-8B: Refusal 73.3, Acc 83.8, in our column order
  assert.match(md, /Paper: Table 4 .*Qwen3-8B on AgentHarm/);
});

test('report.html cites the paper by its title and shows its figures without ../shared', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-paper-'));
  try {
    const files = await writeReport(dir, syntheticResults());
    const html = readFileSync(files.html, 'utf8');
    assert.ok(html.includes(`“${PAPER_TITLE}”`));
    assert.ok(!html.includes('JSON tool schemas suppress the refusal direction'));
    assert.match(html, /The paper's figures/);
    assert.match(html, /Table 4 — guards on AgentHarm and InjecAgent — GPT5\.4-mini/);
    const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8');
    assert.ok(readme.includes(PAPER_TITLE));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
