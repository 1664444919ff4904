/**
 * The evaluation scenarios whose tables must not change when the evaluations move onto the harness (src/harness/):
 * each runs one CLI command of a given checkout against a scripted endpoint on 127.0.0.1 or the planted model, on the
 * miniature data sets (test/helpers/s3-data.ts), and returns its table files with what is measured (latencies) or
 * machine-specific (temp paths, the endpoint's port) masked.
 *
 * test/fixtures/harness/*.txt are these outputs from the code before the harness, generated (never hand-typed) by
 *     node --import tsx test/helpers/harness-scenarios.ts /tmp/h-base test/fixtures/harness
 * where /tmp/h-base is `git archive e8d0059` of this repository with node_modules linked in; the test
 * (test/harness.tables.test.ts) runs the same scenarios on the current checkout and compares byte for byte.
 * Two of them were generated again, the same way from the checkout itself, when changes of behaviour (not of the
 * harness) landed after the harness had been shown equal to e8d0059 on all six:
 * - guard-agentharm-planted.txt: the judge prompt encloses untrusted text in data boundaries (guard/judge-context.ts),
 *   so the judge's tokens per request grew (400.5 → 487.5, 325.5 → 412.5); verdicts and rates are unchanged;
 *   and again when the one end-of-turn token list (outcome/parse-calls.ts END_TOKENS) gained Phi's `<|end|>`: the
 *   planted model's refusals no longer end in a leaked `<|end|>` (the only change, checked with a diff);
 * - s3-mixed-endpoint.txt: S³'s filters now filter, input recovery completes the benign half of a mixed task, and
 *   the table gained the recovery-fallback and after-remediation columns (skills/, src/s3/);
 *   and again when the shipped skills gained plan-rules and memory-guard (the planning and memory stages): the run's
 *   skills list names them (the only change: the mixed tasks plan nothing and read no memory).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { completion, startMockUpstream, type MockAnswer } from './guard-mock.ts';
import { s3Script, argsFor } from './s3-mock.ts';
import { s3Data } from './s3-data.ts';
import type { ToolSpec } from '../../src/data/types.ts';

type Msg = { role: string; content: string };

/** The Table 4 judge and agent (as test/eval.table4.test.ts's): roles recognised by their fixed system texts. */
export function table4Script(roles: { assessor: string; safeprompt: string }, harmfulWords: RegExp) {
  return (body: Record<string, unknown> | null): MockAnswer => {
    const msgs = body!.messages as Msg[];
    if (msgs[0]!.content === roles.assessor) {
      const text = msgs[1]!.content;
      const yes = text.includes('"properties"') ? false : text.includes('## What the tools returned') ? true : harmfulWords.test(text);
      return { json: completion(yes ? 'YES' : 'NO', { promptTokens: 300, completionTokens: 1 }) };
    }
    const tools = body!.tools as ToolSpec[] | undefined;
    if (!tools) return { json: completion('It would cause harm.', { promptTokens: 50, completionTokens: 5 }) };
    if (msgs[0]!.content.endsWith(roles.safeprompt)) return { json: completion("I'm sorry, but I can't help with that.") };
    if (tools.length >= 3) return { json: completion(`{"name": "${tools[1]!.function.name}", "parameters": {`) };
    const t = tools[1] ?? tools[0]!;
    return { json: completion(null, { toolCalls: [{ id: 'c', type: 'function', function: { name: t.function.name, arguments: JSON.stringify(argsFor(t)) } }] }) };
  };
}

export function runCli(root: string, args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((res) => {
    const child = spawn(process.execPath, [join(root, 'bin', 'safekeep.mjs'), ...args], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, SAFEKEEP_QUIET: '1', ...env } });
    let stdout = '', stderr = '';
    child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
    child.on('exit', (code) => res({ code, stdout, stderr }));
  });
}

/** Measured and machine-specific values masked: latency fields/columns, temp paths, ports. */
export function mask(text: string, tmp: string): string {
  let t = text.split(tmp).join('<tmp>').replace(/127\.0\.0\.1:\d+/g, '127.0.0.1:<port>');
  // JSON: any key naming a latency or a time measured in ms
  t = t.replace(/("(?:[A-Za-z]*[Ll]atency[A-Za-z]*|agentMs|probeMs|judgeLatencyMs)":\s*)(\{[^{}]*\}|-?[\d.e+-]+|null)/g, '$1"<measured>"');
  return t;
}

/** Markdown/CSV: cells of columns whose header names ms are masked. */
export function maskColumns(text: string, sep: '|' | ','): string {
  const lines = text.split('\n');
  let measured: number[] = [];
  return lines.map((line) => {
    const cells = line.split(sep);
    if (cells.some((c) => /\bms\b|_ms_|latency_ms/.test(c))) {
      measured = cells.flatMap((c, i) => (/\bms\b|_ms|latency_ms/.test(c) ? [i] : []));
      return line;
    }
    if (measured.length === 0 || cells.length < 2 || /^\|\s*---/.test(line)) return line;
    return cells.map((c, i) => (measured.includes(i) ? (sep === '|' ? ' <measured> ' : '<measured>') : c)).join(sep);
  }).join('\n');
}

