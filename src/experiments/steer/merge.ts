/**
 * `safekeep merge` for a sharded steering sweep: the generation files and logs one process would write, assembled
 * from the shards' chunks, then Table 3 and the report.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { SteeringResults, SteeringRow } from '../../analysis/results.ts';
import { writeReport } from '../../report/write-report.ts';
import { writeFileAtomic } from '../../util/atomic.ts';
import { SafekeepError } from '../../util/errors.ts';
import type { SampleLog } from '../../harness/log.ts';
import { conditionName, type SteerCondition } from './conditions.ts';
import { GEN_BATCH, generationsFile, writeConditionLog, type SteerGeneration } from './generate.ts';
import { chunkFile, samplesChunkFile, type SteerMergeOptions } from './shard.ts';
import { steeringRow, writeTable3 } from './table3.ts';

/**
 * After every steer shard is done: the generation files one process writes (same key header, same rows in pair
 * order), Table 3 and the report. `shardDirs` = the complete shard set's folders; each batch must be in exactly one.
 */
export async function finishSteer(resultsDir: string, m: SteerMergeOptions, shardDirs: ReadonlyArray<{ name: string; dir: string }>): Promise<{ outDir: string; report: string; sweeps: SteeringResults[] }> {
  const outDir = join(resultsDir, 'steering');
  mkdirSync(outDir, { recursive: true });
  const sweeps: SteeringResults[] = [];
  for (const kind of m.requests) {
    const rows: SteeringRow[] = [];
    const conditions: SteerCondition[] = [...m.alphas.map((alpha) => ({ alpha })), ...(m.interventionSets ?? []).map((s) => ({ alpha: 0, set: { ...s, interventions: [] } }))];
    for (const [a, cond] of conditions.entries()) {
      const key = m.keys[`${kind}/${a}`]!;
      const gens: SteerGeneration[] = [];
      const samples: SampleLog<SteerGeneration>[] = [];
      for (let s = 0; s < m.pairs; s += GEN_BATCH) {
        const have = shardDirs.filter((d) => existsSync(join(d.dir, chunkFile(kind, a, s))));
        if (have.length !== 1) {
          throw new SafekeepError(`steer ${kind} ${conditionName(cond)} pairs ${s}..${Math.min(s + GEN_BATCH, m.pairs) - 1}: `
            + (have.length ? `duplicate in ${have.map((d) => d.name).join(' and ')}` : 'in no shard; rerun the shard that owns it'));
        }
        const lines = readFileSync(join(have[0]!.dir, chunkFile(kind, a, s)), 'utf8').trim().split('\n');
        if ((JSON.parse(lines[0]!) as { key?: string }).key !== key) throw new SafekeepError(`${join(have[0]!.dir, chunkFile(kind, a, s))}: generated with other inputs; delete it and rerun ${have[0]!.name}`);
        gens.push(...lines.slice(1).map((l) => JSON.parse(l) as SteerGeneration));
        const sf = samplesChunkFile(join(have[0]!.dir, chunkFile(kind, a, s)));
        if (existsSync(sf)) samples.push(...readFileSync(sf, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as SampleLog<SteerGeneration>));
      }
      const file = join(outDir, generationsFile(kind, cond, m.positions));
      writeFileAtomic(file, [JSON.stringify({ key }), ...gens.map((g) => JSON.stringify(g))].join('\n') + '\n');
      writeConditionLog(file, key, kind, cond, samples);
      rows.push(steeringRow(gens, cond, m.meanNorm));
    }
    sweeps.push({ layer: m.layer, direction: m.directionName, requests: kind, positions: m.positions, rows, ...(m.sampling ? { sampling: m.sampling } : {}) });
  }
  const res = writeTable3(m.table, outDir, sweeps, m.protocol);
  const files = await writeReport(resultsDir, res);
  return { outDir, report: files.html, sweeps };
}
