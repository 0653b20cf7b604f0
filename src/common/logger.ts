/**
 * Structured, leveled logging: one JSON object per line on stderr (journald and `kubectl logs`-style
 * collectors read that directly). bigint values are written as decimal strings.
 */

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
export const LOG_LEVELS: readonly LogLevel[] = ['debug', 'info', 'warn', 'error'];

export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  /** A logger that adds these fields to every line. */
  child(fields: LogFields): Logger;
  isEnabled(level: LogLevel): boolean;
}

function replacer(_key: string, value: unknown): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Error) return { message: value.message, name: value.name };
  return value;
}

/** The daemon's logger: its level (shared by every child) can change while it runs (a config reload). */
export interface RootLogger extends Logger {
  setLevel(level: LogLevel): void;
}

class JsonLogger implements RootLogger {
  constructor(
    /** Shared with every child, so one setLevel changes them all. */
    private readonly threshold: { min: number },
    private readonly base: LogFields,
    private readonly write: (line: string) => void,
  ) {}

  private log(level: LogLevel, msg: string, fields?: LogFields): void {
    if (LOG_LEVELS.indexOf(level) < this.threshold.min) return;
    const record = { time: new Date().toISOString(), level, msg, ...this.base, ...fields };
    this.write(JSON.stringify(record, replacer) + '\n');
  }

  debug(msg: string, fields?: LogFields) { this.log('debug', msg, fields); }
  info(msg: string, fields?: LogFields) { this.log('info', msg, fields); }
  warn(msg: string, fields?: LogFields) { this.log('warn', msg, fields); }
  error(msg: string, fields?: LogFields) { this.log('error', msg, fields); }

  child(fields: LogFields): Logger {
    return new JsonLogger(this.threshold, { ...this.base, ...fields }, this.write);
  }

  isEnabled(level: LogLevel): boolean {
    return LOG_LEVELS.indexOf(level) >= this.threshold.min;
  }

  setLevel(level: LogLevel): void {
    this.threshold.min = LOG_LEVELS.indexOf(level);
  }
}

/** A logger writing JSON lines at or above `level` (to stderr unless told otherwise). */
export function createLogger(level: LogLevel, write: (line: string) => void = (l) => process.stderr.write(l)): RootLogger {
  return new JsonLogger({ min: LOG_LEVELS.indexOf(level) }, {}, write);
}

/** A logger that drops everything, for unit tests. */
export const silentLogger: Logger = createLogger('error', () => {});
