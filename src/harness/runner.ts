/**
 * The one evaluation runner (inspect_ai's solver/scorer split, LlamaFirewall's single driver): a task is its work
 * items + a solver (the system under test on one item: a guard method, an S³ configuration, a steering condition) +
 * the scorers that turn the solver's result into log lines. The runner owns what every evaluation needs alike:
 *
 * - concurrency: `concurrency` items in flight at once, so a backend that batches concurrent calls (the local
 *   engine's batcher, an endpoint with continuous batching) gets them; results come back in item order;
 * - logging: each item's model calls are recorded through a per-item `SampleRecorder`, and the item becomes its
 *   log lines (src/harness/log.ts);
 * - resume: with `resume`, every finished item is appended to `<file>.partial` under the run's key; a rerun with the
 *   same key skips the items already there (an interrupted local run loses at most the items in flight);
 * - progress: items, rate and ETA on stderr through `onProgress`.
 * Response caching stays in the backends (endpoint answers on disk, keyed by request); sharding and merge are the
 * registry's (src/cli/stage-registry.ts), which runs a shard's items through this same runner.
 */
import { appendFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { Limiter } from '../util/limit.ts';
import type { CallLog, SampleLog } from './log.ts';
import { SampleRecorder } from './record.ts';

export interface Task<I, R, S = R> {
  /** e.g. guard-eval/agentharm */
  name: string;
  /** the item's key, unique in the task (`<solver> × <sample>`) */
  key(item: I): string;
  /** the system under test on one item; its model calls go through `rec.view(backend)` */
  solve(item: I, rec: SampleRecorder): Promise<R>;
  /** the log lines of a solved item (one per sample; a generation batch holds several) */
  samples(item: I, result: R, calls: CallLog[]): SampleLog<S>[];
}

export interface RunOptions {
  /** items in flight at once (default 1) */
  concurrency?: number;
  /** a limit shared with other runs (several conditions' runs in flight together under one bound); wins over `concurrency` */
  limiter?: Limiter;
  onProgress?: (done: number, total: number) => void;
  /** items finished by an earlier, interrupted run with the same key are not run again */
  resume?: { file: string; key: string };
}

export interface TaskRun<R, S = R> {
  results: R[];
  samples: SampleLog<S>[];
  /** items taken from the partial file of an earlier run */
  resumed: number;
}

interface PartialLine<R, S> { id: string; result: R; samples: SampleLog<S>[] }

function readPartial<R, S>(file: string, key: string): Map<string, PartialLine<R, S>> {
  const done = new Map<string, PartialLine<R, S>>();
  if (!existsSync(file)) return done;
  const lines = readFileSync(file, 'utf8').split('\n');
  try {
    if ((JSON.parse(lines[0] ?? '') as { key?: string }).key !== key) return done;
  } catch {
    return done;
  }
  // a line cut off by the interruption is the last one: it and anything after are dropped
  for (const l of lines.slice(1)) {
    if (!l) continue;
    try {
      const p = JSON.parse(l) as PartialLine<R, S>;
      done.set(p.id, p);
    } catch {
      break;
    }
  }
  return done;
}

export async function runTask<I, R, S = R>(task: Task<I, R, S>, items: readonly I[], opts: RunOptions = {}): Promise<TaskRun<R, S>> {
  const limiter = opts.limiter ?? new Limiter(opts.concurrency ?? 1);
  const total = items.length;
  const resume = opts.resume;
  const before = resume ? readPartial<R, S>(resume.file, resume.key) : new Map<string, PartialLine<R, S>>();
  if (resume) {
    mkdirSync(dirname(resume.file), { recursive: true });
    // rewrite the partial file with what is kept, so the lines after a cut-off one are not appended to it
    writeFileSync(resume.file, [JSON.stringify({ key: resume.key, task: task.name }), ...[...before.values()].map((p) => JSON.stringify(p))].join('\n') + '\n');
  }
  let done = 0;
  let resumed = 0;
  const out = await Promise.all(items.map((item) => {
    const id = task.key(item);
    const prior = before.get(id);
    if (prior) {
      resumed++;
      opts.onProgress?.(++done, total);
      return Promise.resolve(prior);
    }
    return limiter.run(async (): Promise<PartialLine<R, S>> => {
      const rec = new SampleRecorder();
      const result = await task.solve(item, rec);
      const line = { id, result, samples: task.samples(item, result, rec.calls) };
      if (resume) appendFileSync(resume.file, JSON.stringify(line) + '\n');
      opts.onProgress?.(++done, total);
      return line;
    });
  }));
  return { results: out.map((x) => x.result), samples: out.flatMap((x) => x.samples), resumed };
}

/** The run is complete and its log written: the partial file is no longer needed. */
export function dropPartial(resume: RunOptions['resume']): void {
  if (resume) rmSync(resume.file, { force: true });
}
