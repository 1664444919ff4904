/**
 * Item progress on stderr: done/total, rate, ETA. One redrawn line on a terminal (≤ 5×/s); on logs and CI a line
 * every few seconds. Results never go here: stdout stays for the summary.
 */
import { formatDuration } from '../hub/progress.ts';

export class ItemProgress {
  private done = 0;
  private readonly t0 = Date.now();
  private lastDraw = 0;
  private readonly tty: boolean;
  constructor(
    private readonly label: string,
    private readonly total: number,
    /** items already done before this run (resumed): counted as done, not in the rate */
    private readonly resumed = 0,
    private readonly unit = 'items',
    private readonly out: NodeJS.WriteStream = process.stderr,
  ) {
    this.done = resumed;
    this.tty = Boolean(out.isTTY);
  }

  add(n: number): void {
    this.done += n;
    const now = Date.now();
    if (now - this.lastDraw >= (this.tty ? 200 : 5000)) {
      this.lastDraw = now;
      this.draw(false);
    }
  }

  finish(): void {
    this.draw(true);
  }

  line(): string {
    const secs = Math.max((Date.now() - this.t0) / 1000, 1e-3);
    const rate = (this.done - this.resumed) / secs;
    const eta = rate > 0 ? (this.total - this.done) / rate : Infinity;
    return `${this.label}: ${this.done}/${this.total} ${this.unit} ${rate.toFixed(2)}/s ETA ${formatDuration(eta)}` +
      (this.resumed > 0 ? ` (resumed at ${this.resumed})` : '');
  }

  private draw(final: boolean): void {
    if (process.env.SAFEKEEP_QUIET) return;
    if (this.tty) this.out.write(`\r${this.line()}\x1b[K${final ? '\n' : ''}`);
    else this.out.write(`${this.line()}\n`);
  }
}
