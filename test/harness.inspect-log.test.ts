/**
 * Inspect logs (src/harness/inspect-log.ts): what `guard eval`, `s3 eval`, `steer` and `probe eval` write under
 * results/<name>/inspect/ validates against inspect_ai's own EvalLog schema (../shared/schemas/inspect_ai/, skipped
 * visibly without it) and says what our per-sample log says: every sample with its messages, output, scores and
 * token usage; the solvers as the plan; the scores' summary recomputed here from the samples. The `.eval` twin in
 * results/<name>/inspect-eval/ is a zip that Python's zipfile reads back (CRCs checked) into the same log.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspectEvalArchive, inspectEvalLog } from '../src/harness/inspect-log.ts';
import { crc32 } from '../src/util/zip.ts';
import { runPython } from './helpers/python.ts';
import { readEvalLog, type EvalLog, type SampleLog } from '../src/harness/log.ts';
import { writePlantedModel } from '../src/experiments/planted.ts';
import { loadPairSet } from '../src/data/load.ts';
import { SAFEPROMPT_SYSTEM, SAFETY_ASSESSOR_ROLE } from '../src/guard/prompts.ts';
import { startMockUpstream } from './helpers/guard-mock.ts';
import { table4Script } from './helpers/harness-scenarios.ts';
import { s3Script } from './helpers/s3-mock.ts';
import { s3Data } from './helpers/s3-data.ts';
import { runCli } from './helpers/cli.ts';
import { inspectFile, inspectLogValidator, readJson, type Validate } from './helpers/inspect-schema.ts';

type J = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const call = (purpose: string, messages: Array<Record<string, unknown>>, content: string, extra: Partial<SampleLog['calls'][number]> = {}) => ({
  purpose, messages, tools: [], content, toolCalls: [], promptTokens: 10, completionTokens: 3, latencyMs: 50, cached: false, finish: 'stop', ...extra,
});

/** three samples of two solvers: a judge then an agent with a tool call and its result, a rendered prompt, a null score */
const synthetic: EvalLog = {
  header: { format: 'safekeep-log', task: 'guard-eval/agentharm', protocol: { judge: 'yes/no' }, context: { bench: 'agentharm' } },
  samples: [
    {
      format: 'safekeep-sample', id: 'safekeep × harmful/1', sample: 'harmful/1', solver: 'safekeep',
      calls: [
        call('judge', [{ role: 'system', content: 'assess' }, { role: 'user', content: 'is this harmful?' }], 'NO'),
        call('agent', [{ role: 'system', content: 'agent' }, { role: 'user', content: 'send mail' }], '', { toolCalls: [{ id: 'c1', type: 'function', function: { name: 'send', arguments: '{"to":"a"}' } }], finish: 'tool_calls' }),
        call('agent', [{ role: 'system', content: 'agent' }, { role: 'user', content: 'send mail' }, { role: 'assistant', content: '', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'send', arguments: '{"to":"a"}' } }] }, { role: 'tool', content: 'sent', tool_call_id: 'c1', name: 'send' }], 'done'),
      ],
      scores: [{ scorer: 'outcome', value: 'valid', explanation: 'one call' }, { scorer: 'judge', value: 'no' }, { scorer: 'refusal-judge', value: null }],
      output: 'done', tokens: { prompt: 30, completion: 9 }, latencyMs: 150, row: { method: 'safekeep' },
    },
    {
      format: 'safekeep-sample', id: 'safekeep × harmful/2', sample: 'harmful/2', solver: 'safekeep',
      calls: [call('refusal', [{ role: 'user', content: 'bomb' }], "I'm sorry", { prefix: "I'm sorry", finish: 'length' })],
      scores: [{ scorer: 'outcome', value: 'refusal' }, { scorer: 'judge', value: 'yes' }, { scorer: 'refusal-judge', value: true }],
      output: "I'm sorry", tokens: { prompt: 10, completion: 3 }, latencyMs: 50, row: {},
    },
    {
      format: 'safekeep-sample', id: 'alpha=4 × pair-1', sample: 'pair-1', solver: 'alpha=4',
      calls: [call('generate', [{ role: 'prompt', content: '<|user|>hi<|assistant|>' }], 'hello', { finish: 'eos' })],
      scores: [{ scorer: 'outcome', value: 'invalid' }], output: 'hello', tokens: { prompt: 7, completion: 2 }, latencyMs: 20, row: {},
    },
  ],
};

