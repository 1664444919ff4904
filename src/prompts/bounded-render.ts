/**
 * Rendering a chat template within bounds. A template comes with a model folder (a hub download, a file someone
 * handed us) and @huggingface/jinja runs it unbounded: `range(2000000000)` builds a two-billion-element array,
 * `{% set ns.a = ns.a + ns.a %}` in a loop doubles one, and either takes the process down natively (out of memory),
 * beyond any try/catch; nested loops can spin for hours. Here the template runs with
 *   - `range` refusing more than MAX_RANGE elements (real templates iterate over messages, tools, a few indices),
 *   - a step budget: every node the interpreter evaluates and every loop iteration counts, and so does the
 *     wall-clock time,
 *   - a size budget: every string, list or mapping an expression produces counts its length, so doubling and
 *     output growth stop long before memory does (scaled by the input, so a long conversation still renders),
 * and exceeding any of them is one SafekeepError, never a crash or a hang.
 * Globals are those of @huggingface/jinja's `Template.render` (the same `strftime_now`), with `range` bounded.
 */
import { Environment, Interpreter as JinjaInterpreter, type Template } from '@huggingface/jinja';
import { SafekeepError } from '../util/errors.ts';

/** Most elements one `range(...)` may produce. */
export const MAX_RANGE = 1_000_000;
/** Most interpreter steps (node evaluations) one rendering may take. */
export const MAX_STEPS = 5_000_000;
/** Steps a loop is charged per item of what it iterates over, before its body runs. */
const LOOP_ITEM_STEPS = 4;
/** Most wall-clock time one rendering may take. */
export const MAX_RENDER_MS = 10_000;
/** Size budget: this many units (characters, list elements, mapping entries produced), plus SIZE_PER_INPUT_CHAR per input character. */
const BASE_SIZE_BUDGET = 16 * 1024 * 1024;
const SIZE_PER_INPUT_CHAR = 16;

/** Thrown inside the interpreter; turned into the SafekeepError of the template by the caller. */
export class TemplateBudgetError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TemplateBudgetError';
  }
}

function boundedRange(start: number, stop?: number, step = 1): number[] {
  if (stop === undefined) {
    stop = start;
    start = 0;
  }
  if (![start, stop, step].every((x) => typeof x === 'number' && Number.isFinite(x))) throw new Error('range() takes finite numbers');
  if (step === 0) throw new Error('range() step must not be zero');
  const n = step > 0 ? Math.ceil((stop - start) / step) : Math.ceil((start - stop) / -step);
  if (n > MAX_RANGE) throw new TemplateBudgetError(`range() of ${n} elements (at most ${MAX_RANGE})`);
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push(start + i * step);
  return out;
}

// @huggingface/jinja's strftime_now, unchanged (its module does not export it)
function strftimeNow(format: string): string {
  const date = new Date();
  const monthLong = new Intl.DateTimeFormat(undefined, { month: 'long' });
  const monthShort = new Intl.DateTimeFormat(undefined, { month: 'short' });
  const pad2 = (n: number) => (n < 10 ? '0' + n : n.toString());
  return format.replace(/%[YmdbBHM%]/g, (token) => {
    switch (token) {
      case '%Y': return date.getFullYear().toString();
      case '%m': return pad2(date.getMonth() + 1);
      case '%d': return pad2(date.getDate());
      case '%b': return monthShort.format(date);
      case '%B': return monthLong.format(date);
      case '%H': return pad2(date.getHours());
      case '%M': return pad2(date.getMinutes());
      case '%%': return '%';
      default: return token;
    }
  });
}

/** Nodes that only hand back a value that already exists (no new string or list is made). */
const NO_ALLOCATION = new Set(['Identifier', 'MemberExpression', 'StringLiteral', 'IntegerLiteral', 'FloatLiteral', 'Comment']);

// the package's declarations reach its runtime types through extensionless imports, which this project's module
// resolution does not follow: the little used here is declared here
interface JinjaNode { type: string }
interface JinjaValue { type: string; value: unknown }
interface InterpreterLike {
  evaluate(node: JinjaNode | undefined, env: unknown): JinjaValue;
  evaluateBlock(statements: JinjaNode[], env: unknown): JinjaValue;
  evaluateFor(node: JinjaNode & { iterable: JinjaNode }, env: unknown): JinjaValue;
  run(program: unknown): JinjaValue;
}
type Evaluate = InterpreterLike['evaluate'];
const Interpreter = JinjaInterpreter as unknown as new (env: unknown) => InterpreterLike;