/**
 * What the scoring work added to Table 4 on purpose (the judge's flag rate, unparseable answers, the mostly-unparseable
 * warning, InjecAgent's step-2 simulated-response counts, the refusal path's mode): left out of the byte comparison on both sides — the code before had none of it, so for the base
 * checkout this removes nothing — and tested on its own (test/eval.table4-scoring.test.ts).
 */
const ADDED_COLUMN = /^(?:Paper |Benign over-refusal|Judge flag rate|Unparseable judge answers|flag_rate|Step-2 tool responses|(?:AgentHarm |InjecAgent )?(?:Judge calls|Guard tokens|Added ms)|judge_calls|guard_tokens|added_ms)/;
/** the cost columns (every method's judge calls, guard tokens, added latency) came later too: left out the same way, tested in test/eval.table4.test.ts */
const ADDED_KEYS = new Set(['paper', 'judgeModel', 'benignFlagRate', 'flagRate', 'simulated', 'refusalPath', 'cost', 'judgeCalls', 'guardTokens', 'guardMs', 'modelKind']);

/** Markdown/CSV without the added columns and notes. */
export function dropAdded(text: string, sep: '|' | ','): string {
  let drop: number[] = [];
  const out: string[] = [];
  for (let line of text.split('\n')) {
    if (line.startsWith('**Warning:**') || line.startsWith('Paper: ') || line.startsWith('Step-2 tool responses:') || line.startsWith('Refusal path:') || line.startsWith('Cost, every method') || line.startsWith('Model: ') || line.startsWith('Probe: ')) { if (out.at(-1) === '') out.pop(); continue; }
    // the paper's figures beside ours came later too: a note's "Paper: …" sentence is left out the same way
    if (!line.includes(sep)) line = line.replace(/ Paper\b.*$/, '');
    const cells = line.split(sep);
    const names = cells.map((c) => c.trim());
    if (names.some((c) => ADDED_COLUMN.test(c))) drop = names.flatMap((c, i) => (ADDED_COLUMN.test(c) ? [i] : []));
    if (drop.length && cells.length > Math.max(...drop)) { out.push(cells.filter((_, i) => !drop.includes(i)).join(sep)); continue; }
    if (!line.includes(sep)) drop = sep === '|' ? [] : drop;
    out.push(line);
  }
  return out.join('\n');
}

function dropKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(dropKeys);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).filter(([k]) => !ADDED_KEYS.has(k)).map(([k, x]) => [k, dropKeys(x)]));
  return v;
}

export interface Scenario {
  name: string;
  /** the tables/outputs to compare, relative to the scenario's folder */
  files: string[];
  run(root: string, dir: string): Promise<void>;
}

async function withEndpoint<T>(script: (b: Record<string, unknown> | null) => MockAnswer, f: (url: string) => Promise<T>): Promise<T> {
  const up = await startMockUpstream(script);
  try { return await f(up.url); } finally { await up.close(); }
}

async function must(root: string, args: string[], env?: Record<string, string>): Promise<void> {
  const r = await runCli(root, args, env);
  if (r.code !== 0) throw new Error(`${args.slice(0, 2).join(' ')} exited ${r.code}: ${r.stderr}`);
}

async function roles(root: string): Promise<{ assessor: string; safeprompt: string }> {
  const p = (await import(join(root, 'src', 'guard', 'prompts.ts'))) as { SAFETY_ASSESSOR_ROLE: string; SAFEPROMPT_SYSTEM: string };
  return { assessor: p.SAFETY_ASSESSOR_ROLE, safeprompt: p.SAFEPROMPT_SYSTEM };
}

const guardFiles = (bench: string) => [`guard/table4-${bench}.md`, `guard/table4-${bench}.csv`, `guard/table4-${bench}.json`, `guard/outputs-${bench}.jsonl`, 'guard/table4.md'];

