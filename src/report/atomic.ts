/** Atomic writes live in util/atomic.ts; re-exported for the report modules. */
export { writeFileAtomic } from '../util/atomic.ts';
