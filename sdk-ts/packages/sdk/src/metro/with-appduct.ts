// The Metro helper (§T11.4), exported by `@appduct/sdk/metro`: `withAppduct(config,
// {include?})` for a React Native app's Metro config. It works through `resolver.resolveRequest`
// alone: excluded builds resolve `@appduct/sdk/react-native` and `/react-native/auto` to the
// inert variant of the entry, so no session-core module reaches the bundle; included builds
// resolve them to variants that first set `globalThis.__APPDUCT_ENABLED__ = true`, which keeps
// the entry active when `__DEV__` is false. The default decision is taken when Metro resolves
// those entries, not when the config is built: `react-native bundle --dev false` sets
// `NODE_ENV=production` only after it has loaded the config. Node only, and no `metro` package
// at run time: the shapes below are the parts of Metro's config it reads and writes.

import { fileURLToPath } from "node:url";

import { isNodeEntryEnabled } from "../node/enabled.js";

/** What a Metro resolver returns (metro-resolver's `Resolution`). */
export type MetroResolution =
  | { readonly type: "sourceFile"; readonly filePath: string }
  | { readonly type: "assetFiles"; readonly filePaths: readonly string[] }
  | { readonly type: "empty" };

/**
 * The resolution context Metro hands a custom resolver. Only `resolveRequest` (Metro's own
 * resolver, to chain to) is read here; the rest passes through untouched.
 */
export interface MetroResolutionContext {
  readonly resolveRequest: MetroResolver;
  readonly [key: string]: unknown;
}

/**
 * `resolver.resolveRequest` of a Metro config. Declared as a method type so Metro's own
 * `CustomResolver`, whose context type is wider than the one above, is assignable to it.
 */
export type MetroResolver = {
  resolve(context: MetroResolutionContext, moduleName: string, platform: string | null): MetroResolution;
}["resolve"];

/** The parts of a Metro config (`metro-config`'s `InputConfigT` or `ConfigT`) the helper touches. */
export interface MetroConfigLike {
  resolver?: { resolveRequest?: MetroResolver | null; [key: string]: unknown };
  [key: string]: unknown;
}

export interface WithAppductOptions {
  /**
   * Whether the real React Native entry goes into the bundle. Default: `APPDUCT_ENABLED`
   * (`1`/`true` include, `0`/`false` exclude, anything else throws), else `true` unless
   * `NODE_ENV` is `production`; read when Metro resolves the entry.
   */
  include?: boolean;
}

type Env = Record<string, string | undefined>;

// This file sits two levels below the package root both as source (src/metro) and as built
// (dist/metro); the paths below name built files of this same copy of the package.
const PACKAGE_ROOT = new URL("../../", import.meta.url);
const built = (file: string): string => fileURLToPath(new URL(`dist/react-native/${file}`, PACKAGE_ROOT));

/** The inert variant of the React Native entry, for both specifiers in excluded builds. */
export const INERT_REACT_NATIVE_ENTRY = built("inert.js");

/** Each React Native specifier and the variant an included build resolves it to. */
export const ENABLED_REACT_NATIVE_ENTRIES: ReadonlyMap<string, string> = new Map([
  ["@appduct/sdk/react-native", built("enabled.js")],
  ["@appduct/sdk/react-native/auto", built("auto-enabled.js")],
]);

/**
 * Whether a build includes the real React Native entry: `include` when given, else from
 * `APPDUCT_ENABLED` and `NODE_ENV` in `env`. Throws on an `APPDUCT_ENABLED` that is not
 * `1`, `true`, `0` or `false` (trimmed, any ASCII case), naming the variable.
 */
export function decideInclude(include: boolean | undefined, env: Env): boolean {
  if (include === undefined) return isNodeEntryEnabled(env);
  if (typeof include !== "boolean") throw new TypeError(`withAppduct: include must be a boolean; got ${JSON.stringify(include)}`);
  return include;
}

/**
 * Returns a copy of a Metro config whose `resolver.resolveRequest` answers the two React Native
 * entry specifiers (§T11.4): the inert variant unless included, else the entry behind
 * `globalThis.__APPDUCT_ENABLED__ = true` (it matters only where `__DEV__` is false, so debug
 * builds carry it too). Every other request goes to the config's own `resolveRequest`, else to
 * Metro's. `APPDUCT_ENABLED` is checked here (a bad value throws now) and read again, with
 * `NODE_ENV`, at each resolution of an entry. Apply it to the final config object, after any
 * `mergeConfig`: a later merge replaces the resolver.
 */
export function withAppduct<C extends MetroConfigLike>(config: C, options: WithAppductOptions = {}): C & MetroConfigLike {
  if (config === null || typeof config !== "object" || Array.isArray(config)) {
    throw new TypeError("withAppduct: config must be a Metro config object (wrap the object a metro.config.js exports)");
  }
  const include = options?.include;
  // process.env itself, not a copy: resolutions read it as it is then.
  const env: Env = process.env;
  decideInclude(include, env);

  const upstream = config.resolver?.resolveRequest ?? null;
  const resolveRequest: MetroResolver = (context, moduleName, platform) => {
    const enabled = ENABLED_REACT_NATIVE_ENTRIES.get(moduleName);
    if (enabled !== undefined) return { type: "sourceFile", filePath: decideInclude(include, env) ? enabled : INERT_REACT_NATIVE_ENTRY };
    return (upstream ?? context.resolveRequest)(context, moduleName, platform);
  };
  return { ...config, resolver: { ...config.resolver, resolveRequest } } as C;
}
