/**
 * Progress on stderr: done/total, rate, ETA. One redrawn line on a terminal (≤ 5×/s); on logs and CI a line every
 * few seconds, so logs stay short. Results never go here: stdout stays for the summary. SAFEKEEP_QUIET silences it.
 * `ItemProgress` counts prompts/items; the hub's `ByteProgress` counts bytes with the same mechanics.
 */

export function formatDuration(s: number): string {
  if (!Number.isFinite(s)) return '?';
  if (s < 60) return `${Math.round(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

export abstract class Progress {
  protected done = 0;
  private readonly t0 = Date.now();
  private lastDraw = 0;
  private readonly tty: boolean;
  constructor(
    protected readonly label: string,
    protected readonly total: number,
    /** units already done before this run (resumed): counted as done, not in the rate */
    protected readonly resumed = 0,
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

  /** units per second since start (resumed units excluded) and seconds left */
  protected rateAndEta(): { rate: number; eta: number } {
    const secs = Math.max((Date.now() - this.t0) / 1000, 1e-3);
    const rate = (this.done - this.resumed) / secs;
    return { rate, eta: rate > 0 ? (this.total - this.done) / rate : Infinity };
  }

  abstract line(): string;

  private draw(final: boolean): void {
    if (process.env.SAFEKEEP_QUIET) return;
    if (this.tty) this.out.write(`\r${this.line()}\x1b[K${final ? '\n' : ''}`);
    else this.out.write(`${this.line()}\n`);
  }
}

export class ItemProgress extends Progress {
  constructor(label: string, total: number, resumed = 0, private readonly unit = 'items') {
    super(label, total, resumed);
  }

  line(): string {
    const { rate, eta } = this.rateAndEta();
    return `${this.label}: ${this.done}/${this.total} ${this.unit} ${rate.toFixed(2)}/s ETA ${formatDuration(eta)}` +
      (this.resumed > 0 ? ` (resumed at ${this.resumed})` : '');
  }
}
