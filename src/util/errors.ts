/**
 * One error type for everything a user can get wrong (bad checkpoint, bad data row, missing template...).
 * The CLI prints `safekeep: <message>` and exits with `exitCode` (2 = bad input), never a stack dump.
 */
export class SafekeepError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 2) {
    super(message);
    this.name = 'SafekeepError';
    this.exitCode = exitCode;
  }
}

export function isSafekeepError(e: unknown): e is SafekeepError {
  return e instanceof SafekeepError;
}
