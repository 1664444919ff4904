/**
 * Progress lines (src/util/progress.ts): on a log (no terminal) each line is written once — the final line is not
 * repeated when the last periodic line already said it — and on a terminal the redrawn line ends with a newline.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Progress } from '../src/util/progress.ts';

class Counter extends Progress {
  line(): string {
    return `${this.label}: ${this.done}/${this.total}`;
  }
}

function sink(isTTY: boolean): { out: NodeJS.WriteStream; text: () => string } {
  let buf = '';
  const out = { isTTY, write: (s: string) => { buf += s; return true; } } as unknown as NodeJS.WriteStream;
  return { out, text: () => buf };
}

test('no terminal: the final line is written once when the last periodic line already shows it', () => {
  const s = sink(false);
  const p = new Counter('items', 1, 0, false, s.out);
  p.add(1); // the first add draws at once (nothing drawn for ≥ 5 s)
  p.finish();
  assert.equal(s.text(), 'items: 1/1\n');
});

test('no terminal: a final line after suppressed periodic ones is written', () => {
  const s = sink(false);
  const p = new Counter('items', 3, 0, false, s.out);
  p.add(1);
  p.add(1); // within 5 s of the last line: not drawn
  p.add(1);
  p.finish();
  assert.equal(s.text(), 'items: 1/3\nitems: 3/3\n');
});

test('terminal: one redrawn line, ended by a newline at finish', () => {
  const s = sink(true);
  const p = new Counter('items', 2, 0, false, s.out);
  p.add(1);
  p.finish();
  assert.equal(s.text(), '\ritems: 1/2\x1b[K\ritems: 1/2\x1b[K\n');
});

test('quiet: nothing', () => {
  const s = sink(false);
  const p = new Counter('items', 1, 0, true, s.out);
  p.add(1);
  p.finish();
  assert.equal(s.text(), '');
});