export const SCENARIOS: Scenario[] = [
  {
    name: 'guard-agentharm-endpoint',
    files: guardFiles('agentharm'),
    run: async (root, dir) => withEndpoint(table4Script(await roles(root), /\$5,000|election/), (url) =>
      must(root, ['guard', 'eval', '--endpoint', url, '--endpoint-model', 'mock', '--bench', 'agentharm', '--data', s3Data().agentharm, '--out', join(dir, 'guard'), '--no-cache', '--concurrency', '3'])),
  },
  {
    name: 'guard-injecagent-endpoint',
    files: guardFiles('injecagent'),
    run: async (root, dir) => withEndpoint(table4Script(await roles(root), /$^/), (url) =>
      must(root, ['guard', 'eval', '--endpoint', url, '--endpoint-model', 'mock', '--bench', 'injecagent', '--injecagent-format', 'native', '--data', s3Data().injecagent, '--out', join(dir, 'guard'), '--no-cache'])),
  },
  {
    name: 's3-mixed-endpoint',
    files: ['s3/s3-mixed.md', 's3/s3-mixed.csv', 's3/s3-mixed.json', 's3/trajectories-mixed.jsonl'],
    run: (root, dir) => withEndpoint(s3Script, (url) =>
      must(root, ['s3', 'eval', '--endpoint', url, '--endpoint-model', 'mock', '--bench', 'mixed', '--settings', 'base', '--configs', 'none,single:parse-data,no-recovery,full',
        '--injecagent', s3Data().injecagent, '--agentharm', s3Data().agentharm, '--out', join(dir, 's3'), '--no-cache', '--skills', join(root, 'skills')])),
  },
  {
    name: 'guard-agentharm-planted',
    files: guardFiles('agentharm'),
    run: async (root, dir) => {
      await must(root, ['make-model', 'planted', '--out', join(dir, 'planted')], { SAFEKEEP_CACHE: join(dir, '.graphs') });
      await must(root, ['guard', 'eval', '--model', join(dir, 'planted'), '--bench', 'agentharm', '--data', s3Data().agentharm, '--out', join(dir, 'guard'), '--max-tokens', '12', '--methods', 'base,safejudge,safeprompt,safekeep'],
        { SAFEKEEP_CACHE: join(dir, '.graphs') });
    },
  },
  {
    name: 'steer-planted',
    files: ['planted/steering/table3.md', 'planted/steering/table3.csv', 'planted/steering/table3.json', 'planted/steering/generations.harmful.alpha0.jsonl', 'planted/steering/generations.harmful.alpha1.2.jsonl'],
    run: async (root, dir) => {
      const env = { SAFEKEEP_CACHE: join(dir, '.graphs') };
      await must(root, ['make-model', 'planted', '--out', join(dir, 'planted')], env);
      await must(root, ['steer', '--model', join(dir, 'planted'), '--data', 'pairs', '--limit', '40', '--alphas', '0,0.4,1.2', '--max-new-tokens', '10', '--requests', 'harmful', '--results', dir], env);
    },
  },
  {
    name: 'behavioural-planted',
    files: ['planted/tables/behavioural-refusal.md', 'planted/behavioural/generations.chatbot.jsonl', 'planted/behavioural/generations.agent.jsonl'],
    run: async (root, dir) => {
      const env = { SAFEKEEP_CACHE: join(dir, '.graphs') };
      await must(root, ['make-model', 'planted', '--out', join(dir, 'planted')], env);
      await must(root, ['reproduce', '--model', join(dir, 'planted'), '--data', 'pairs', '--limit', '40', '--reps', '20', '--refusal-tokens', '10', '--results', dir], env);
    },
  },
];

/** Runs a scenario on the checkout at `root`; returns each file's masked text. */
export async function runScenario(root: string, s: Scenario): Promise<Record<string, string>> {
  const dir = mkdtempSync(join(tmpdir(), `harness-${s.name}-`));
  try {
    await s.run(root, dir);
    const out: Record<string, string> = {};
    for (const f of s.files) {
      const p = join(dir, f);
      if (!existsSync(p)) throw new Error(`${s.name}: ${f} not written`);
      let raw = readFileSync(p, 'utf8');
      if (f.endsWith('.json') && (f.includes('table4') || f.includes('table3'))) raw = JSON.stringify(dropKeys(JSON.parse(raw)), null, 2) + '\n';
      if (f.endsWith('.jsonl') && f.includes('guard/outputs-')) raw = raw.split('\n').map((l) => (l ? JSON.stringify(dropKeys(JSON.parse(l))) : l)).join('\n');
      let text = mask(raw, dir).split(s3Data().root).join('<data>');
      if (f.endsWith('.md')) text = maskColumns(dropAdded(text, '|'), '|');
      if (f.endsWith('.csv')) text = maskColumns(dropAdded(text, ','), ',');
      out[f] = text;
    }
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** One fixture file per scenario: the files' masked texts, each after a `=== <file>` line. */
export const fixtureText = (files: Record<string, string>): string => Object.entries(files).map(([f, t]) => `=== ${f}\n${t}`).join('');

if (process.argv[1] && resolve(process.argv[1]) === resolve(new URL(import.meta.url).pathname)) {
  const [root, outDir, only] = process.argv.slice(2);
  if (!root || !outDir) throw new Error('usage: harness-scenarios.ts CHECKOUT OUT_DIR [SCENARIO]');
  mkdirSync(outDir, { recursive: true });
  for (const s of SCENARIOS.filter((x) => !only || x.name === only)) {
    const t0 = Date.now();
    writeFileSync(join(outDir, `${s.name}.txt`), fixtureText(await runScenario(resolve(root), s)));
    process.stderr.write(`${s.name}: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  }
}
