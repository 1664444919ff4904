/**
 * Our per-sample log (log.ts) as an Inspect `EvalLog` (inspect_ai's JSON log format, `components.schemas.EvalLog` of
 * its `inspect-openapi.json`), so `inspect view` opens a run of `guard eval`, `s3 eval`, `steer` or `probe eval`.
 * One writer for every evaluation on the harness: the task, its solvers (guard methods, S³ configurations, steering
 * conditions) as the plan's steps, every sample with its messages, output, scores and token usage, the scores'
 * summary as the results, and the run's protocol in the metadata.
 *
 * What maps to what:
 * - sample: id = our `<solver> × <sample>`, epoch 1; `input` = the first call's messages; `messages` = every call's
 *   conversation in order (a call that continues the one before adds only its new messages; another conversation,
 *   e.g. a judge's, follows whole), each call's reply as an assistant message (metadata: call index, purpose, finish,
 *   cached, latency); `output` = the final output the scorers read; `scores` = our scores by scorer name (a null
 *   value, which Inspect cannot hold, is left out and counted unscored); `metadata` = solver, sample, the row.
 * - results: per scorer (and per solver when there are several) the mean of boolean / numeric values, or the
 *   fraction of each label for string values.
 * - a rendered prompt (role `prompt`: the generation task) is a user message whose metadata says so.
 * Inspect logs go into their own folder (`results/<name>/inspect/`): `inspect view --log-dir` lists every .json in
 * a folder as a log. The same log in Inspect's binary `.eval` form (a zip) goes to `results/<name>/inspect-eval/`.
 */
import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { writeFileAtomic } from '../util/atomic.ts';
import { zipArchive, type ZipEntry } from '../util/zip.ts';
import type { CallLog, EvalLog, SampleLog, Score } from './log.ts';

/** What the log needs that our log lines do not hold. */
export interface InspectRun {
  /** the model as the run names it (the backend's name) */
  model: string;
  /** ISO time the run started ('' when not known, which the format allows) */
  startedAt?: string;
  /** ISO time it ended (default: now) */
  completedAt?: string;
  /** the run's options (Inspect's task args) */
  args?: Record<string, unknown>;
  /** the data set's name */
  dataset?: string;
}

type Json = Record<string, unknown>;

let version: string | undefined;
/** package.json beside src/ or dist/ (both two folders above this file) */
function safekeepVersion(): string {
  if (version === undefined) {
    try {
      version = String((JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: unknown }).version ?? 'unknown');
    } catch {
      version = 'unknown';
    }
  }
  return version;
}

const STOP_REASONS: Record<string, string> = { stop: 'stop', eos: 'stop', length: 'max_tokens', max_tokens: 'max_tokens', tool_calls: 'tool_calls', content_filter: 'content_filter' };
const stopReason = (finish: string): string => STOP_REASONS[finish] ?? 'unknown';

const text = (v: unknown): string => (typeof v === 'string' ? v : v === undefined || v === null ? '' : JSON.stringify(v));

/** OpenAI wire tool calls → Inspect ToolCalls (arguments parsed; text that is not a JSON object kept as parse_error) */
function toolCalls(list: unknown): Json[] | undefined {
  if (!Array.isArray(list) || !list.length) return undefined;
  return list.map((c: { id?: unknown; function?: { name?: unknown; arguments?: unknown } }, i) => {
    const raw = c.function?.arguments;
    let args: unknown = raw;
    let error: string | undefined;
    if (typeof raw === 'string') {
      try { args = JSON.parse(raw); } catch { error = `arguments are not JSON: ${raw.slice(0, 200)}`; }
    }
    const ok = typeof args === 'object' && args !== null && !Array.isArray(args);
    const parseError = error ?? (ok ? undefined : `arguments are not a JSON object: ${text(args).slice(0, 200)}`);
    return { id: typeof c.id === 'string' ? c.id : `call_${i}`, function: text(c.function?.name), type: 'function', arguments: ok ? args : {}, ...(parseError ? { parse_error: parseError } : {}) };
  });
}

/** One of our chat messages as an Inspect ChatMessage. */
function message(m: Readonly<Record<string, unknown>>, meta: Json): Json {
  const content = text(m.content);
  switch (m.role) {
    case 'system': return { role: 'system', content, metadata: meta };
    case 'assistant': { const tc = toolCalls(m.tool_calls); return { role: 'assistant', content, ...(tc ? { tool_calls: tc } : {}), metadata: meta }; }
    case 'tool': return { role: 'tool', content, ...(typeof m.tool_call_id === 'string' ? { tool_call_id: m.tool_call_id } : {}), ...(typeof m.name === 'string' ? { function: m.name } : {}), metadata: meta };
    case 'user': return { role: 'user', content, metadata: meta };
    // the generation task's rendered prompt, or a role Inspect has no name for
    default: return { role: 'user', content, metadata: { ...meta, role: text(m.role), ...(m.role === 'prompt' ? { rendered: 'the prompt as the model saw it, template applied' } : {}) } };
  }
}

