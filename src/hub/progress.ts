import { formatDuration, Progress } from '../util/progress.ts';

export function formatBytes(n: number): string {
  const u = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  let v = n;
  while (v >= 1000 && i < u.length - 1) { v /= 1000; i++; }
  return `${v.toFixed(i === 0 ? 0 : 1)} ${u[i]}`;
}

/** Byte progress of a download: a bar, done/total, rate, ETA (mechanics in util/progress.ts). */
export class ByteProgress extends Progress {
  line(): string {
    const { rate, eta } = this.rateAndEta();
    const pct = this.total > 0 ? Math.min(100, (100 * this.done) / this.total) : 100;
    const width = 24;
    const fill = Math.round((pct / 100) * width);
    return `${this.label} [${'#'.repeat(fill)}${'.'.repeat(width - fill)}] ${pct.toFixed(0).padStart(3)}% ` +
      `${formatBytes(this.done)}/${formatBytes(this.total)} ${formatBytes(rate)}/s ETA ${formatDuration(eta)}`;
  }
}
