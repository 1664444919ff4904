/**
 * Byte progress on stderr: done/total, rate, ETA. In a terminal one line is redrawn in place (at most 5×/s);
 * otherwise (logs, CI) a line every few seconds, so logs stay short.
 */

export function formatBytes(n: number): string {
  const u = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  let v = n;
  while (v >= 1000 && i < u.length - 1) { v /= 1000; i++; }
  return `${v.toFixed(i === 0 ? 0 : 1)} ${u[i]}`;
}

export function formatDuration(s: number): string {
  if (!Number.isFinite(s)) return '?';
  if (s < 60) return `${Math.round(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

export class ByteProgress {
  private done = 0;
  private readonly t0 = Date.now();
  private lastDraw = 0;
  private readonly tty: boolean;
  constructor(
    private readonly label: string,
    private readonly total: number,
    /** bytes already present (resumed) — counted as done but not in the rate */
    private readonly resumed = 0,
    private readonly out: NodeJS.WriteStream = process.stderr,
  ) {
    this.done = resumed;
    this.tty = Boolean(out.isTTY);
  }

  add(n: number): void {
    this.done += n;
    const now = Date.now();
    if (now - this.lastDraw >= (this.tty ? 200 : 5000)) { this.lastDraw = now; this.draw(false); }
  }

  finish(): void {
    this.draw(true);
  }

  line(): string {
    const secs = Math.max((Date.now() - this.t0) / 1000, 1e-3);
    const rate = (this.done - this.resumed) / secs;
    const eta = rate > 0 ? (this.total - this.done) / rate : Infinity;
    const pct = this.total > 0 ? Math.min(100, (100 * this.done) / this.total) : 100;
    const width = 24;
    const fill = Math.round((pct / 100) * width);
    return `${this.label} [${'#'.repeat(fill)}${'.'.repeat(width - fill)}] ${pct.toFixed(0).padStart(3)}% ` +
      `${formatBytes(this.done)}/${formatBytes(this.total)} ${formatBytes(rate)}/s ETA ${formatDuration(eta)}`;
  }

  private draw(final: boolean): void {
    if (this.tty) this.out.write(`\r${this.line()}\x1b[K${final ? '\n' : ''}`);
    else this.out.write(`${this.line()}\n`);
  }
}
