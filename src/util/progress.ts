/**
 * Progress on stderr: done/total, rate, ETA. One redrawn line on a terminal (≤ 5×/s); on logs and CI a line every
 * few seconds, so logs stay short. Results never go here: stdout stays for the summary. `quiet` (the CLI sets it from
 * SAFEKEEP_QUIET) silences it.
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
  /** `done` when the last line was written (-1: none yet), so a log does not get the final line twice */
  private drawnAt = -1;
  private readonly tty: boolean;
  constructor(
    protected readonly label: string,
    protected readonly total: number,
    /** units already done before this run (resumed): counted as done, not in the rate */
    protected readonly resumed = 0,
    /** draw nothing (SAFEKEEP_QUIET, decided by the caller) */
    private readonly quiet = false,
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

  /** the final line: on a terminal it ends the redrawn line; on a log it is written unless the last line already says it */
  finish(): void {
    if (!this.tty && this.drawnAt === this.done) return;
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
    if (this.quiet) return;
    this.drawnAt = this.done;
    if (this.tty) this.out.write(`\r${this.line()}\x1b[K${final ? '\n' : ''}`);
    else this.out.write(`${this.line()}\n`);
  }
}

interface ItemProgressOptions {
  /** items already done before this run (resumed) */
  resumed?: number;
  /** what is counted (default 'items') */
  unit?: string;
  quiet?: boolean;
}

export class ItemProgress extends Progress {
  private readonly unit: string;
  constructor(label: string, total: number, o: ItemProgressOptions = {}) {
    super(label, total, o.resumed ?? 0, o.quiet ?? false);
    this.unit = o.unit ?? 'items';
  }

  line(): string {
    const { rate, eta } = this.rateAndEta();
    return `${this.label}: ${this.done}/${this.total} ${this.unit} ${rate.toFixed(2)}/s ETA ${formatDuration(eta)}` +
      (this.resumed > 0 ? ` (resumed at ${this.resumed})` : '');
  }
}