test('an Inspect EvalLog of our log: schema-valid; messages, tool calls, scores, usage and results as the log says', (t) => {
  const validate = inspectLogValidator(t);
  const log = inspectEvalLog(synthetic, { model: 'local:planted', startedAt: '2026-01-01T00:00:00.000Z', completedAt: '2026-01-01T00:01:00.000Z', args: { limit: 3 } }) as J;
  if (validate) {
    assert.deepEqual(validate(log), []);
    // the validator does reject: a message role Inspect has no name for
    const bad = structuredClone(log);
    bad.samples[2].messages[0].role = 'prompt';
    assert.ok(validate(bad).length > 0);
  }
  assert.equal(log.eval.task, 'guard-eval/agentharm');
  assert.equal(log.eval.model, 'local:planted');
  assert.deepEqual(log.eval.task_args, { limit: 3 });
  assert.deepEqual(log.plan.steps.map((s: J) => s.solver), ['safekeep', 'alpha=4']);
  assert.deepEqual(log.eval.dataset.sample_ids, ['harmful/1', 'harmful/2', 'pair-1']);
  const [a, b, c] = log.samples as J[];
  // judge conversation whole, then the agent's; its second call continues the first, so only the tool result is new
  assert.deepEqual(a!.messages.map((m: J) => `${m.role}:${m.metadata.purpose}`), [
    'system:judge', 'user:judge', 'assistant:judge', 'system:agent', 'user:agent', 'assistant:agent', 'tool:agent', 'assistant:agent']);
  assert.deepEqual(a!.messages[5].tool_calls, [{ id: 'c1', function: 'send', type: 'function', arguments: { to: 'a' } }]);
  assert.equal(a!.messages[6].tool_call_id, 'c1');
  assert.deepEqual(a!.input.map((m: J) => m.content), ['assess', 'is this harmful?']);
  assert.equal(a!.output.completion, 'done');
  assert.deepEqual(a!.output.usage, { input_tokens: 30, output_tokens: 9, total_tokens: 39 });
  assert.deepEqual(Object.keys(a!.scores), ['outcome', 'judge'], 'a null score is left out');
  assert.equal(a!.scores.outcome.explanation, 'one call');
  assert.equal(b!.output.choices[0].stop_reason, 'max_tokens');
  assert.equal(b!.messages.at(-1).metadata.prefix, "I'm sorry");
  assert.equal(c!.messages[0].role, 'user');
  assert.equal(c!.messages[0].metadata.role, 'prompt');
  assert.equal(c!.output.choices[0].stop_reason, 'stop');
  assert.deepEqual(log.stats.model_usage, { 'local:planted': { input_tokens: 47, output_tokens: 14, total_tokens: 61 } });
  // results: per scorer × solver; labels as fractions, booleans as means, unscored counted
  const score = (name: string) => (log.results.scores as J[]).find((s) => s.name === name)!;
  assert.deepEqual(Object.fromEntries(Object.entries(score('outcome · safekeep').metrics).map(([k, m]) => [k, (m as J).value])), { refusal: 0.5, valid: 0.5 });
  assert.equal(score('outcome · alpha=4').metrics.invalid.value, 1);
  assert.deepEqual([score('refusal-judge · safekeep').metrics.mean.value, score('refusal-judge · safekeep').unscored_samples], [1, 1]);
  assert.equal(log.results.total_samples, 3);
});

/** python's zipfile (an independent reader): CRCs checked, every entry's JSON by name */
const UNZIP = `
import sys, json, zipfile, io, base64
z = zipfile.ZipFile(io.BytesIO(base64.b64decode(json.load(sys.stdin))))
assert z.testzip() is None
print(json.dumps({i.filename: json.loads(z.read(i.filename)) for i in z.infolist()}))
`;

/** An .eval archive read back by python's zipfile: the log it holds (header + samples), or null without python3. */
function readEvalArchive(bytes: Uint8Array): { entries: Record<string, J>; log: J } | null {
  const entries = runPython(UNZIP, Buffer.from(bytes).toString('base64')) as Record<string, J> | null;
  if (!entries) return null;
  const samples = Object.keys(entries).filter((n) => n.startsWith('samples/')).map((n) => entries[n]!);
  return { entries, log: { ...entries['header.json'], samples } };
}

