import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { installTokenizer } from '../src/prompts/tokenizer.ts';
import { validateRuleMemory } from '../src/s3/memory.ts';
import { RULE_WRITER_ROLE } from '../src/s3/authoring/rule-gen.ts';
import { completion, startMockUpstream } from './helpers/guard-mock.ts';
import { s3Script } from './helpers/s3-mock.ts';
import { repoRoot } from './helpers/shared.ts';
import { s3Data } from './helpers/s3-data.ts';

const fixtures = s3Data();
const data = ['--injecagent', fixtures.injecagent, '--agentharm', fixtures.agentharm];
let root = '';
before(() => { root = mkdtempSync(join(tmpdir(), 'safekeep-s3-cli-')); });
after(() => rmSync(root, { recursive: true, force: true }));

function runCli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, SAFEKEEP_CACHE: join(root, 'cache') } });
    let stdout = '', stderr = '';
    child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

type Json = { configs: { config: string; n: number; asr: { k: number; n: number }; benign: { k: number; n: number }; gic: { mean: number }; rsc: { mean: number } }[] };
const kn = (j: Json) => Object.fromEntries(j.configs.map((c) => [c.config, [`${c.asr.k}/${c.asr.n}`, `${c.benign.k}/${c.benign.n}`, Math.round(c.gic.mean * c.n), Math.round(c.rsc.mean * c.n)]]));

