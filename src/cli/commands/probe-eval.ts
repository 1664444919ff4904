/**
 * `safekeep probe eval --model M [--probe FILE[,FILE]] [--configs agent.schema,agent.flattened] [--reps 1000]
 *    [--compare-kind mean-diff|logistic] [--no-compare] [--compare-limit N] [--max-tokens 256] [--judge-max-tokens 8]
 *    [--unparseable unsafe|safe] [--thinking on|off] [--data ..] [--limit N] [--split-seed N] [--results DIR] [--dtype ..]
 *    [--device ..] [--threads N] [--template FILE]`
 * Probes (default: every probe in results/<model>/probe/) scored on the EVALUATION split: AUROC with paired-bootstrap
 * intervals per configuration next to the chatbot refusal direction, and the rates at each probe's threshold. Then
 * (unless --no-compare) base, SafeKeep, refusal-probe and both on the evaluation pairs as agent requests through the
 * local engine, Refusal/Acc with Wilson intervals and per-request latency. Tables go into results/<model>/ (tables/,
 * results.json, report.html); every guarded output to results/<model>/probe/outputs-compare.jsonl, and the comparison
 * as an Inspect log (results/<model>/inspect/probe-eval-compare.json).
 *
 * `probe eval --lodo [--lodo-sets pairs,agentharm,injecagent] [--agentharm DIR] [--injecagent DIR] [--layer N]`:
 * leave-one-dataset-out instead (src/experiments/probe/lodo.ts) — probes trained on the other data sets (each, and
 * their union) scored on each data set's test half beside the in-distribution probe; AUROC and TPR at 1 % FPR with
 * bootstrap intervals over groups, to results/<model>/tables/probe-lodo.{md,json} and report.html. --limit caps the
 * pairs / cases of each data set.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { numberValue, parseArgs, type FlagTable } from '../args.ts';
import { RUN_FLAG_DEFS, runContextOptions } from '../run-flags.ts';
import { openContext, parseCondition } from '../../experiments/extract.ts';
import { readProbe, type Probe } from '../../data/probe-file.ts';
import { evaluateProbesIn, writeLodoSection, writeProbeSection } from '../../experiments/probe/evaluate.ts';
import { injecAgentRows, LODO_SETS, lodoMarkdown, pairRows, runLodo, type LodoSet } from '../../experiments/probe/lodo.ts';
import { loadPairSet } from '../../data/load.ts';
import { agentHarmPairs, readAgentHarm, type AgentHarmSplit } from '../../data/agentharm.ts';
import { readInjecAgentCases } from '../../data/injecagent.ts';
import { locateDataset, type DataDirs } from '../../data/locate.ts';
import type { ToolSpec } from '../../data/types.ts';
import type { ChatMessage } from '../../prompts/tokenizer.ts';
import { localBackend } from '../backend.ts';
import { compareGuards } from '../../eval/table4/probe-compare.ts';
import { writeFileAtomic } from '../../util/atomic.ts';
import { writeInspectLog } from '../../harness/inspect-log.ts';
import { SafekeepError } from '../../util/errors.ts';
import type { LodoSection, ProbeSection } from '../../analysis/results.ts';

export const summary = 'score refusal probes on the evaluation split (AUROC vs chatbot direction) and compare guards';

const pct = (p: number) => (Number.isFinite(p) ? `${(100 * p).toFixed(1)} %` : '–');

export const flags: FlagTable = {
  usage: 'probe eval --model M [--probe FILE[,FILE]] [--configs agent.schema,agent.flattened] [flags]',
  flags: [
    ...RUN_FLAG_DEFS,
    { name: 'probe', value: 'FILE[,FILE]', default: 'every probe in results/<model>/probe/', help: 'probe files from probe train' },
    { name: 'configs', value: 'LIST', default: 'agent.schema,agent.flattened', help: 'conditions whose evaluation split is scored (plus each probe\'s own)' },
    { name: 'reps', value: 'N', default: '1000', help: 'paired bootstrap resamples' },
    { name: 'compare-kind', value: 'mean-diff|logistic', default: 'mean-diff', help: 'the probe used in the guard comparison' },
    { name: 'compare-limit', value: 'N', help: 'first N evaluation pairs in the guard comparison' },
    { name: 'no-compare', boolean: true, help: 'skip the guard comparison (base, SafeKeep, refusal-probe, both)' },
    { name: 'max-tokens', value: 'N', default: '256', help: 'agent answer budget in the comparison' },
    { name: 'judge-max-tokens', value: 'N', default: '8', help: 'SafeKeep judge budget in the comparison' },
    { name: 'unparseable', value: 'unsafe|safe', default: 'unsafe', help: 'a judge answer that is neither YES nor NO counts as' },
    { name: 'lodo', boolean: true, help: 'leave-one-dataset-out: probes trained on other data sets scored on each held-out one (instead of the evaluation above)' },
    { name: 'lodo-sets', value: 'LIST', default: 'pairs,agentharm,injecagent', help: '--lodo: data sets (at least two)' },
    { name: 'agentharm', value: 'DIR', default: 'the located agentharm copy', help: '--lodo: AgentHarm folder' },
    { name: 'injecagent', value: 'DIR', default: 'the located injecagent copy', help: '--lodo: InjecAgent folder (base setting)' },
    { name: 'layer', value: 'N', default: 'CV per training source', help: '--lodo: one hidden index ℓ for every probe' },
  ],
  example: 'probe eval --model models/planted --limit 40 --max-tokens 12',
};

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, flags);
  const configs = (a.values.get('configs') ?? 'agent.schema,agent.flattened').split(',').map((s) => parseCondition(s.trim()));
  const unparseable = a.values.get('unparseable') ?? 'unsafe';
  if (unparseable !== 'unsafe' && unparseable !== 'safe') throw new SafekeepError(`--unparseable must be unsafe or safe, got '${unparseable}'`);
  const reps = numberValue(a, 'reps', 1000);
  if (!Number.isInteger(reps) || reps < 10) throw new SafekeepError(`--reps must be an integer ≥ 10, got ${reps}`);
  const lodoOnly = ['lodo-sets', 'agentharm', 'injecagent', 'layer'].filter((f) => a.values.has(f));
  if (!a.booleans.has('lodo') && lodoOnly.length) throw new SafekeepError(`--${lodoOnly[0]} needs --lodo`);
  const contextOptions = await runContextOptions(a);
  const ctx = await openContext(contextOptions);
  if (a.booleans.has('lodo')) {
    try {
      return await runLodoCommand(a, ctx, contextOptions.dataDirs ?? {}, reps);
    } finally {
      await ctx.engine.dispose();
    }
  }
  try {
    const probeDir = join(ctx.cacheDir, '..', 'probe');
    const files = a.values.get('probe')?.split(',')
      ?? (existsSync(probeDir) ? readdirSync(probeDir).filter((f) => f.endsWith('.json') && !f.startsWith('outputs')).sort().map((f) => join(probeDir, f)) : []);
    if (files.length === 0) throw new SafekeepError(`no probes in ${probeDir}: run safekeep probe train --model ... first, or pass --probe FILE`);
    const probes: Probe[] = files.map(readProbe);
    for (const p of probes) {
      // the evaluation split must be the one the probe did not see
      const s = p.provenance.split;
      if (p.provenance.dataset.hash === ctx.set.hash && (s.seed !== ctx.split.seed || s.extractionPairs !== ctx.split.extraction.length)) {
        throw new SafekeepError(`${p.path}: trained on another split of this data set (seed ${s.seed}, ${s.extractionPairs} extraction pairs; now seed ${ctx.split.seed}, ${ctx.split.extraction.length}); use the same --limit and --split-seed`);
      }
    }
    const section: ProbeSection = await evaluateProbesIn(ctx, { probes, conditions: configs, reps });
    for (const r of section.auroc) {
      process.stdout.write(`${r.probe.padEnd(9)} (${r.trainedOn}, ℓ=${r.layer}) on ${r.config}: AUROC ${r.auroc.auroc.toFixed(3)} [${r.auroc.lo.toFixed(3)}, ${r.auroc.hi.toFixed(3)}] vs chatbot direction ${r.chatbot.auroc.toFixed(3)} (n=${r.auroc.n})\n`);
    }
    for (const r of section.rates) {
      process.stdout.write(`${r.probe.padEnd(9)} at threshold on ${r.config}: benign flagged ${pct(r.benignFlagged.p)} (${r.benignFlagged.k}/${r.benignFlagged.n}), harmful flagged ${pct(r.harmfulFlagged.p)} (${r.harmfulFlagged.k}/${r.harmfulFlagged.n})\n`);
    }
    if (!a.booleans.has('no-compare')) {
      const kind = a.values.get('compare-kind') ?? 'mean-diff';
      const probe = probes.find((p) => p.kind === kind && p.provenance.condition === 'agent.schema') ?? probes.find((p) => p.kind === kind);
      if (!probe) throw new SafekeepError(`--compare-kind ${kind}: no such probe among ${probes.map((p) => p.path).join(', ')}`);
      // the agent requests are rendered exactly as the probe's training condition (thinking resolved by --thinking)
      const backend = localBackend(a, ctx.engine, ctx.tok, ctx.builder.templateKwargs);
      const limit = a.values.has('compare-limit') ? numberValue(a, 'compare-limit') : Infinity;
      let last = 0;
      const startedAt = new Date().toISOString();
      const cmp = await compareGuards({
        set: ctx.set, split: ctx.split, builder: ctx.builder, backend, probe, limit,
        maxTokens: numberValue(a, 'max-tokens', 256), judgeMaxTokens: numberValue(a, 'judge-max-tokens', 8),
        onUnparseable: unparseable,
        onProgress: (done, total) => {
          const now = performance.now();
          if (done === total || now - last > 2000) { last = now; process.stderr.write(`probe eval: guard comparison ${done}/${total}\n`); }
        },
      });
      section.comparison = cmp.comparison;
      const inspectLog = writeInspectLog(join(ctx.cacheDir, '..'), {
        header: { format: 'safekeep-log', task: 'probe-eval/compare', protocol: { probe: cmp.comparison.probe, bench: cmp.comparison.bench, notes: cmp.comparison.notes }, context: { probeFile: probe.path ?? null } },
        samples: cmp.samples,
      }, { model: backend.name, startedAt, dataset: ctx.set.name, args: { compareKind: kind, limit: Number.isFinite(limit) ? limit : null, maxTokens: numberValue(a, 'max-tokens', 256), judgeMaxTokens: numberValue(a, 'judge-max-tokens', 8), unparseable } });
      process.stdout.write(`inspect log: ${inspectLog}\n`);
      writeFileAtomic(join(probeDir, 'outputs-compare.jsonl'), cmp.rows.map(({ outcome: _o, ...r }) => JSON.stringify(r)).join('\n') + '\n');
      for (const n of cmp.comparison.notes.filter((x) => x.startsWith('probe-'))) process.stdout.write(`${n}\n`);
      for (const r of cmp.comparison.rows) {
        process.stdout.write(`${r.method.padEnd(15)} refusal ${pct(r.refusal.p)} (${r.refusal.k}/${r.refusal.n})  acc ${pct(r.acc.p)} (${r.acc.k}/${r.acc.n})  flagged ${r.flagged}/${r.n}  agent ${r.agentMs.toFixed(1)} ms  guard +${r.guardMs.toFixed(2)} ms  judge calls ${(r.judgeCalls ?? Number.NaN).toFixed(2)}/request  guard tokens ${(r.guardTokens ?? Number.NaN).toFixed(1)}/request  added p50/p95 ${(r.addedMsP50 ?? Number.NaN).toFixed(1)}/${(r.addedMsP95 ?? Number.NaN).toFixed(1)} ms\n`);
      }
    }
    const { files: report } = await writeProbeSection(ctx, section);
    process.stdout.write(`report: ${report.html}\n`);
  } finally {
    await ctx.engine.dispose();
  }
  return 0;
}

const AGENTHARM_SPLIT_NAMES: readonly AgentHarmSplit[] = ['test_public', 'validation'];

/** `--lodo`: the data sets rendered in the agent.schema condition, the held-out table, its files and the report. */
async function runLodoCommand(a: ReturnType<typeof parseArgs>, ctx: Awaited<ReturnType<typeof openContext>>, dirs: DataDirs, reps: number): Promise<number> {
  const names = (a.values.get('lodo-sets') ?? LODO_SETS.join(',')).split(',').map((x) => x.trim()).filter(Boolean);
  for (const n of names) if (!(LODO_SETS as readonly string[]).includes(n)) throw new SafekeepError(`--lodo-sets: unknown '${n}' (known: ${LODO_SETS.join(', ')})`);
  if (new Set(names).size < 2) throw new SafekeepError('--lodo-sets: leave-one-dataset-out needs at least two data sets');
  const limit = a.values.has('limit') ? numberValue(a, 'limit') : Infinity;
  const layer = a.values.has('layer') ? numberValue(a, 'layer') : undefined;
  if (layer !== undefined && !Number.isInteger(layer)) throw new SafekeepError(`--layer must be an integer, got ${layer}`);
  const render = (messages: ChatMessage[], tools: readonly ToolSpec[]) => ctx.tok.encode(ctx.tok.render(messages, { tools: [...tools], addGenerationPrompt: true, templateKwargs: ctx.builder.templateKwargs }));
  const sets: LodoSet[] = [];
  for (const n of [...new Set(names)]) {
    if (n === 'pairs') sets.push(pairRows('pairs', await loadPairSet('pairs', dirs), ctx.builder, limit));
    else if (n === 'agentharm') {
      // whichever of AgentHarm's splits the copy holds (test_public, validation)
      const dir = a.values.get('agentharm') ?? locateDataset('agentharm', dirs);
      const splits = AGENTHARM_SPLIT_NAMES.filter((x) => existsSync(join(dir, 'dataset', `harmful_behaviors_${x}.json`)));
      if (splits.length === 0) throw new SafekeepError(`${dir}: no AgentHarm behaviors (dataset/harmful_behaviors_<split>.json)`);
      sets.push(pairRows('agentharm', { pairs: agentHarmPairs(readAgentHarm(dir, splits)) }, ctx.builder, limit));
    }
    else sets.push(injecAgentRows(readInjecAgentCases(a.values.get('injecagent') ?? locateDataset('injecagent', dirs), 'base'), ctx.builder, render, limit));
  }
  const r = await runLodo(ctx.engine, sets, { reps, ...(layer !== undefined ? { layer } : {}) });
  const planted = existsSync(join(ctx.modelDir, 'PLANTED.json'));
  const model = planted ? 'the planted synthetic model (weights built to carry a known refusal direction; not a language model: its numbers test the pipeline, not a finding)' : `${ctx.modelName} (this run's checkpoint)`;
  const { scores: _s, ...table } = r;
  const section: LodoSection = { ...table, model };
  const md = lodoMarkdown(table, ctx.modelName) + `\nModel: ${model}.\n`;
  const tables = join(ctx.cacheDir, '..', 'tables');
  writeFileAtomic(join(tables, 'probe-lodo.md'), md);
  writeFileAtomic(join(tables, 'probe-lodo.json'), JSON.stringify(section, null, 2) + '\n');
  process.stdout.write(md);
  const { files } = await writeLodoSection(ctx, section);
  process.stdout.write(`tables: ${join(tables, 'probe-lodo.md')}\nreport: ${files.html}\n`);
  return 0;
}
