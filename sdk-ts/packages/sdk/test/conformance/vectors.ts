// Locates and loads the shared conformance vectors (§D15), and tracks which files a suite
// consumed so an unconsumed `*.json` fails the run.

import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** `sdk-ts/`, the workspace root. */
export const SDK_TS_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");

/**
 * The vector directory: `APPDUCT_CONFORMANCE_DIR` when set (a relative value is read from the
 * repository root, as `.ci/run` does), else the in-repository copy `protocol/tests/vectors/appduct-v2`.
 */
export function conformanceDir(): string {
  const override = process.env.APPDUCT_CONFORMANCE_DIR;
  if (override !== undefined && override !== "") {
    return path.isAbsolute(override) ? override : path.resolve(SDK_TS_ROOT, "..", override);
  }
  return path.resolve(SDK_TS_ROOT, "../protocol/tests/vectors/appduct-v2");
}

export class VectorSet {
  readonly dir: string;
  readonly files: string[];
  private readonly consumed = new Set<string>();

  /** Throws when the directory is missing or holds no `*.json` file. */
  constructor(dir: string) {
    if (!existsSync(dir) || !statSync(dir).isDirectory()) {
      throw new Error(`conformance vectors not found at ${dir} (set APPDUCT_CONFORMANCE_DIR)`);
    }
    this.dir = dir;
    this.files = readdirSync(dir).filter((f) => f.endsWith(".json")).sort();
    if (this.files.length === 0) {
      throw new Error(`no *.json conformance vectors in ${dir}`);
    }
  }

  /** Parses one vector file and marks it consumed. */
  load<T>(file: string): T {
    this.consumed.add(file);
    return JSON.parse(readFileSync(path.join(this.dir, file), "utf8")) as T;
  }

  unconsumed(): string[] {
    return this.files.filter((f) => !this.consumed.has(f));
  }
}
