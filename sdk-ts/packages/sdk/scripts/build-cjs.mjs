// CommonJS copies of two entries, for test runners that load tests as CommonJS (Jest, and so
// Detox): `require("@appduct/sdk/inert")` loads `dist/inert/index.cjs` (the platform entries map
// to it in Jest, README "Jest") and `require("@appduct/sdk/client")` loads
// `dist/client/index.cjs`. Each is one bundled file; Node built-ins stay external.

import { chmodSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { build } from "esbuild";

const PACKAGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

const common = { bundle: true, format: "cjs", target: "es2022", logLevel: "warning" };
await build({
  ...common,
  entryPoints: [path.join(PACKAGE_DIR, "src", "inert", "index.ts")],
  outfile: path.join(PACKAGE_DIR, "dist", "inert", "index.cjs"),
  platform: "neutral",
});
await build({
  ...common,
  entryPoints: [path.join(PACKAGE_DIR, "src", "client", "index.ts")],
  outfile: path.join(PACKAGE_DIR, "dist", "client", "index.cjs"),
  platform: "node",
  packages: "external",
});

// The `appduct-sdk` bin (§T17) runs as a script: tsc writes it without the executable bit.
chmodSync(path.join(PACKAGE_DIR, "dist", "cli", "main.js"), 0o755);