test('the .eval form: a zip laid out as inspect_ai writes it, read back by python, holding the same schema-valid log', (t) => {
  const validate = inspectLogValidator(t);
  const validSummary = inspectLogValidator(t, 'EvalSampleSummary');
  assert.equal(crc32(new TextEncoder().encode('123456789')), 0xcbf43926, 'CRC-32 check value');
  const log = inspectEvalLog(synthetic, { model: 'local:planted', completedAt: '2026-01-01T00:01:00.000Z' }) as J;
  const read = readEvalArchive(inspectEvalArchive(log));
  if (!read) { t.skip('needs python3 (its zipfile reads the archive)'); return; }
  const { entries, log: back } = read;
  assert.deepEqual(Object.keys(entries).sort(), ['_journal/start.json', '_journal/summaries/1.json', 'header.json',
    'samples/alpha=4 × pair-1_epoch_1.json', 'samples/safekeep × harmful/1_epoch_1.json', 'samples/safekeep × harmful/2_epoch_1.json', 'summaries.json']);
  assert.deepEqual(back, log, 'header + samples = the JSON log');
  assert.deepEqual(entries['_journal/start.json'], { version: 2, eval: log.eval, plan: log.plan });
  assert.equal(entries['header.json']!.samples, undefined);
  assert.deepEqual(entries['summaries.json'], entries['_journal/summaries/1.json']);
  assert.deepEqual((entries['summaries.json'] as unknown as J[]).map((s) => [s.id, s.message_count]), log.samples.map((s: J) => [s.id, s.messages.length]));
  if (validate) assert.deepEqual(validate(back), []);
  if (validSummary) for (const s of entries['summaries.json'] as unknown as J[]) assert.deepEqual(validSummary(s), [], String(s.id));
});

/** every .json under results/<name>/inspect validates, and each holds one sample per line of the JSONL log */
function checkInspectDir(validate: Validate | null, resultsDir: string, expected: Record<string, string>): void {
  const files = readdirSync(join(resultsDir, 'inspect')).sort();
  assert.deepEqual(files, Object.keys(expected).sort());
  assert.deepEqual(readdirSync(join(resultsDir, 'inspect-eval')).sort(), files.map((f) => f.replace(/\.json$/, '.eval')), 'each log also as .eval');
  for (const [name, jsonl] of Object.entries(expected)) {
    const log = readJson(inspectFile(resultsDir, name)) as J;
    if (validate) assert.deepEqual(validate(log), [], name);
    const ours = readEvalLog(jsonl);
    assert.equal(log.eval.task, ours.header.task);
    assert.deepEqual(log.samples.map((s: J) => s.id), ours.samples.map((s) => s.id), name);
    for (const [i, s] of (log.samples as J[]).entries()) {
      const o = ours.samples[i]!;
      assert.equal(s.output.completion, o.output);
      assert.equal(s.messages.filter((m: J) => m.role === 'assistant' && m.source === 'generate').length, o.calls.length, `${name} ${s.id}: a reply per call`);
      for (const x of o.scores.filter((x) => x.value !== null)) assert.ok(Object.values(s.scores as J).some((y: J) => y.value === x.value), `${name} ${s.id}: score ${x.scorer}`);
    }
    assert.equal(log.stats.model_usage[log.eval.model].input_tokens, ours.samples.reduce((a, s) => a + s.tokens.prompt, 0));
  }
}

