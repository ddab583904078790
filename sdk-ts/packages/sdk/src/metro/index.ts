// @appduct/sdk/metro (§T11.4): the Metro helper, for a React Native app's metro.config.js.
// Node only; no runtime dependency on `metro`.

export { withAppduct } from "./with-appduct.js";
export type { MetroConfigLike, MetroResolution, MetroResolutionContext, MetroResolver, WithAppductOptions } from "./with-appduct.js";