const sameMessage = (a: Readonly<Record<string, unknown>>, b: Readonly<Record<string, unknown>>) => a.role === b.role && text(a.content) === text(b.content);

/** Every call's conversation in order, each reply after it (see the file comment). */
function conversation(calls: readonly CallLog[], model: string): Json[] {
  const out: Json[] = [];
  let prev: ReadonlyArray<Readonly<Record<string, unknown>>> = [];
  calls.forEach((c, i) => {
    const meta = { call: i, purpose: c.purpose };
    const continues = prev.length > 0 && prev.length <= c.messages.length && prev.every((m, k) => sameMessage(m, c.messages[k]!));
    for (const m of c.messages.slice(continues ? prev.length : 0)) out.push(message(m, meta));
    const tc = toolCalls(c.toolCalls);
    out.push({
      role: 'assistant', content: c.content, source: 'generate', model, ...(tc ? { tool_calls: tc } : {}),
      metadata: { ...meta, finish: c.finish, cached: c.cached, latency_ms: c.latencyMs, ...(c.prefix !== undefined ? { prefix: c.prefix } : {}) },
    });
    prev = [...c.messages, { role: 'assistant', content: c.content }];
  });
  return out;
}

const usage = (input: number, output: number) => ({ input_tokens: input, output_tokens: output, total_tokens: input + output });

/** Our scores by scorer name (a second score of one scorer gets `#2`); null values are left out. */
function scores(list: readonly Score[]): Record<string, Json> {
  const out: Record<string, Json> = {};
  for (const s of list) {
    if (s.value === null) continue;
    let key = s.scorer;
    for (let n = 2; key in out; n++) key = `${s.scorer}#${n}`;
    out[key] = { value: s.value, ...(s.explanation !== undefined ? { explanation: s.explanation } : {}), history: [] };
  }
  return out;
}

function sample(s: SampleLog, model: string): Json {
  const last = s.calls.at(-1);
  const input = s.calls.length ? s.calls[0]!.messages.map((m) => message(m, { call: 0, purpose: s.calls[0]!.purpose })) : s.sample;
  return {
    id: s.id, epoch: 1, input, target: '',
    messages: conversation(s.calls, model),
    output: {
      model,
      choices: [{ message: { role: 'assistant', content: s.output, source: 'generate', model }, stop_reason: stopReason(last?.finish ?? '') }],
      completion: s.output,
      usage: usage(s.tokens.prompt, s.tokens.completion),
      time: s.latencyMs / 1000,
    },
    scores: scores(s.scores),
    metadata: { solver: s.solver, sample: s.sample, row: s.row },
    store: {}, events: [], attachments: {},
    model_usage: { [model]: usage(s.tokens.prompt, s.tokens.completion) },
    role_usage: {},
    total_time: s.latencyMs / 1000,
    working_time: s.latencyMs / 1000,
  };
}

/** The results: per scorer (× solver when several), means of booleans / numbers, label fractions of strings. */
function results(samples: readonly SampleLog[]): Json {
  const solvers = [...new Set(samples.map((s) => s.solver))];
  const scorers = [...new Set(samples.flatMap((s) => s.scores.map((x) => x.scorer)))];
  const out: Json[] = [];
  for (const scorer of scorers) {
    for (const solver of solvers.length > 1 ? solvers : [undefined]) {
      const mine = samples.filter((s) => solver === undefined || s.solver === solver);
      const values = mine.flatMap((s) => s.scores.filter((x) => x.scorer === scorer).map((x) => x.value));
      const scored = values.filter((v) => v !== null);
      const metrics: Record<string, Json> = {};
      const numeric = scored.filter((v) => typeof v === 'number' || typeof v === 'boolean').map(Number);
      if (numeric.length) metrics.mean = { name: 'mean', value: numeric.reduce((a, b) => a + b, 0) / numeric.length, params: {} };
      const labels = scored.filter((v): v is string => typeof v === 'string');
      for (const l of [...new Set(labels)].sort()) metrics[l] = { name: l, value: labels.filter((x) => x === l).length / labels.length, params: {}, metadata: { meaning: `fraction of scored samples labelled ${l}` } };
      out.push({
        name: solver === undefined ? scorer : `${scorer} · ${solver}`, scorer, params: {}, metrics,
        scored_samples: scored.length, unscored_samples: values.length - scored.length,
        ...(solver !== undefined ? { metadata: { solver } } : {}),
      });
    }
  }
  return { total_samples: samples.length, completed_samples: samples.length, scores: out };
}

