/**
 * `safekeep slurm status RESULTS_DIR`: shard progress read from the results folder alone (shard.json of every
 * shard, merged.json after a merge, slurm/jobs.json for the job ids) — no accounting database, no scheduler query,
 * so it works the same for Slurm, Kubernetes or shards started by hand.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { listShards, shardCommands, shardsRoot } from '../util/shard-run.ts';

export interface SubmittedJob {
  command: string;
  stage: string;
  jobId: string;
  array?: string;
  dependency?: string;
  script: string;
  submittedAt: string;
}

export const jobsFile = (resultsDir: string): string => join(resultsDir, 'slurm', 'jobs.json');
export const mergedFile = (resultsDir: string, command: string): string => join(shardsRoot(resultsDir, command), 'merged.json');

export function readJobs(resultsDir: string): SubmittedJob[] {
  const p = jobsFile(resultsDir);
  if (!existsSync(p)) return [];
  try { return JSON.parse(readFileSync(p, 'utf8')) as SubmittedJob[]; } catch { return []; }
}

const pct = (a: number, b: number): string => (b ? `${((100 * a) / b).toFixed(0)}%` : '-');

/** Human-readable status lines of every sharded command in `resultsDir`. */
export function statusLines(resultsDir: string): string[] {
  const lines: string[] = [];
  const commands = shardCommands(resultsDir);
  if (commands.length === 0) lines.push(`${resultsDir}: no shards yet`);
  for (const command of commands) {
    const shards = listShards(resultsDir, command);
    const counts = [...new Set(shards.flatMap((s) => (s.record ? [s.record.shard.count] : [])))];
    const n = counts.length === 1 ? counts[0]! : null;
    const recs = shards.flatMap((s) => (s.record ? [s.record] : []));
    const done = recs.filter((r) => r.state === 'done').length;
    const tok = recs.reduce((s, r) => s + r.tokens, 0);
    const tokDone = recs.reduce((s, r) => s + r.doneTokens, 0);
    const notStarted = n === null ? [] : Array.from({ length: n }, (_, i) => i).filter((i) => !recs.some((r) => r.shard.index === i));
    const merged = existsSync(mergedFile(resultsDir, command)) ? (JSON.parse(readFileSync(mergedFile(resultsDir, command), 'utf8')) as { at: string; seconds: number }) : null;
    lines.push(`${command}${n !== null ? ` (n=${n})` : counts.length > 1 ? ` (MIXED partitions n=${counts.join(',')}: delete the stale shards)` : ''}: `
      + `${done} done, ${recs.length - done} running or failed, ${notStarted.length} not started; ${pct(tokDone, tok)} of started shards' tokens`
      + (merged ? `; merged ${merged.at} (${merged.seconds.toFixed(2)} s)` : ''));
    for (const s of shards) {
      const r = s.record;
      if (!r) { lines.push(`  ${s.name.padEnd(16)} ${s.error}`); continue; }
      const ageS = (Date.now() - Date.parse(r.updatedAt)) / 1000;
      lines.push(`  ${`shard ${r.shard.index}/${r.shard.count}`.padEnd(16)} ${r.state.padEnd(8)} ${`${r.doneItems}/${r.items} batches`.padEnd(18)} `
        + `${`${r.doneTokens}/${r.tokens} tokens`.padEnd(24)} ${r.state === 'done' ? `${(r.seconds ?? 0).toFixed(1)} s` : `updated ${ageS.toFixed(0)} s ago`} on ${r.host}`);
    }
    if (notStarted.length) lines.push(`  not started: ${notStarted.map((i) => `${i}/${n}`).join(', ')} (resubmit with --only ${notStarted.join(',')})`);
  }
  const jobs = readJobs(resultsDir);
  if (jobs.length) {
    lines.push('jobs:');
    for (const j of jobs) {
      lines.push(`  ${j.jobId.padEnd(10)} ${j.command} ${j.stage}${j.array ? ` array ${j.array}` : ''}${j.dependency ? ` (${j.dependency})` : ''}  ${j.submittedAt}`);
    }
  }
  return lines;
}
