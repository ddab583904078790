// Builds the SDK and the playground once before any test file runs: the export-map, bundle and
// host tests run the build output (dist), as published code and spawned devices do.

import { execFileSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.dirname(fileURLToPath(import.meta.url));

export default function setup(): void {
  const tsc = path.join(ROOT, "node_modules", "typescript", "bin", "tsc");
  for (const project of ["packages/sdk/tsconfig.build.json", "playground/tsconfig.build.json"]) {
    execFileSync(process.execPath, [tsc, "-p", path.join(ROOT, project)], { stdio: "inherit" });
  }
  // The SDK's CommonJS inert entry (`npm run build` does the same).
  execFileSync(process.execPath, [path.join(ROOT, "packages/sdk/scripts/build-cjs.mjs")], { stdio: "inherit" });
}
