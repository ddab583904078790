// `@appduct/sdk/react-native` as the Metro helper resolves it in included builds (§T11.4):
// the flag first, then the real entry, which then stays active in a release build.

import "./enable-flag.js";

export * from "./index.js";
