// Loads every @noble module the SDK imports with TextEncoder, TextDecoder and crypto removed, as
// CommonJS (what Metro resolves) and as ESM; run by test/hermes.test.ts in a child process.
// argv[2]: the SDK's package.json (resolution starts there).
import { createRequire } from "node:module";

delete globalThis.TextEncoder;
delete globalThis.TextDecoder;
Object.defineProperty(globalThis, "crypto", { value: undefined, configurable: true });
const require = createRequire(process.argv[2]);
for (const m of ["@noble/curves/ed25519", "@noble/ciphers/chacha", "@noble/hashes/hmac", "@noble/hashes/sha256"]) {
  require(m);
  await import(require.resolve(m).replace(/\/([^/]+)\.js$/, "/esm/$1.js"));
}
console.log("loaded");