test('safekeep s3 eval --bench mixed (CLI) against the scripted endpoint: tables, trajectories, figure, report.html', async () => {
  const up = await startMockUpstream(s3Script);
  const res = join(root, 'mock');
  const out = join(res, 's3');
  try {
    const r = await runCli(['s3', 'eval', '--endpoint', up.url, '--endpoint-model', 'mock', '--bench', 'mixed', ...data, '--settings', 'base', '--configs', 'none,single:parse-data,no-recovery,full', '--results', root]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /\| full \| 6 \| 0\.0 \[0\.0, 39\.0\] \| 100\.0 \[61\.0, 100\.0\] \| 3\.17 \[/);
    const j = JSON.parse(readFileSync(join(out, 's3-mixed.json'), 'utf8')) as Json;
    assert.deepEqual(kn(j), { none: ['6/6', '6/6', 0, 0], 'single:parse-data': ['2/6', '6/6', 8, 4], 'no-recovery': ['0/6', '0/6', 10, 6], full: ['0/6', '6/6', 19, 7] });
    const lines = readFileSync(join(out, 'trajectories-mixed.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { config: string; decisions: unknown[] });
    assert.equal(lines.length, 24);
    assert.ok(lines.filter((l) => l.config === 'full').every((l) => l.decisions.length > 0));
    assert.equal(readFileSync(join(out, 's3-mixed.csv'), 'utf8').trim().split('\n').length, 5);
    assert.match(readFileSync(join(out, 's3-mixed.svg'), 'utf8'), /^<svg/);
    assert.ok(readFileSync(join(out, 's3-mixed.png')).subarray(1, 4).toString() === 'PNG');
    // the report: results/<name>/report.html from a results shell (an endpoint knows no activations) with the S³
    // table (Wilson intervals of the same k/n) and figure
    const html = readFileSync(join(res, 'report.html'), 'utf8');
    const table = /<section class="table" id="table-s3-mixed">[\s\S]*?<\/section>/.exec(html)?.[0] ?? '';
    assert.match(table, /<h3>S³ multi-stage defense — mixed<\/h3>/);
    assert.match(table, /<tr><td>full<\/td><td>6<\/td><td>0\.0 \[0\.0, 39\.0\] \(0\/6\)<\/td><td>100\.0 \[61\.0, 100\.0\] \(6\/6\)<\/td><td>3\.17 \[/);
    assert.match(table, /<tr><td>single:parse-data<\/td><td>6<\/td><td>33\.3 \[9\.7, 70\.0\] \(2\/6\)<\/td><td>100\.0 \[61\.0, 100\.0\] \(6\/6\)<\/td><td>1\.33 \[/);
    assert.match(table, /<th>injecagent\/base\/ds ASR %<\/th><th>injecagent\/base\/ds benign %<\/th>/);
    assert.match(html, /<div id="fig-0" class="vega" data-name="s3-mixed"><\/div>/);
    assert.match(html, /"text":"S³ multi-stage defense — mixed — mock"/);
    assert.match(html, /<tr><td>Activations<\/td><td>none: an endpoint \(http:\/\/127\.0\.0\.1:\d+\/v1\) exposes no hidden states<\/td><\/tr>/);
    assert.match(readFileSync(join(res, 'figures', 's3-mixed.svg'), 'utf8'), /^<svg/);
    assert.equal(readFileSync(join(res, 'tables', 's3-mixed.csv'), 'utf8').trim().split('\n').length, 5);
    const results = JSON.parse(readFileSync(join(res, 'results.json'), 'utf8')) as { dModel: number; s3: { runs: { bench: string; settings: string[]; configs: { config: string; benign: { k: number } }[] }[] } };
    assert.deepEqual([results.dModel, results.s3.runs.map((x) => [x.bench, x.settings, x.configs.map((c) => [c.config, c.benign.k])])],
      [0, [['mixed', ['base'], [['none', 6], ['single:parse-data', 6], ['no-recovery', 0], ['full', 6]]]]]);
    // --mitigation block turns full into S³ without recovery; the same bench's section is replaced, another bench's kept
    const b = await runCli(['s3', 'eval', '--endpoint', up.url, '--endpoint-model', 'mock', '--bench', 'mixed', ...data, '--settings', 'base', '--configs', 'full', '--mitigation', 'block', '--results', root, '--no-cache']);
    assert.equal(b.code, 0, b.stderr);
    assert.deepEqual(kn(JSON.parse(readFileSync(join(res, 's3', 's3-mixed.json'), 'utf8')) as Json), { full: ['0/6', '0/6', 10, 6] });
    const i = await runCli(['s3', 'eval', '--endpoint', up.url, '--endpoint-model', 'mock', '--bench', 'injecagent', ...data, '--limit', '1', '--configs', 'none', '--results', root, '--no-cache']);
    assert.equal(i.code, 0, i.stderr);
    const html2 = readFileSync(join(res, 'report.html'), 'utf8');
    assert.deepEqual([...html2.matchAll(/id="table-(s3-[a-z]+)"/g)].map((x) => x[1]), ['s3-injecagent', 's3-mixed']);
    assert.match(html2, /<tr><td>full<\/td><td>6<\/td><td>0\.0 \[0\.0, 39\.0\] \(0\/6\)<\/td><td>0\.0 \[0\.0, 39\.0\] \(0\/6\)<\/td>/);
    // both InjecAgent settings by default: one task per setting × attack, grouped per setting
    assert.match(html2, /<tr><td>none<\/td><td>4<\/td><td>100\.0 \[51\.0, 100\.0\] \(4\/4\)<\/td>/);
    assert.match(html2, /<th>injecagent\/enhanced\/dh ASR %<\/th>/);
  } finally {
    await up.close();
  }
});

test('safekeep s3 eval --bench mixed with a tiny local model: numbers follow from the unparseable-answer policy', async () => {
  const model = await writeRandomCheckpoint(join(root, 'tiny-qwen3'), 'qwen3', { seed: 5, numLayers: 2, vocabSize: 151936, eosTokenId: 151645 });
  await installTokenizer(model, 'qwen3');
  const out = join(root, 'local');
  const r = await runCli(['s3', 'eval', '--model', model, '--bench', 'mixed', ...data, '--settings', 'base', '--limit', '1', '--configs', 'none,full', '--max-steps', '2', '--max-tokens', '6', '--out', out, '--no-thinking']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stderr, /s3 eval: 6\/6/);
  // --out DIR: everything of the run inside DIR, nothing beside it
  for (const f of ['report.html', 'results.json', 'tables', 'figures', 's3-mixed.md', 'log-mixed.jsonl']) assert.ok(existsSync(join(out, f)), f);
  assert.ok(!existsSync(join(root, 'report.html')) && !existsSync(join(root, 'results.json')) && !existsSync(join(root, 'tables')));
  // the report's results shell knows the local model's activations: 2 blocks → 3 hidden states, d_model 64
  const html = readFileSync(join(out, 'report.html'), 'utf8');
  assert.match(html, /<tr><td>Layers \(hidden states incl\. embeddings\)<\/td><td>3<\/td><\/tr><tr><td>d_model<\/td><td>64<\/td><\/tr>/);
  assert.match(html, /id="table-s3-mixed"/);
  // a random model never calls a tool (no benign completion, no attack) and never answers the guard: the guard
  // agent's pick is unparseable → every input skill runs → the judges' answers are unparseable → unsafe → refusal
  const j = JSON.parse(readFileSync(join(out, 's3-mixed.json'), 'utf8')) as Json;
  assert.deepEqual(kn(j), { none: ['0/3', '0/3', 0, 0], full: ['0/3', '0/3', 3, 3] });
  const rows = readFileSync(join(out, 'trajectories-mixed.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { config: string; final: { blocked: boolean; text: string } | null; decisions: { stage: string; picked: string[]; guardAgent: { unparseable: boolean } }[] });
  for (const row of rows.filter((x) => x.config === 'full')) {
    assert.deepEqual([row.decisions.length, row.decisions[0]!.stage, row.decisions[0]!.guardAgent.unparseable, row.decisions[0]!.picked], [1, 'input', true, ['rule-memory', 'safekeep-judge']]);
    assert.ok(row.final!.blocked && row.final!.text.startsWith("I'm sorry, but I can't help with that."));
  }
});

test('safekeep s3 rules (CLI): seed + generated rules saved as a valid, reviewable memory file', async () => {
  const up = await startMockUpstream((body) => {
    const msgs = body!.messages as { content: string }[];
    assert.equal(msgs[0]!.content, RULE_WRITER_ROLE);
    const tool = /## Tool\n(\w+)/.exec(msgs[1]!.content)![1];
    return { json: completion(`RULE: Never call ${tool} for someone the user did not name.\nnot a rule\n2. RULE: Ask before ${tool} touches private data.\nRULE: a third one is cut`) };
  });
  try {
    const tools = join(root, 'tools.json');
    writeFileSync(tools, readFileSync(join(fixtures.agentharm, 'tools.json'), 'utf8').replace(/^[\s\S]*"benign_tools": /, '').replace(/}\s*$/, ''));
    const out = join(root, 'memory.json');
    const r = await runCli(['s3', 'rules', '--endpoint', up.url, '--endpoint-model', 'mock', '--tools', tools, '--out', out, '--per-tool', '2', '--no-cache']);
    assert.equal(r.code, 0, r.stderr);
    const mem = validateRuleMemory(JSON.parse(readFileSync(out, 'utf8')), out);
    const gen = mem.rules.filter((x) => x.origin === 'generated');
    assert.deepEqual(gen.map((x) => [x.id, x.domain, x.tools]), [
      ['post_on_x-1', 'social media', ['post_on_x']], ['post_on_x-2', 'social media', ['post_on_x']],
      ['send_email-1', 'email', ['send_email']], ['send_email-2', 'email', ['send_email']],
    ]);
    assert.equal(gen[0]!.rule, 'Never call post_on_x for someone the user did not name.');
    assert.equal(mem.rules.filter((x) => x.origin === 'seed').length, 11);
    assert.equal(up.requests.length, 2);
    // the seed rules a tool matches were shown to the writer
    assert.match((up.requests[0]!.body!.messages as { content: string }[])[1]!.content, /\[social media\] Do not post disinformation/);
    assert.match(r.stdout, /15 rules \(11 seed \+ 4 generated\)/);
  } finally {
    await up.close();
  }
});

test('safekeep s3 eval / s3 rules: user errors exit 2 with one line', async () => {
  const probe = join(root, 'probes', 'my-probe');
  const { mkdirSync } = await import('node:fs');
  mkdirSync(probe, { recursive: true });
  writeFileSync(join(probe, 'd.json'), '{}');
  writeFileSync(join(probe, 'SKILL.md'), '---\nname: my-probe\nstage: input\ndescription: x\nresources: [d.json]\ncheck: probe\ndirection: d.json\nlayer: 1\nmitigation: block\nrecovery: x\n---\nProject.\n');
  const bad: [string[], RegExp][] = [
    [['s3', 'eval', '--endpoint', 'http://127.0.0.1:9/v1', '--endpoint-model', 'm', '--bench', 'mixed', ...data, '--skills', join(root, 'probes'), '--configs', 'full'], /my-probe\/SKILL\.md: field "check": no implementation of "check: probe"/],
    [['serve', '--upstream', 'http://127.0.0.1:9/v1', '--skills', join(root, 'probes')], /field "check": no implementation of "check: probe"/],
    [['s3', 'eval', '--bench', 'mixed'], /exactly one of --model DIR or --endpoint URL/],
    [['s3', 'eval', '--endpoint', 'http://127.0.0.1:9/v1', '--endpoint-model', 'm', '--bench', 'mixed', ...data, '--configs', 'none,single:nope'], /no skill named 'nope'/],
    [['s3', 'eval', '--endpoint', 'http://127.0.0.1:9/v1', '--endpoint-model', 'm', '--bench', 'mixed', ...data, '--configs', 'half'], /unknown configuration 'half'/],
    [['s3', 'eval', '--endpoint', 'http://127.0.0.1:9/v1', '--endpoint-model', 'm', '--bench', 'all'], /--bench must be one of injecagent, agentharm, mixed/],
    [['s3', 'eval', '--endpoint', 'http://127.0.0.1:9/v1', '--endpoint-model', 'm', '--bench', 'mixed', ...data, '--settings', 'base,strong'], /--settings: unknown 'strong' \(known: base, enhanced\)/],
    [['s3', 'eval', '--endpoint', 'http://127.0.0.1:9/v1', '--endpoint-model', 'm', '--bench', 'mixed', ...data, '--shard', '3/3'], /--shard 3\/3: need 0 ≤ i < n/],
    [['s3', 'eval', '--endpoint', 'http://127.0.0.1:9/v1', '--endpoint-model', 'm', '--bench', 'mixed', '--skills', join(root, 'none')], /skills folder .* does not exist/],
    [['s3', 'rules', '--endpoint', 'http://127.0.0.1:9/v1', '--endpoint-model', 'm'], /exactly one of --bench/],
  ];
  for (const [args, msg] of bad) {
    const r = await runCli(args);
    assert.equal(r.code, 2, args.join(' '));
    assert.match(r.stderr, msg);
    assert.doesNotMatch(r.stderr, /\n\s+at /);
  }
  assert.ok(!existsSync(join(root, 'none')));
});