class BoundedInterpreter extends Interpreter {
  private steps = 0;
  private size = 0;
  private readonly deadline: number;

  constructor(env: unknown, private readonly sizeBudget: number) {
    super(env);
    this.deadline = performance.now() + MAX_RENDER_MS;
  }

  private step(): void {
    if (++this.steps > MAX_STEPS) throw new TemplateBudgetError(`more than ${MAX_STEPS} steps`);
    if ((this.steps & 255) === 0 && performance.now() > this.deadline) throw new TemplateBudgetError(`more than ${MAX_RENDER_MS / 1000} s`);
  }

  /** the iterable of the loop being entered: a loop goes over all of it (setting up a scope per item) before its body runs */
  private loopIterable: JinjaNode | null = null;

  override evaluateFor(...args: Parameters<InterpreterLike['evaluateFor']>): JinjaValue {
    const node = args[0];
    this.loopIterable = node.iterable.type === 'SelectExpression' ? (node.iterable as unknown as { lhs: JinjaNode }).lhs : node.iterable;
    return super.evaluateFor(...args);
  }

  // a loop runs its body through here once per iteration, even an empty body that evaluates nothing
  override evaluateBlock(...args: Parameters<InterpreterLike['evaluateBlock']>): JinjaValue {
    this.step();
    return super.evaluateBlock(...args);
  }

  override evaluate(...args: Parameters<Evaluate>): ReturnType<Evaluate> {
    this.step();
    const r = super.evaluate(...args);
    const node = args[0];
    if (node !== undefined && node === this.loopIterable) {
      this.loopIterable = null;
      const v = r.value as unknown;
      // each item costs the loop a scope and a loop object, several steps' worth
      const items = Array.isArray(v) ? v.length : v instanceof Map ? v.size : 0;
      this.steps += LOOP_ITEM_STEPS * items;
      if (this.steps > MAX_STEPS) throw new TemplateBudgetError(`more than ${MAX_STEPS} steps`);
    }
    if (node && !NO_ALLOCATION.has(node.type)) {
      const v = r.value as unknown;
      const n = typeof v === 'string' || Array.isArray(v) ? v.length : v instanceof Map ? v.size : 0;
      this.size += n;
      if (this.size > this.sizeBudget) throw new TemplateBudgetError(`more than ${this.sizeBudget} characters or elements produced`);
    }
    return r;
  }
}

/** Characters in the template's input (strings, keys) — what the size budget scales with. */
function inputChars(v: unknown, depth = 0): number {
  if (typeof v === 'string') return v.length;
  if (depth > 64 || v === null || typeof v !== 'object') return 1;
  let n = 0;
  if (Array.isArray(v)) for (const x of v) n += inputChars(x, depth + 1) + 1;
  else for (const [k, x] of Object.entries(v)) n += k.length + inputChars(x, depth + 1) + 1;
  return n;
}

/**
 * `template.render(items)` within the bounds above. Throws TemplateBudgetError when a bound is hit; other errors are
 * the template's own (raise_exception, a bad operation) as @huggingface/jinja throws them.
 */
export function renderBounded(template: Template, items: Record<string, unknown>): string {
  const env = new Environment();
  env.set('false', false);
  env.set('true', true);
  env.set('none', null);
  env.set('raise_exception', (msg: unknown) => {
    throw new Error(String(msg));
  });
  env.set('strftime_now', strftimeNow);
  env.set('True', true);
  env.set('False', false);
  env.set('None', null);
  for (const [k, v] of Object.entries(items)) env.set(k, v);
  // set last: a template variable named `range` does not unbound it
  env.set('range', boundedRange);
  const interpreter = new BoundedInterpreter(env, BASE_SIZE_BUDGET + SIZE_PER_INPUT_CHAR * inputChars(items));
  const out = interpreter.run(template.parsed).value as unknown;
  if (typeof out !== 'string') throw new Error('the template rendered no text');
  return out;
}

/** A bound hit while rendering, as the one error a user sees. */
export function budgetError(source: string, e: TemplateBudgetError): SafekeepError {
  return new SafekeepError(`chat template ${source}: rendering stopped, the template exceeds safekeep's bounds (${e.message})`);
}