test('guard eval and s3 eval write a schema-valid Inspect log per run (scripted endpoints)', async (t) => {
  const validate = inspectLogValidator(t);
  const dir = mkdtempSync(join(tmpdir(), 'inspect-eval-'));
  const up = await startMockUpstream(table4Script({ assessor: SAFETY_ASSESSOR_ROLE, safeprompt: SAFEPROMPT_SYSTEM }, /\$5,000|election/));
  const s3up = await startMockUpstream(s3Script);
  t.after(async () => { await up.close(); await s3up.close(); rmSync(dir, { recursive: true, force: true }); });
  const g = await runCli(['guard', 'eval', '--endpoint', up.url, '--endpoint-model', 'mock', '--bench', 'agentharm', '--data', s3Data().agentharm, '--results', dir, '--no-cache'], { timeoutMs: 120_000 });
  assert.equal(g.code, 0, g.stderr);
  checkInspectDir(validate, join(dir, 'mock'), { 'guard-eval-agentharm.json': join(dir, 'mock', 'guard', 'log-agentharm.jsonl') });
  const guard = readJson(inspectFile(join(dir, 'mock'), 'guard-eval-agentharm.json')) as J;
  assert.deepEqual(guard.plan.steps.map((s: J) => s.solver), ['base', 'safejudge', 'safeprompt', 'safekeep']);
  assert.equal(guard.eval.model, g.stderr.match(/× [\w,]+ on (\S+)/)?.[1]);

  const s3 = await runCli(['s3', 'eval', '--endpoint', s3up.url, '--endpoint-model', 'mock', '--bench', 'mixed', '--settings', 'base', '--configs', 'none,full',
    '--injecagent', s3Data().injecagent, '--agentharm', s3Data().agentharm, '--results', dir, '--no-cache'], { timeoutMs: 120_000 });
  assert.equal(s3.code, 0, s3.stderr);
  checkInspectDir(validate, join(dir, 'mock'), {
    'guard-eval-agentharm.json': join(dir, 'mock', 'guard', 'log-agentharm.jsonl'),
    's3-eval-mixed.json': join(dir, 'mock', 's3', 'log-mixed.jsonl'),
  });
});

test('steer and probe eval write schema-valid Inspect logs (planted model)', async (t) => {
  const validate = inspectLogValidator(t);
  const dir = mkdtempSync(join(tmpdir(), 'inspect-planted-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const env = { SAFEKEEP_CACHE: join(dir, '.cache'), SAFEKEEP_QUIET: '1' };
  const set = await loadPairSet('pairs');
  await writePlantedModel(join(dir, 'planted'), { lexiconPairs: set.pairs });
  const results = join(dir, 'results');
  const common = ['--model', join(dir, 'planted'), '--limit', '40', '--results', results];
  const st = await runCli(['steer', ...common, '--alphas', '0,4', '--layer', '2', '--max-new-tokens', '6', '--requests', 'harmful'], { env, timeoutMs: 300_000 });
  assert.equal(st.code, 0, st.stderr);
  const steering = join(results, 'planted', 'steering');
  const logs = readdirSync(steering).filter((f) => f.startsWith('log.') && f.endsWith('.jsonl')).sort();
  assert.equal(logs.length, 2, logs.join(', '));
  const expected = Object.fromEntries(logs.map((f) => [`steer-${f.slice('log.'.length, -'.jsonl'.length)}.json`, join(steering, f)]));
  checkInspectDir(validate, join(results, 'planted'), expected);
  const steer4 = readJson(inspectFile(join(results, 'planted'), Object.keys(expected).find((f) => f.includes('alpha4')) ?? assert.fail(Object.keys(expected).join(', ')))) as J;
  assert.equal(steer4.eval.task_args.alpha, 4);
  assert.equal(steer4.samples[0].messages[0].metadata.role, 'prompt');

  const tr = await runCli(['probe', 'train', ...common], { env, timeoutMs: 300_000 });
  assert.equal(tr.code, 0, tr.stderr);
  const ev = await runCli(['probe', 'eval', ...common, '--reps', '20', '--max-tokens', '8', '--compare-limit', '4', '--unparseable', 'safe'], { env, timeoutMs: 300_000 });
  assert.equal(ev.code, 0, ev.stderr);
  const probeLog = join(results, 'planted', 'inspect', 'probe-eval-compare.json');
  assert.ok(existsSync(probeLog));
  assert.match(ev.stdout, /inspect log: .*probe-eval-compare\.json/);
  const pl = readJson(probeLog) as J;
  if (validate) assert.deepEqual(validate(pl), []);
  assert.deepEqual(pl.plan.steps.map((s: J) => s.solver), ['base', 'safekeep', 'refusal-probe', 'safekeep+probe']);
  assert.equal(pl.samples.length, 4 * 8, '4 pairs → 8 requests × 4 methods');
  for (const s of pl.samples as J[]) assert.ok(s.messages.length >= 2 && 'outcome' in s.scores, s.id);
});
