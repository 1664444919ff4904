/**
 * An evaluation's progress as the harness reports it (`onProgress(done, total)`), drawn by the one progress line
 * every long command uses (util/progress.ts: rate and ETA on stderr, redrawn on a terminal, a line every few seconds
 * on a log, nothing under SAFEKEEP_QUIET).
 */
import { ItemProgress } from '../util/progress.ts';
import { quietEnv } from './env.ts';

export function progressLine(label: string, unit = 'items'): (done: number, total: number) => void {
  let p: ItemProgress | null = null;
  let seen = 0;
  let of = 0;
  return (done, total) => {
    // a new run on the same options (another task, another total) starts a new line
    if (!p || total !== of || done < seen) [p, seen, of] = [new ItemProgress(label, total, { unit, quiet: quietEnv() }), 0, total];
    p.add(done - seen);
    seen = done;
    if (done === total) p.finish();
  };
}
