/**
 * `safekeep probe eval --model M [--probe FILE[,FILE]] [--configs agent.schema,agent.flattened] [--reps 1000]
 *    [--compare-kind mean-diff|logistic] [--no-compare] [--compare-limit N] [--max-tokens 256] [--judge-max-tokens 8]
 *    [--unparseable unsafe|safe] [--thinking on|off] [--data ..] [--limit N] [--split-seed N] [--results DIR] [--dtype ..]
 *    [--device ..] [--threads N] [--template FILE]`
 * Probes (default: every probe in results/<model>/probe/) scored on the EVALUATION split: AUROC with paired-bootstrap
 * intervals per configuration next to the chatbot refusal direction, and the rates at each probe's threshold. Then
 * (unless --no-compare) base, SafeKeep, refusal-probe and both on the evaluation pairs as agent requests through the
 * local engine, Refusal/Acc with Wilson intervals and per-request latency. Tables go into results/<model>/ (tables/,
 * results.json, report.html); every guarded output to results/<model>/probe/outputs-compare.jsonl.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { numberValue, parseArgs, type FlagTable } from '../args.ts';
import { RUN_FLAG_DEFS, runContextOptions } from '../run-flags.ts';
import { openContext, parseCondition } from '../../experiments/extract.ts';
import { readProbe, type Probe } from '../../data/probe-file.ts';
import { evaluateProbesIn, writeProbeSection } from '../../experiments/probe/evaluate.ts';
import { LocalBackend } from '../../guard/backends/local.ts';
import { compareGuards } from '../../guard/probe-compare.ts';
import { writeFileAtomic } from '../../util/atomic.ts';
import { SafekeepError } from '../../util/errors.ts';
import type { ProbeSection } from '../../analysis/results.ts';

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
  const ctx = await openContext(await runContextOptions(a));
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
      const backend = new LocalBackend(ctx.engine, ctx.tok, { templateKwargs: ctx.builder.templateKwargs });
      const limit = a.values.has('compare-limit') ? numberValue(a, 'compare-limit') : Infinity;
      let last = 0;
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
