/** Small path helpers for the guard; atomic writes come from util/atomic.ts. */
export { writeFileAtomic } from '../util/atomic.ts';