const shortId = (...parts: string[]) => createHash('sha256').update(parts.join('\0')).digest('base64url').slice(0, 22);

/** The Inspect EvalLog of one of our logs. */
export function inspectEvalLog(log: EvalLog, run: InspectRun): Json {
  const completed = run.completedAt ?? new Date().toISOString();
  const solvers = [...new Set(log.samples.map((s) => s.solver))];
  const sampleIds = [...new Set(log.samples.map((s) => s.sample))];
  const tokens = log.samples.reduce((a, s) => [a[0]! + s.tokens.prompt, a[1]! + s.tokens.completion], [0, 0]);
  return {
    version: 2,
    status: 'success',
    eval: {
      eval_id: shortId('eval', log.header.task, run.model, completed),
      run_id: shortId('run', log.header.task, run.model, completed),
      created: completed,
      task: log.header.task,
      task_id: shortId('task', log.header.task),
      task_version: 0,
      task_attribs: {},
      task_args: run.args ?? {},
      task_args_passed: run.args ?? {},
      solver: solvers.length === 1 ? solvers[0] : null,
      dataset: { name: run.dataset ?? log.header.task.split('/').at(-1) ?? null, samples: sampleIds.length, sample_ids: sampleIds },
      model: run.model,
      model_generate_config: {},
      model_args: {},
      config: { epochs: 1 },
      packages: { safekeep: safekeepVersion() },
      metadata: { producer: 'safekeep', protocol: log.header.protocol, context: log.header.context },
    },
    plan: { name: 'plan', steps: solvers.map((s) => ({ solver: s, params: {}, params_passed: {} })), config: {} },
    results: results(log.samples),
    stats: {
      started_at: run.startedAt ?? '',
      completed_at: completed,
      model_usage: { [run.model]: usage(tokens[0]!, tokens[1]!) },
      role_usage: {},
      connection_limit_history: [],
    },
    invalidated: false,
    tags: [],
    metadata: {},
    samples: log.samples.map((s) => sample(s, run.model)),
  };
}

/** `results/<name>/inspect/`: the folder `inspect view --log-dir` opens (the JSON logs). */
export const inspectDir = (resultsDir: string): string => join(resultsDir, 'inspect');
/** `results/<name>/inspect-eval/`: the same logs in Inspect's binary `.eval` form (a folder of its own, so a viewer of
 * inspect/ does not list each run twice). */
export const inspectEvalDir = (resultsDir: string): string => join(resultsDir, 'inspect-eval');

/** File name of a log: its name ('/' and other separators → '-'; a rerun replaces its log). */
export const inspectLogName = (name: string, ext = '.json'): string => `${name.replace(/[^\w.=+-]+/g, '-')}${ext}`;

/**
 * An Inspect log as its `.eval` archive, laid out as inspect_ai's eval recorder writes one: `_journal/start.json`
 * (version, eval, plan), `samples/<id>_epoch_<epoch>.json`, the sample summaries (`_journal/summaries/1.json` and
 * `summaries.json`) and `header.json` (the log without its samples).
 */
export function inspectEvalArchive(log: Json): Uint8Array {
  const enc = new TextEncoder();
  const json = (name: string, v: unknown): ZipEntry => ({ name, data: enc.encode(JSON.stringify(v)) });
  const samples = (log.samples ?? []) as Json[];
  const summaries = samples.map((s) => ({
    id: s.id, epoch: s.epoch, input: s.input, target: s.target, scores: s.scores, metadata: {},
    model_usage: s.model_usage, role_usage: s.role_usage, completed: true, total_time: s.total_time, working_time: s.working_time,
    message_count: (s.messages as unknown[]).length,
  }));
  const { samples: _drop, ...header } = log;
  return zipArchive([
    json('_journal/start.json', { version: log.version, eval: log.eval, plan: log.plan }),
    ...samples.map((s) => json(`samples/${String(s.id)}_epoch_${String(s.epoch)}.json`, s)),
    json('_journal/summaries/1.json', summaries),
    json('summaries.json', summaries),
    json('header.json', header),
  ]);
}

/**
 * Write the Inspect log of `log` as `results/<name>/inspect/<name>.json` and `results/<name>/inspect-eval/<name>.eval`
 * (default name: the task's; runs that log one task several times, as steer's conditions, name each); returns the
 * JSON log's path.
 */
export function writeInspectLog(resultsDir: string, log: EvalLog, run: InspectRun, name = log.header.task): string {
  const inspect = inspectEvalLog(log, run);
  const path = join(inspectDir(resultsDir), inspectLogName(name));
  writeFileAtomic(path, JSON.stringify(inspect) + '\n');
  writeFileAtomic(join(inspectEvalDir(resultsDir), inspectLogName(name, '.eval')), inspectEvalArchive(inspect));
  return path;
}
